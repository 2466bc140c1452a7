"""Model sources beside the zoo: models that dlperf does not define itself.

A model name with a prefix names a model from a source (docs/zoo.md, "Models from outside"):

=====================================  ==================================================
name                                   what is built
=====================================  ==================================================
``hf:TYPE`` / ``hf:PATH/config.json``  a Hugging Face transformers model with random
                                       weights from the library's own config defaults for
                                       model type ``TYPE`` (``hf:gpt2``, ``hf:llama``) or
                                       from a local ``config.json``; never a download
``timm:NAME``                          ``timm.create_model(NAME, pretrained=False)``
``file:PATH.py:FUNCTION``              what ``FUNCTION`` in the Python file returns: the
                                       model, a batch maker and the loss (contract in
                                       :mod:`dlperf.zoo.sources.custom.contract`)
``NAME`` (no prefix)                   an entry point ``NAME`` of group ``dlperf.models``
                                       that an installed package registers (same contract
                                       as ``file:``); zoo names come first
=====================================  ==================================================

Every name takes options after ``?``, ``&``-separated: ``hf:llama?layers=4&hidden=512``,
``timm:resnet50?classes=10``, ``file:my.py:build?width=256``. Values are read as int, float,
``true``/``false`` or else a string (:func:`parse_value`).

Each source is a package ``dlperf.zoo.sources.<source>`` whose specs have ``family =
"sources.<source>"``, so the adapters' seam (``dlperf.zoo.<family>.<framework>_impl`` with
``build(spec)``, ``synthetic_batch`` and ``loss_fn``) finds its implementations without a
change. In each package ``source.py`` turns a name into a spec (:data:`SOURCES`), from the
framework-free part (``spec.py``; ``contract.py`` for ``file:``) and the counts of a
``<framework>_impl``. The spec's parameter count comes from the built model and its FLOPs
from the framework's own counter (``torch.utils.flop_counter.FlopCounterMode``);
``spec.flops_source`` says which. This module imports no framework; name helpers are in
:mod:`dlperf.zoo.sources.names`.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import re
from pathlib import Path

from dlperf.errors import ConfigError
from dlperf.zoo.sources.names import ENTRY_POINT_GROUP, join_options, parse_value, split_options
from dlperf.zoo.spec import ModelSpec

#: prefix -> the module whose ``resolve(body, name)`` makes the spec.
SOURCES: dict[str, str] = {
    "hf": "dlperf.zoo.sources.hf.source",
    "timm": "dlperf.zoo.sources.timm.source",
    "file": "dlperf.zoo.sources.custom.source",
}

_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):(.*)$", re.S)


def is_source_name(name: str) -> bool:
    """True for a name with a source prefix (``hf:``, ``timm:``, ``file:``, or an unknown
    ``word:`` prefix, which :func:`resolve` refuses with the known ones)."""
    return _PREFIX.match(name) is not None


def entry_point_names() -> list[str]:
    """Names of the models that installed packages register (group ``dlperf.models``)."""
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def resolve(name: str) -> ModelSpec | None:
    """The spec of model ``name`` from a source, or None if ``name`` names no source model (no
    prefix and no entry point of that name). Cached per name (and, for ``file:``, the file's
    modification time, so an edited file is read again): a source spec builds the model once
    (on PyTorch's meta device where the source allows) to count its parameters and FLOPs.

    Raises:
        ConfigError: an unknown prefix (naming the known ones), or the source's own error for a
            bad name, option, file or function (see each source's ``resolve``).
        UnavailableError: the source's library (transformers, timm, torch) is not installed.

    A ``file:``, ``hf:`` or ``timm:`` spec is made in a child process with a time and a memory
    limit inside :func:`dlperf.zoo.sources.custom.isolated.bounded` (``dlperf run`` and
    ``sweep``).
    """
    stamp = _file_stamp(name)
    m = _PREFIX.match(name)
    if m is not None and m.group(1) in SOURCES:  # user code or user sizes: bounded, in a child
        from dlperf.zoo.sources.custom import isolated

        bound = isolated.current_bound()
        if bound is not None:
            return isolated.resolve(name, stamp, bound)
    return _resolve(name, stamp)


def _file_stamp(name: str) -> int:
    """The modification time (ns) of a ``file:`` name's file, else 0."""
    if not name.startswith("file:"):
        return 0
    path = name[5:].partition("?")[0].rpartition(":")[0]
    try:
        return Path(path).expanduser().stat().st_mtime_ns
    except OSError:
        return 0


@functools.lru_cache(maxsize=128)
def _resolve(name: str, stamp: int) -> ModelSpec | None:
    m = _PREFIX.match(name)
    if m is not None:
        prefix, body = m.group(1), m.group(2)
        if prefix not in SOURCES:
            # prefixes are 2 to 4 letters: one letter off is a ratio of 0.5 (difflib)
            close = difflib.get_close_matches(prefix, list(SOURCES), n=1, cutoff=0.5)
            raise ConfigError(f"unknown model source {prefix + ':'!r} in {name!r}"
                              f"{f'; did you mean {close[0]!r}?' if close else ';'} sources: "
                              f"{', '.join(p + ':' for p in sorted(SOURCES))}")
        return importlib.import_module(SOURCES[prefix]).resolve(body, name)
    base = name.partition("?")[0]
    if base in entry_point_names():
        from dlperf.zoo.sources.custom.source import resolve_entry_point

        return resolve_entry_point(name)
    return None


__all__ = ["ENTRY_POINT_GROUP", "SOURCES", "entry_point_names", "is_source_name",
           "join_options", "parse_value", "resolve", "split_options"]

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
                                       :mod:`dlperf.zoo.sources.custom.spec`)
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
change. The spec's parameter count comes from the built model and its FLOPs from the
framework's own counter (``torch.utils.flop_counter.FlopCounterMode``); ``spec.flops_source``
says which. This module imports no framework.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import re
from collections.abc import Mapping
from pathlib import Path

from dlperf.errors import ConfigError
from dlperf.zoo.spec import ModelSpec

#: prefix -> the module whose ``resolve(body, options, name)`` makes the spec.
SOURCES: dict[str, str] = {
    "hf": "dlperf.zoo.sources.hf.spec",
    "timm": "dlperf.zoo.sources.timm.spec",
    "file": "dlperf.zoo.sources.custom.spec",
}

#: The entry-point group through which an installed package registers models.
ENTRY_POINT_GROUP = "dlperf.models"

_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):(.*)$", re.S)


def parse_value(text: str) -> int | float | bool | str:
    """An option value: ``"4"`` -> 4, ``"1e-3"`` -> 0.001, ``"true"``/``"false"`` -> bool,
    anything else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def split_options(name: str, text: str) -> tuple[str, dict[str, int | float | bool | str]]:
    """``"gpt2?layers=2&hidden=64"`` -> ``("gpt2", {"layers": 2, "hidden": 64})``.

    Raises:
        ConfigError: an option without ``=`` or a key given twice (``name`` is named).
    """
    body, _, query = text.partition("?")
    options: dict[str, int | float | bool | str] = {}
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise ConfigError(f"model {name!r}: option {part!r} is not KEY=VALUE; write options "
                              f"as NAME?key=value&key=value")
        if key in options:
            raise ConfigError(f"model {name!r}: option {key!r} is given twice")
        options[key] = parse_value(value)
    return body, options


def join_options(body: str, options: Mapping[str, object]) -> str:
    """The canonical form ``body?k1=v1&k2=v2`` (keys sorted; no ``?`` without options), so
    the same model written with its options in another order has one name."""
    if not options:
        return body
    return body + "?" + "&".join(f"{k}={_text(v)}" for k, v in sorted(options.items()))


def _text(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


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
    """
    return _resolve(name, _file_stamp(name))


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
        from dlperf.zoo.sources.custom.spec import resolve_entry_point

        return resolve_entry_point(name)
    return None


__all__ = ["ENTRY_POINT_GROUP", "SOURCES", "entry_point_names", "is_source_name",
           "join_options", "parse_value", "resolve", "split_options"]

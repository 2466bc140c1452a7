"""``file:`` names and ``dlperf.models`` entry points to specs: the user's function is called
(:mod:`dlperf.zoo.sources.custom.contract`) and the framework implementation that accepts its
model checks and counts the parts."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError, DlperfError, with_article
from dlperf.zoo.sources.custom.contract import (
    CONTRACT,
    FAMILY,
    call,
    entry_point,
    file_function,
    load_entry_point,
    raised,
)
from dlperf.zoo.sources.names import ENTRY_POINT_GROUP, join_options, split_options
from dlperf.zoo.spec import ModelSpec, code_fingerprint

#: Implementation modules that may accept a model (each has ``accepts(model)`` and
#: ``inspect_parts(parts, name)``); the first that accepts describes it. TensorFlow's comes
#: first: its ``accepts`` imports nothing, so a Keras model's process (the TensorFlow worker)
#: does not import torch or Flax to be told no.
IMPLS = ("dlperf.zoo.sources.custom.tensorflow_impl", "dlperf.zoo.sources.custom.torch_impl",
         "dlperf.zoo.sources.custom.jax_impl")
#: Implementation modules (importing no framework themselves) whose ``spec_scope()`` context
#: the user's function is called and its parts inspected in, for the spec: TensorFlow's stages
#: them in a ``tf.Graph`` so that its runtime does not start (tensorflow_impl's docstring).
SCOPED = ("dlperf.zoo.sources.custom.tensorflow_impl",)


def impl_for(model: Any, name: str) -> Any:
    """The implementation module (of :data:`IMPLS`) that accepts ``model``.

    Raises:
        ConfigError: none does (dlperf runs PyTorch and Flax modules and Keras models from a
            file or entry point).
    """
    for mod_name in IMPLS:
        try:
            impl = importlib.import_module(mod_name)
        except ImportError:
            continue
        if impl.accepts(model):
            return impl
    raise ConfigError(f"model {name!r}: the model returned is "
                      f"{with_article(type(model).__module__)}.{type(model).__qualname__}; "
                      "file: and entry-point models are "
                      "a torch.nn.Module (PyTorch), a flax.linen.Module (JAX) or a keras.Model "
                      "(TensorFlow) for now")


@contextlib.contextmanager
def _spec_scopes() -> Iterator[None]:
    """Within: the ``spec_scope()`` of each module of :data:`SCOPED`."""
    with contextlib.ExitStack() as stack:
        for mod_name in SCOPED:
            stack.enter_context(importlib.import_module(mod_name).spec_scope())
        yield


def _spec(name: str, fn: Callable[..., Any], options: dict[str, Any], hyper: dict[str, Any],
          source: str, code: str | None = None) -> ModelSpec:
    with _spec_scopes():
        try:
            parts = call(fn, options, name)
        except (KeyboardInterrupt, DlperfError):
            raise
        except Exception as e:  # noqa: BLE001 - the user's function: named, not a traceback
            raise ConfigError(f"model {name!r}: {source} raised {raised(e)} when called to "
                              "count the model; fix the function") from None
        d = impl_for(parts[0], name).inspect_parts(parts, name)
    if not d["params"]:
        raise ConfigError(f"model {name!r}: the model returned "
                          f"({with_article(type(parts[0]).__name__)}) "
                          "has no trainable parameters, and a training step has nothing to "
                          "update (the optimizer refuses an empty parameter list); return a "
                          f"model with at least one trainable layer: {CONTRACT}")
    hyper.update(name=name, kwargs=dict(options), framework=d["framework"],
                 x_dtype=d["x_dtype"])
    return ModelSpec(
        name=name, family=FAMILY, input_kind=d["input_kind"],
        input_shape=d["input_shape"], num_classes=d["num_classes"], params=d["params"],
        forward_flops_per_sample=d["forward_flops"], source=source,
        flops_source=d["flops_source"], hyper=hyper, loss="custom",
        target_shape=d["target_shape"], code=code)


def source_file_fingerprint(path: str | None) -> str | None:
    """:func:`~dlperf.zoo.spec.code_fingerprint` of the bytes of the Python file ``path``;
    None when there is none or it cannot be read (a namespace package, a zip)."""
    if not path:
        return None
    try:
        return code_fingerprint(Path(path).read_bytes())
    except OSError:
        return None


def _entry_point_file(value: str) -> str | None:
    """The source file of entry point ``value``'s module (``module:attr``), found without
    importing it; None where there is none."""
    import importlib.util

    module = value.partition(":")[0].strip()
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return origin if origin and origin.endswith(".py") else None


def resolve(body: str, name: str) -> ModelSpec:
    """The spec of ``file:<body>`` (``PATH.py:FUNCTION[?options]``); its name has the
    absolute path, so the same file is one model from any working directory.

    Raises:
        ConfigError: not ``PATH.py:FUNCTION``, no such file or function, options the function
            does not take, parts that break the contract (module docstring), or a model
            without trainable parameters.
    """
    base, options = split_options(name, body)
    path, colon, function = base.rpartition(":")
    if not colon or not path.endswith(".py") or not function.isidentifier():
        raise ConfigError(f"model {name!r}: write file:PATH.py:FUNCTION, e.g. "
                          "file:models/mlp.py:build (FUNCTION returns "
                          f"{CONTRACT})")
    abs_path = str(Path(path).expanduser().resolve())
    canonical = "file:" + join_options(f"{abs_path}:{function}", options)
    fn = file_function(abs_path, function, name)
    return _spec(canonical, fn, options,
                 {"source": "file", "path": abs_path, "function": function},
                 f"{function}() in {abs_path} (file: model)",
                 code=source_file_fingerprint(abs_path))


def resolve_entry_point(name: str) -> ModelSpec:
    """The spec of the model that entry point ``NAME`` (group ``dlperf.models``) builds;
    ``name`` is ``NAME[?options]``."""
    base, options = split_options(name, name)
    ep = entry_point(base, name)
    dist = getattr(getattr(ep, "dist", None), "name", None)
    return _spec(join_options(base, options), load_entry_point(ep, name), options,
                 {"source": "entry_point", "entry_point": base, "value": ep.value,
                  "distribution": dist},
                 f"entry point {base} = {ep.value} (group {ENTRY_POINT_GROUP}"
                 f"{', package ' + dist if dist else ''})",
                 code=source_file_fingerprint(_entry_point_file(ep.value)))

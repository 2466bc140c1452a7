"""``file:PATH.py:FUNCTION`` models and models registered as ``dlperf.models`` entry points.

Both name a function that builds the model; dlperf calls it with the name's options as
keyword arguments (``file:nets.py:mlp?width=256`` calls ``mlp(width=256)``) and it returns
three things, here for PyTorch (the framework the model is written in is read from the model;
the JAX and TensorFlow contracts are in ``jax_impl`` and ``tensorflow_impl``):

``(model, make_batch, loss)``
    * ``model``: a ``torch.nn.Module``; ``model(x)`` returns whatever ``loss`` takes;
    * ``make_batch(batch_size: int, generator: torch.Generator, device: torch.device)
      -> (x, y)``: one synthetic batch, two tensors whose first dimension is ``batch_size``,
      made on ``device`` with random draws from ``generator`` (dlperf seeds it: the same seed
      gives the same batches; it makes 4 batches before timing and cycles them);
    * ``loss(out, y) -> torch.Tensor``: a scalar (one element, floating point) to minimise.

Example (a file ``nets.py``)::

    import torch

    def mlp(width: int = 512):
        model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(),
                                    torch.nn.Linear(width, 10))
        def make_batch(batch_size, generator, device):
            x = torch.randn(batch_size, 64, generator=generator, device=device)
            y = torch.randint(0, 10, (batch_size,), generator=generator, device=device)
            return x, y
        return model, make_batch, torch.nn.functional.cross_entropy

and ``dlperf run --model file:nets.py:mlp?width=256``. A package registers the same function
as an entry point (``pyproject.toml``: ``[project.entry-points."dlperf.models"]`` ``mlp =
"nets:mlp"``) and it is then the model ``mlp`` (zoo names come first).

The function is called once when the spec is read (dlperf counts parameters and runs one
forward of a 2-sample batch from ``make_batch`` on the CPU under ``FlopCounterMode``, and
checks the three parts: ``make_batch`` and ``loss`` must take the arguments above
(:func:`check_arity`), the model must have trainable parameters) and once more for each run, which trains the model of that call:
it must build a fresh model each time. The optimizer is the zoo's default (SGD, momentum 0.9,
lr 0.01). Real data sets do not apply (the batch maker is the data).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from dlperf.errors import ConfigError, did_you_mean, with_article
from dlperf.zoo.sources.names import ENTRY_POINT_GROUP

FAMILY: Final = "sources.custom"  # Final: typed as its Literal (a spec.Family)
CONTRACT = ("(model, make_batch, loss): see docs/zoo.md, \"file: and entry-point models\"")


def raised(e: BaseException) -> str:
    """``SystemExit(3)`` / ``RuntimeError: boom``: what a user's code raised, for a message."""
    if not isinstance(e, Exception):
        return f"{type(e).__name__}({', '.join(map(repr, e.args))})"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


@functools.lru_cache(maxsize=64)
def _load_module(path: str, mtime_ns: int) -> Any:
    """Execute the Python file ``path`` once per version (``mtime_ns``) as a module.

    Raises:
        ConfigError: the file raised anything while it ran (an exception, ``SystemExit``, or
            another ``BaseException`` but ``KeyboardInterrupt``), naming the file: a model
            file that exits would otherwise end dlperf silently with its exit status.
    """
    mod_name = "dlperf_file_model_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[mod_name] = module  # dataclasses and pickling look their module up here
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except KeyboardInterrupt:
        sys.modules.pop(mod_name, None)
        raise
    except BaseException as e:  # noqa: BLE001 - the user's file: SystemExit included
        sys.modules.pop(mod_name, None)
        where = next((f"line {fr.lineno}" for fr in reversed(traceback.extract_tb(
            e.__traceback__)) if fr.filename == path), None)
        raise ConfigError(f"importing {path} raised {raised(e)}"
                          f"{f' ({where})' if where else ''}; a model file defines its "
                          "function and must import without error or exit; fix the file"
                          ) from None
    return module


def file_function(path: str, function: str, name: str) -> Callable[..., Any]:
    """The function ``function`` of the Python file ``path`` (imported once per version).

    Raises:
        ConfigError: no such file, the file fails to import (:func:`_load_module`), or it has
            no such function (the closest and all of its functions named).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"model {name!r}: no such file {str(p)!r}; give file:PATH.py:FUNCTION "
                          "with PATH relative to the working directory or absolute")
    try:
        module = _load_module(str(p), p.stat().st_mtime_ns)
    except ConfigError as e:
        raise ConfigError(f"model {name!r}: {e}") from None
    fn = getattr(module, function, None)
    if not callable(fn):
        have = sorted(k for k, v in vars(module).items()
                      if callable(v) and not k.startswith("_") and
                      getattr(v, "__module__", None) == module.__name__)
        raise ConfigError(f"model {name!r}: {p.name} has no function {function!r}"
                          f"{did_you_mean(function, have) or ';'} its functions: "
                          f"{', '.join(have) or 'none'}")
    return fn


def entry_point(base: str, name: str) -> Any:
    from importlib.metadata import entry_points

    eps = list(entry_points(group=ENTRY_POINT_GROUP).select(name=base))
    if not eps:
        raise ConfigError(f"model {name!r}: no entry point {base!r} in group "
                          f"{ENTRY_POINT_GROUP!r} (is its package installed?)")
    return eps[0]


def function_of(hyper: dict[str, Any]) -> Callable[..., Any]:
    """The model function of a ``sources.custom`` spec's ``hyper`` (the file's function, or
    the entry point's target), loaded again in this process."""
    if hyper["source"] == "file":
        return file_function(hyper["path"], hyper["function"], hyper["name"])
    return load_entry_point(entry_point(hyper["entry_point"], hyper["name"]), hyper["name"])


def load_entry_point(ep: Any, name: str) -> Callable[..., Any]:
    try:
        fn = ep.load()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - the package's code: SystemExit included
        raise ConfigError(f"model {name!r}: entry point {ep.name} = {ep.value!r} does not "
                          f"load: {e!r:.300}") from None
    if not callable(fn):
        raise ConfigError(f"model {name!r}: entry point {ep.name} = {ep.value!r} is "
                          f"{with_article(type(fn).__name__)}, not a function returning "
                          f"{CONTRACT}")
    return fn


def check_framework(hyper: dict[str, Any], framework: str, name: str) -> None:
    """Refuse to build a ``sources.custom`` model for ``framework`` (an implementation module's
    own) when its spec says the function returns a model of another framework.

    Raises:
        ConfigError: naming the model's framework and the ``--framework`` to run it with.
    """
    written = hyper.get("framework")
    if written and written != framework:
        raise ConfigError(f"model {name!r} is a {written} model (read from the model its "
                          f"function returns), not a {framework} one; run it with "
                          f"--framework {written}")


def check_arity(f: Callable[..., Any], args: tuple[str, ...], what: str, name: str) -> None:
    """Refuse a ``make_batch`` or ``loss`` (``what``) that cannot be called with the
    ``len(args)`` positional arguments dlperf passes (``args`` names them for the message, as
    the framework's contract does). A callable without a readable signature (a builtin) is
    let through: its call tells.

    Raises:
        ConfigError: naming the signature found, the one expected and docs/zoo.md.
    """
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*args)
    except TypeError:
        expected = f"{what}({', '.join(args)})"
        raise ConfigError(f"model {name!r}: the {what} returned is "
                          f"{getattr(f, '__name__', what)}{sig}, but dlperf calls {expected} "
                          f"({len(args)} positional argument{'s' if len(args) != 1 else ''}); "
                          f"define it as {expected}: see docs/zoo.md, \"file: and "
                          "entry-point models\"") from None


def call(fn: Callable[..., Any], options: dict[str, Any], name: str) -> tuple[Any, Any, Any]:
    """``fn(**options)``, checked to be a 3-tuple ``(model, make_batch, loss)`` whose batch
    maker and loss are callable.

    Raises:
        ConfigError: an option the function does not take (naming its parameters), or a
            return value of another shape (naming what came back and the contract).
    """
    try:
        inspect.signature(fn).bind(**options)
    except TypeError as e:
        params = ", ".join(inspect.signature(fn).parameters) or "none"
        raise ConfigError(f"model {name!r}: options {sorted(options)} do not fit "
                          f"{getattr(fn, '__name__', fn)}({params}): {e}") from None
    except ValueError:  # no signature (a builtin): let the call tell
        pass
    try:
        parts = fn(**options)
    except (KeyboardInterrupt, Exception):
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit from the user's function
        raise ConfigError(f"model {name!r}: {getattr(fn, '__name__', 'the function')}() raised "
                          f"{raised(e)} instead of returning {CONTRACT}") from None
    if not isinstance(parts, (tuple, list)) or len(parts) != 3:
        if isinstance(parts, (tuple, list)):
            types = ", ".join(type(p).__name__ for p in parts)
            got = with_article(f"{len(parts)}-tuple of ({types})")
        else:
            got = with_article(type(parts).__name__)
        raise ConfigError(f"model {name!r}: {getattr(fn, '__name__', 'the function')}() must "
                          f"return {CONTRACT}; it returned {got}")
    model, make_batch, loss = parts
    for what, f in (("make_batch", make_batch), ("loss", loss)):
        if not callable(f):
            raise ConfigError(f"model {name!r}: the {what} returned is "
                              f"{with_article(type(f).__name__)}, not a function; return "
                              f"{CONTRACT}")
    return model, make_batch, loss


def call_for(spec: Any, framework: str, accepts: Callable[[Any], bool], kind: str,
             parts: dict[str, tuple[Any, Any]]) -> tuple[Any, Any, Any]:
    """The ``build`` path every implementation module shares: refuse a model of another
    framework (:func:`check_framework`), call the spec's function (:func:`call`), check the
    model is one ``accepts`` takes (``kind`` names it in the error) and keep its batch maker
    and loss in ``parts`` (the module's own, by spec name).

    Raises:
        ConfigError: from the checks above, naming the contract.
    """
    check_framework(spec.hyper, framework, spec.name)
    model, make_batch, loss = call(function_of(spec.hyper), spec.hyper["kwargs"], spec.name)
    if not accepts(model):
        raise ConfigError(f"model {spec.name!r}: the function returned "
                          f"{with_article(type(model).__name__)} this time, not a {kind}; "
                          f"return {CONTRACT}")
    parts[spec.name] = (make_batch, loss)
    return model, make_batch, loss

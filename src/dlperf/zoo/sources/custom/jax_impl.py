"""JAX side of ``file:`` and entry-point models: check and count the user's Flax parts, and the
JAX adapter's hooks ``build``, ``synthetic_batch``, ``loss_fn`` (the contract in general:
:mod:`dlperf.zoo.sources.custom.contract`; for JAX, docs/zoo.md "file: and entry-point models").

For JAX the function returns ``(model, make_batch, loss)``:

* ``model``: a ``flax.linen.Module`` whose ``__call__(x, train: bool)`` returns what ``loss``
  takes; dlperf initialises it with ``model.init(key, x[:1], train=False)`` and trains with
  ``model.apply(variables, x, train=True)`` (a ``batch_stats`` collection is updated as in the
  zoo's Flax CNNs; no dropout key is given: a model with dropout is not supported yet). Its
  dtypes are its own: ``--precision`` does not change them.
* ``make_batch(batch_size: int, key: jax.Array) -> (x, y)``: one synthetic batch, two arrays
  whose first dimension is ``batch_size``, drawn with ``jax.random`` from ``key`` (dlperf calls
  it under ``jax.jit`` to place the batch, sharded in a data-parallel run; it makes 4 batches
  before timing and cycles them);
* ``loss(out, y) -> scalar``: a float scalar to minimise.

Nothing here starts XLA (a worker must set JAX's platform, threads and ``jax.distributed``
before its backend starts): the parts are checked and the parameters counted with
``jax.eval_shape``, which traces without running. The FLOPs are not counted here
(``forward_flops_per_sample`` None): the run records those of XLA's cost analysis of the
compiled step (``framework_flops``).

``build(spec)`` calls the user's function again (a fresh model for each run) and keeps that
call's batch maker and loss for the hooks, which the adapter calls after ``build``.
"""

from __future__ import annotations

import math
from typing import Any

from dlperf.errors import ConfigError
from dlperf.zoo.sources.custom.contract import call_for, check_arity
from dlperf.zoo.spec import ModelSpec

#: spec name -> (make_batch, loss) of the latest ``build`` in this process.
_PARTS: dict[str, tuple[Any, Any]] = {}
#: Samples in the (abstract) batch that checks the parts.
CHECK_BATCH = 2


def accepts(model: Any) -> bool:
    """True for a ``flax.linen.Module`` (False where Flax is not installed)."""
    try:
        import flax.linen as nn
    except ImportError:
        return False
    return isinstance(model, nn.Module)


def _describe(a: Any) -> str:
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    return f"array {tuple(shape)} {dtype}" if shape is not None else type(a).__name__


def inspect_parts(parts: tuple[Any, Any, Any], name: str) -> dict[str, Any]:
    """Describe the parts for the spec from their shapes alone (``jax.eval_shape``): a
    :data:`CHECK_BATCH`-sample batch from ``make_batch``, ``model.init`` for the parameter
    count, ``model.apply`` and the loss, which must be a float scalar.

    Returns the same keys as the PyTorch side (``input_kind`` ``tokens`` for a 2-D integer
    ``x``, else ``custom``; ``forward_flops`` None, counted at run time by XLA).

    Raises:
        ConfigError: a ``make_batch`` or ``loss`` of another signature
            (:func:`~dlperf.zoo.sources.custom.contract.check_arity`), or a batch, forward or
            loss that breaks the contract, naming what came back.
    """
    import jax
    import jax.numpy as jnp

    model, make_batch, loss = parts
    check_arity(make_batch, ("batch_size", "key"), "make_batch", name)
    check_arity(loss, ("out", "y"), "loss", name)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)  # a raw PRNG key's shape: nothing runs
    try:
        batch = jax.eval_shape(lambda k: make_batch(CHECK_BATCH, k), key)
    except Exception as e:
        raise ConfigError(f"model {name!r}: make_batch({CHECK_BATCH}, key) failed: "
                          f"{e!r:.400}") from e
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and all(
            getattr(a, "shape", ())[:1] == (CHECK_BATCH,) for a in batch)):
        got = (f"({', '.join(_describe(a) for a in batch)})"
               if isinstance(batch, (tuple, list)) else _describe(batch))
        raise ConfigError(f"model {name!r}: make_batch({CHECK_BATCH}, key) must return (x, y), "
                          f"two arrays of {CHECK_BATCH} rows; it returned {got}")
    x, y = batch
    try:
        variables = jax.eval_shape(lambda k, x_: model.init(k, x_, train=False), key, x)
        out = jax.eval_shape(lambda v, x_: model.apply(v, x_, train=True,
                                                       mutable=["batch_stats"])[0]
                             if "batch_stats" in v else model.apply(v, x_, train=True),
                             variables, x)
        value = jax.eval_shape(loss, out, y)
    except Exception as e:
        raise ConfigError(f"model {name!r}: init, forward or loss of a {CHECK_BATCH}-sample "
                          f"batch x {_describe(x)}, y {_describe(y)} failed (the model's "
                          f"__call__ must take (x, train)): {e!r:.400}") from e
    if getattr(value, "shape", None) != () or not jnp.issubdtype(value.dtype, jnp.floating):
        raise ConfigError(f"model {name!r}: loss(out, y) must return a float scalar; it "
                          f"returned {_describe(value)}")
    params = sum(math.prod(p.shape) for p in jax.tree.leaves(variables.get("params", {})))
    x_int = jnp.issubdtype(x.dtype, jnp.integer)
    out_shape = getattr(out, "shape", ())
    return {"input_kind": "tokens" if x_int and len(x.shape) == 2 else "custom",
            "input_shape": tuple(x.shape[1:]), "target_shape": tuple(y.shape[1:]),
            "num_classes": int(out_shape[-1]) if len(out_shape) > 1 else 0,
            "params": int(params), "forward_flops": None,
            "flops_source": ("not counted for the spec (nothing runs before the worker sets "
                             "JAX up); the run records XLA's cost analysis of the compiled "
                             "step (framework_flops)"),
            "framework": "jax", "x_dtype": str(x.dtype)}


def _call(spec: ModelSpec) -> tuple[Any, Any, Any]:
    return call_for(spec, "jax", accepts, "flax.linen.Module", _PARTS)


def build(spec: ModelSpec, dtype: Any = None) -> Any:  # noqa: ARG001 - the model's own dtypes
    """A fresh Flax model from the user's function (called again); its batch maker and loss
    are kept for :func:`synthetic_batch` and :func:`loss_fn`. ``dtype`` (the run's compute
    dtype) is not applied: the user's model has its own."""
    return _call(spec)[0]


def _parts(spec: ModelSpec) -> tuple[Any, Any]:
    return _PARTS[spec.name] if spec.name in _PARTS else _call(spec)[1:]


def synthetic_batch(spec: ModelSpec, batch_size: int, key: Any) -> tuple[Any, Any]:
    """The user's ``make_batch(batch_size, key)``."""
    return _parts(spec)[0](batch_size, key)


def loss_fn(spec: ModelSpec) -> Any:
    """The user's ``loss(out, y)``."""
    return _parts(spec)[1]

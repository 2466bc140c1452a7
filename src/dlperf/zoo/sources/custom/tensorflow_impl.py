"""TensorFlow side of ``file:`` and entry-point models: check and count the user's Keras parts,
and the TensorFlow adapter's hooks ``build``, ``synthetic_batch``, ``loss_fn`` and
``recurrent_layers`` (the contract in general: :mod:`dlperf.zoo.sources.custom.contract`; for
TensorFlow, docs/zoo.md "file: and entry-point models").

For TensorFlow the function returns ``(model, make_batch, loss)``:

* ``model``: a ``keras.Model`` (Keras 3, TensorFlow backend), built or not: dlperf builds it by
  calling it on a batch; ``model(x, training=True)`` returns what ``loss`` takes. Layers made
  by the function take the run's Keras policy (``--precision bf16``: ``mixed_bfloat16``), since
  the adapter sets the policy before it calls the function.
* ``make_batch(batch_size: int) -> (x, y)``: one synthetic batch, two tensors (or NumPy arrays)
  whose first dimension is ``batch_size``. dlperf seeds Python, NumPy and TensorFlow's global
  seed (``keras.utils.set_random_seed(--seed)``) before it calls it, so ``tf.random`` /
  ``keras.random`` / NumPy draws repeat from run to run; it makes 4 batches before timing, on
  the run's device, and cycles them.
* ``loss``: a Keras loss (``keras.losses.SparseCategoricalCrossentropy(from_logits=True)``) or
  any callable **in Keras's order** ``loss(y_true, y_pred)`` (the order ``model.compile``
  takes; the PyTorch and JAX contracts take ``loss(out, y)``). It returns a float scalar or one
  value per sample (``keras.losses.sparse_categorical_crossentropy``), which dlperf averages as
  Keras's ``compile`` does. A floating ``y_pred`` is cast to float32 first (as for the zoo's
  models under ``mixed_bfloat16``).

Nothing here starts TensorFlow's runtime: the worker reads the spec in its own process before
the adapter sets TensorFlow's threads, visible devices and distribution strategy, which TensorFlow
fixes when its runtime starts. So the function is called, and the parts checked, in a
``tf.Graph`` of their own (:func:`spec_scope`: the model built, its forward and the loss
staged as graph ops, nothing run): the parameter count is the
model's trainable variables (Keras's non-trainable weights, such as BatchNorm's moving
statistics, are buffers in PyTorch's terms and not counted), and the forward FLOPs come from
TensorFlow's own counter (``tf.compat.v1.profiler`` ``float_operation()``, the counter the
adapter uses for the whole step) over the ops of one forward of the check batch. Where the
runtime already runs (a notebook that used TensorFlow before) the parts run eagerly on the
check batch and the forward is counted from a ``tf.function`` trace.

``build(spec)`` calls the user's function again (a fresh model for each run) and keeps that
call's batch maker and loss for the hooks, which the adapter calls after ``build``.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator
from typing import Any

from dlperf.errors import ConfigError
from dlperf.zoo.sources.custom.contract import call_for, check_arity
from dlperf.zoo.spec import ModelSpec

#: spec name -> (make_batch, loss) of the latest ``build`` in this process.
_PARTS: dict[str, tuple[Any, Any]] = {}
#: Samples in the (staged, never run) batch that checks and counts the parts.
CHECK_BATCH = 2
#: What the forward FLOPs of a spec are (``spec.flops_source``).
FLOPS_SOURCE = ("tf.compat.v1.profiler float_operation() (TensorFlow {version}): the graph "
                "ops of one forward (training=True) of a {n}-sample batch from make_batch "
                "(staged, never run), / {n}, counted by dlperf.zoo.sources.custom; it counts every op "
                "type with a registered statistic (element-wise ops too), more than the "
                "analytic convention; train = 3 x forward")


def accepts(model: Any) -> bool:
    """True for a ``keras.Model``. Keras is not imported here: a Keras model's own module
    imported it, so a process without ``keras`` in ``sys.modules`` has none."""
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(model, keras.Model)


def _describe(a: Any) -> str:
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    if shape is None:
        return type(a).__name__
    kind = "tensor" if type(a).__module__.startswith("tensorflow") else type(a).__name__
    return f"{kind} {tuple(shape)} {getattr(dtype, 'name', dtype)}"


def _check_batch(tf: Any, batch: Any, name: str) -> tuple[Any, Any]:
    """``(x, y)`` as tensors, or ConfigError naming what ``make_batch`` returned."""
    ok = (isinstance(batch, (tuple, list)) and len(batch) == 2
          and all(tuple(getattr(a, "shape", ()))[:1] == (CHECK_BATCH,) for a in batch))
    if not ok:
        got = (f"({', '.join(_describe(a) for a in batch)})"
               if isinstance(batch, (tuple, list)) else _describe(batch))
        raise ConfigError(f"model {name!r}: make_batch({CHECK_BATCH}) must return (x, y), two "
                          f"tensors or arrays of {CHECK_BATCH} rows; it returned {got}")
    return tf.convert_to_tensor(batch[0]), tf.convert_to_tensor(batch[1])


def _float32(tf: Any, out: Any) -> Any:
    """A floating tensor ``out`` in float32 (other outputs as they are)."""
    dtype = getattr(out, "dtype", None)
    return tf.cast(out, tf.float32) if getattr(dtype, "is_floating", False) else out


def runtime_started() -> bool:
    """True once TensorFlow's runtime (its eager context) has started in this process: its
    thread pools and visible devices are fixed from then on. False where TensorFlow is not
    imported."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return False
    from tensorflow.python.eager import context

    return getattr(context.context(), "_context_handle", None) is not None


@contextlib.contextmanager
def spec_scope() -> Iterator[None]:
    """Within (where TensorFlow is imported and its runtime has not started): a fresh
    ``tf.Graph`` is the default, so the user's function makes its layers' variables (a
    ``Dropout``'s seed generator is made with the layer) and :func:`inspect_parts` stages the
    parts there, without starting the runtime. Keras's global seed generator is put back as it
    was on exit (one made inside would belong to the graph). Elsewhere it does nothing: a
    process without TensorFlow has no Keras model, and where the runtime already runs (a
    notebook that used TensorFlow) the parts are inspected eagerly."""
    if sys.modules.get("tensorflow") is None or runtime_started():
        yield
        return
    import tensorflow as tf

    try:
        from keras.src.backend.common import global_state
    except ImportError:  # pragma: no cover - another Keras layout
        global_state = None
    key = "global_seed_generator"
    kept = global_state.get_global_attribute(key) if global_state is not None else None
    try:
        with tf.Graph().as_default():
            yield
    finally:
        if global_state is not None:
            global_state.set_global_attribute(key, kept)


def _graph_flops(graph: Any) -> int:
    """TensorFlow's profiler count of the float operations of ``graph`` (nothing runs)."""
    from tensorflow.python.profiler import model_analyzer, option_builder

    opts = option_builder.ProfileOptionBuilder.float_operation()
    opts["output"] = "none"
    return int(model_analyzer.profile(graph=graph, options=opts).total_float_ops)


def _forward_flops(tf: Any, model: Any, x: Any) -> tuple[Any, int]:
    """``(out, FLOPs)`` of ``model(x, training=True)``, building the model where it is not
    built. In a graph (:func:`spec_scope`) the forward is staged twice and the profiler's count
    after the second minus that after the first is the forward's (the first also staged the
    initialisers; a ``tf.function`` trace would start the runtime); eagerly, the count of a
    ``tf.function`` trace of the built model (never run)."""
    out = model(x, training=True)
    if not tf.executing_eagerly():
        graph = tf.compat.v1.get_default_graph()
        before = _graph_flops(graph)
        out = model(x, training=True)
        return out, _graph_flops(graph) - before
    trace = tf.function(lambda x_: model(x_, training=True))
    return out, _graph_flops(trace.get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph)


def _stage(tf: Any, parts: tuple[Any, Any, Any], name: str) -> dict[str, Any]:
    """Batch, forward and loss, staged in the default graph (in :func:`spec_scope`) or run
    eagerly (TensorFlow already running); return x, y, out, the loss value and the forward's
    FLOPs (:func:`_forward_flops`)."""
    model, make_batch, loss = parts
    check_arity(make_batch, ("batch_size",), "make_batch", name)
    check_arity(loss, ("y_true", "y_pred"), "loss", name)
    try:
        batch = make_batch(CHECK_BATCH)
    except Exception as e:
        raise ConfigError(f"model {name!r}: make_batch({CHECK_BATCH}) failed: {e!r:.400}") from e
    x, y = _check_batch(tf, batch, name)
    try:
        out, flops = _forward_flops(tf, model, x)
    except Exception as e:
        raise ConfigError(f"model {name!r}: building the model or its forward of a "
                          f"{CHECK_BATCH}-sample batch x {_describe(x)} failed (model(x, "
                          f"training=True) must return what loss takes): {e!r:.400}") from e
    try:
        value = loss(y, _float32(tf, out))
    except Exception as e:
        raise ConfigError(f"model {name!r}: loss(y_true, y_pred) (Keras's order) of y "
                          f"{_describe(y)} and the model's output {_describe(out)} failed: "
                          f"{e!r:.400}") from e
    return {"x": x, "y": y, "out": out, "value": value, "flops": flops}


def inspect_parts(parts: tuple[Any, Any, Any], name: str) -> dict[str, Any]:
    """Describe the parts for the spec, staged in :func:`spec_scope`'s graph and never run
    (module docstring; eagerly where TensorFlow's runtime already ran before): a
    :data:`CHECK_BATCH`-sample batch from ``make_batch``, the model built and called, the
    loss, which must be a float scalar or one value per sample.

    Returns the same keys as the PyTorch side (``input_kind`` ``tokens`` for a 2-D integer
    ``x``, else ``custom``; ``params`` the trainable variables' elements; ``forward_flops``
    the profiler's count per sample, None where it counts 0).

    Raises:
        ConfigError: Keras on another backend than TensorFlow, or a batch, forward or loss
            that breaks the contract, naming what came back.
    """
    import keras
    import tensorflow as tf

    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise ConfigError(f"model {name!r}: Keras runs on the {backend!r} backend in this "
                          "process; dlperf trains Keras models with TensorFlow: set "
                          "KERAS_BACKEND=tensorflow (or run a Flax model with --framework jax)")
    staged = _stage(tf, parts, name)
    params = sum(math.prod(v.shape) for v in parts[0].trainable_weights)
    x, y, out, value = staged["x"], staged["y"], staged["out"], staged["value"]
    shape = tuple(getattr(value, "shape", ()) or ())
    if not (getattr(getattr(value, "dtype", None), "is_floating", False)
            and (shape == () or shape[:1] == (CHECK_BATCH,))):
        raise ConfigError(f"model {name!r}: loss(y_true, y_pred) must return a float scalar "
                          f"or one value per sample ({CHECK_BATCH} here); it returned "
                          f"{_describe(value)}")
    out_shape = tuple(getattr(out, "shape", ()) or ())
    return {"input_kind": "tokens" if x.dtype.is_integer and len(x.shape) == 2 else "custom",
            "input_shape": tuple(x.shape[1:]), "target_shape": tuple(y.shape[1:]),
            "num_classes": int(out_shape[-1]) if len(out_shape) > 1 else 0,
            "params": int(params),
            "forward_flops": staged["flops"] // CHECK_BATCH or None,
            "flops_source": FLOPS_SOURCE.format(version=tf.__version__, n=CHECK_BATCH),
            "framework": "tensorflow", "x_dtype": x.dtype.name}


def _call(spec: ModelSpec) -> tuple[Any, Any, Any]:
    return call_for(spec, "tensorflow", accepts, "keras.Model", _PARTS)


def build(spec: ModelSpec) -> Any:
    """A fresh Keras model from the user's function (called again), built on a zero batch of
    one sample of the spec's input shape and dtype where it is not built yet; its batch maker
    and loss are kept for :func:`synthetic_batch` and :func:`loss_fn`."""
    import tensorflow as tf

    model = _call(spec)[0]
    if not model.built:
        model(tf.zeros((1, *spec.input_shape), spec.hyper["x_dtype"]), training=False)
    return model


def _parts(spec: ModelSpec) -> tuple[Any, Any]:
    return _PARTS[spec.name] if spec.name in _PARTS else _call(spec)[1:]


def synthetic_batch(spec: ModelSpec, batch_size: int, seed: tuple[int, int]) -> tuple[Any, Any]:
    """The user's ``make_batch(batch_size)`` as tensors made in the caller's device scope.
    ``seed`` (the adapter's stateless seed pair) is not passed on: the draws follow TensorFlow's
    global seed, which the adapter sets from ``--seed``."""
    import tensorflow as tf

    x, y = _parts(spec)[0](batch_size)
    return tf.identity(tf.convert_to_tensor(x)), tf.identity(tf.convert_to_tensor(y))


def loss_fn(spec: ModelSpec) -> Any:
    """``(out, y) -> float32 scalar``: the mean of the user's ``loss(y, out)`` (Keras's order),
    a floating ``out`` cast to float32 first."""
    import tensorflow as tf

    user = _parts(spec)[1]

    def loss(out: Any, y: Any) -> Any:
        return tf.reduce_mean(tf.cast(user(y, _float32(tf, out)), tf.float32))

    return loss


def recurrent_layers(model: Any) -> list[Any]:
    """The model's Keras LSTM/GRU layers, nested ones too (the adapter turns their cuDNN kernel
    off in ``xla`` mode, which cannot compile it)."""
    import keras

    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)
            if isinstance(layer, (keras.layers.LSTM, keras.layers.GRU))]

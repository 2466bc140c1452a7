"""The TensorFlow training step, written once, with its stages marked.

:class:`TrainStep` is the one replica training step (``tf.GradientTape`` forward + loss,
gradient, ``optimizer.apply``), and :class:`TfStep` the iteration around it: the batch
(``t_io``), its copy to the device (``t_h2d``), then

* ``eager`` on one device: :meth:`TrainStep.run` op by op, its stages marked (``t_f`` and
  ``t_b`` per micro-batch, then ``t_u``);
* ``graph``: :meth:`TrainStep.replica` (``run`` with no-op marks) wrapped in ``tf.function``
  (traced once into a graph, optimised by Grappler), one stage ``t_fbu`` (split later by the
  profiler trace);
* ``xla``: the same in ``tf.function(jit_compile=True)`` (the whole step compiled by XLA);
* under a ``tf.distribute`` strategy: :meth:`TrainStep.replica` on every replica
  (:func:`dlperf.frameworks.tensorflow.dist.replicated_step`), one stage ``t_fbu``.

The fused timing runs the iteration with :func:`~dlperf.frameworks.base.no_mark`
(:meth:`TfStep.step`: the stage marks are Python calls that do nothing, and inside a traced
function they run once, while tracing, so the program is the same as a step without marks);
the breakdown runs it with timed marks (:meth:`TfStep.staged_step`). The one difference: the
fused step takes its batch in one call (``DataSource.next_batch``), the breakdown in two
(``fetch``, then ``to_device``); they are the same calls except for prepared real batches on
a GPU, which the fused step hands to the step function as host tensors (the function copies
them) and the breakdown copies first, to time the copy as ``t_h2d``.

Compilation (docs/measurement.md rule 4): in ``graph``/``xla`` the step is traced before
timing (``get_concrete_function`` on the first batch's shapes: ``trace_time_s``). Graph
optimisation / XLA compilation happen in the first call, which the harness times as its first
iteration; the step also times its first two calls, each to completion (``first_call_s``,
``second_call_s``), and reports ``compile_time_s = trace_time_s + max(0, first_call_s -
second_call_s)`` (compilation, without the one step the first call also executes).
``retraces`` is ``tf.function``'s ``experimental_get_tracing_count()``: 1 means traced once
and never again; ``recompiles_measured`` counts traces during measurement. In ``eager`` mode
nothing is traced or compiled: ``compile_time_s = 0`` and ``retraces = 0``.

Loss and optimizer (:func:`make_loss`, :func:`make_optimizer`): mean softmax cross-entropy
with the logits cast to float32 (or the implementation module's ``loss_fn`` hook); Keras's
SGD / Adam / AdamW with a spec weight decay applied as PyTorch does (coupled L2 added to the
gradient for SGD and Adam, decoupled for AdamW). Gradient accumulation (``--grad-accum K``):
the batch split into K micro-batches, each loss divided by K, gradients summed, one update.
Data parallel: each replica's loss is divided by the replicas in sync (Keras's optimizer sums
the replicas' gradients).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

from dlperf.errors import UnavailableError
from dlperf.frameworks.base import DataSource, TrainingRun, identity, no_mark
from dlperf.measure.phases import HostPhaseTimer
from dlperf.zoo.spec import ModelSpec

_NULL_SPAN = contextlib.nullcontext()


def traced_mark(stage: str, handle: Any = None) -> None:
    """The stage mark of a traced or replicated step: a no-op, as
    :func:`~dlperf.frameworks.base.no_mark`, with a statement in its body. AutoGraph converts
    the functions a ``tf.function`` (or ``strategy.run``) calls, and fails on one whose body is
    only a docstring (it warns and runs it unconverted)."""
    return None


def no_span(stage: str) -> AbstractContextManager[Any]:
    """The stage annotation of an unprofiled step: a context that does nothing (reused)."""
    return _NULL_SPAN


def make_optimizer(keras: Any, spec: ModelSpec, flags: dict[str, Any]) -> tuple[Any, float]:
    """The spec's Keras optimizer and the coupled L2 coefficient to add to the gradients.

    SGD (``learning_rate``, ``momentum``: PyTorch's SGD at a constant learning rate), Adam and
    AdamW with the spec's betas and eps (Keras adds eps to ``sqrt(v)`` before the bias
    correction, PyTorch after: a negligible difference no constant can remove). A weight
    decay is coupled L2 (returned, added to the gradient) for SGD and Adam, decoupled (Keras's
    ``weight_decay``) for AdamW, as PyTorch applies it. Writes ``flags["optimizer"]``.
    """
    o = spec.optimizer
    betas = tuple(getattr(o, "betas", (0.9, 0.999)))
    eps = float(getattr(o, "eps", 1e-8))
    if o.name == "sgd":
        opt = keras.optimizers.SGD(learning_rate=o.lr, momentum=o.momentum)
        l2 = o.weight_decay
    elif o.name == "adam":
        opt = keras.optimizers.Adam(learning_rate=o.lr, beta_1=betas[0], beta_2=betas[1],
                                    epsilon=eps)
        l2 = o.weight_decay
    else:
        opt = keras.optimizers.AdamW(learning_rate=o.lr, weight_decay=o.weight_decay,
                                     beta_1=betas[0], beta_2=betas[1], epsilon=eps)
        l2 = 0.0
    flags["optimizer"] = {"name": o.name, "lr": o.lr, "momentum": o.momentum,
                          "weight_decay": o.weight_decay,
                          "weight_decay_kind": ("decoupled" if o.name == "adamw"
                                                else "l2_in_gradient"),
                          "impl": f"keras.optimizers.{type(opt).__name__}"}
    if o.name != "sgd":
        flags["optimizer"].update(betas=list(betas), eps=eps)
    return opt, float(l2)


def make_loss(tf: Any, spec: ModelSpec, impl: Any) -> Callable[[Any, Any], Any]:
    """``loss(out, y) -> scalar float32``: mean softmax cross-entropy of
    ``out.reshape(-1, C)`` against ``y.reshape(-1)`` (logits cast to float32), or the
    implementation module's ``loss_fn`` hook for specs outside the default contract.

    Raises:
        UnavailableError: such a spec whose module ``impl`` has no ``loss_fn`` hook.
    """
    if not getattr(spec, "default_io", True):
        if not hasattr(impl, "loss_fn"):
            raise UnavailableError(f"{spec.name}: {impl.__name__} has no loss_fn hook for "
                                   f"loss {spec.loss!r}")
        return impl.loss_fn(spec)
    n_classes = spec.num_classes

    def loss_fn(out, y):
        logits = tf.reshape(tf.cast(out, tf.float32), [-1, n_classes])
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(y, [-1]), logits=logits))

    return loss_fn


class TrainStep:
    """One replica's training step: forward and loss, gradient, update (module docstring).

    Args:
        tf: the ``tensorflow`` module.
        model: the Keras model; ``tvars`` its trainable variables.
        opt: its Keras optimizer, built for ``tvars``; ``l2``: the coupled L2 coefficient.
        loss_fn: ``(out, y) -> scalar`` (:func:`make_loss`).
        grad_accum: micro-batches per step, K >= 1 (the batch's rows must split into K).
        replicas: replicas in sync (1 without data parallelism): each replica's loss is
            divided by it, since the optimizer sums the replicas' gradients.
    """

    def __init__(self, tf: Any, model: Any, tvars: list[Any], opt: Any, l2: float,
                 loss_fn: Callable[[Any, Any], Any], grad_accum: int, replicas: int) -> None:
        self.tf, self.model, self.tvars, self.opt, self.l2 = tf, model, tvars, opt, l2
        self.loss_fn, self.grad_accum, self.replicas = loss_fn, grad_accum, replicas
        self.divisor = grad_accum * replicas

    def micro_batches(self, x: Any, y: Any) -> Iterable[tuple[Any, Any]]:
        """``(x, y)`` itself, or its ``grad_accum`` consecutive row slices."""
        if self.grad_accum == 1:
            return ((x, y),)
        return zip(self.tf.split(x, self.grad_accum), self.tf.split(y, self.grad_accum))

    def replica(self, x: Any, y: Any) -> Any:
        """:meth:`run` with no-op marks and spans: the step that ``tf.function`` traces and
        ``strategy.run`` runs on each replica (the marks run once, while tracing)."""
        return self.run(x, y, traced_mark, no_span)

    def run(self, x: Any, y: Any, mark: Callable[..., None],
            span: Callable[[str], AbstractContextManager[Any]]) -> Any:
        """One step on ``(x, y)``; returns the loss (divided by the replicas), unread.

        ``mark(stage, handle)`` is called after ``t_f`` (the micro-batch's loss), ``t_b``
        (its last gradient) and ``t_u`` (the last variable, read only by a timer that waits);
        ``span(stage)`` is entered around each stage (profiler annotations).
        """
        tf = self.tf
        grads, loss = None, None
        for xs, ys in self.micro_batches(x, y):
            with span("t_f"):
                with tf.GradientTape() as tape:
                    part = self.loss_fn(self.model(xs, training=True), ys)
                    if self.divisor != 1:
                        part = part / self.divisor
            mark("t_f", part)
            with span("t_b"):
                g = tape.gradient(part, self.tvars)
                if self.grad_accum > 1:  # summed below: IndexedSlices made dense
                    g = [tf.convert_to_tensor(gi) for gi in g]
            mark("t_b", g[-1])
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
            loss = part if loss is None else loss + part
        with span("t_u"):
            if self.l2:
                grads = [tf.convert_to_tensor(g) + (self.l2 / self.replicas) * v.value
                         for g, v in zip(grads, self.tvars)]
            self.opt.apply(grads, self.tvars)
        mark("t_u", self.tvars[-1])
        return loss


def phase_block(tf: Any) -> Callable[[Any], Any]:
    """Wait for a stage's output on a GPU: ``tf.test.experimental.sync_devices()`` where
    TensorFlow has it (>= 2.13), else read the output's first element to the host."""
    sync = getattr(getattr(getattr(tf, "test", None), "experimental", None), "sync_devices",
                   None)
    if sync is not None:
        return lambda handle: sync()
    return lambda handle: tf.reshape(tf.convert_to_tensor(handle), [-1])[:1].numpy()


class TfStep(TrainingRun):
    """The staged iteration of a TensorFlow run and its compile bookkeeping
    (:class:`dlperf.frameworks.tensorflow.adapter.TensorFlowRun` prepares it and adds the
    probes). :meth:`_init_step` sets it up."""

    tf: Any
    _data: DataSource
    _train: TrainStep
    _fn: Callable[[Any, Any], Any]
    _split: bool
    _traced: bool
    _gpu: bool

    def _init_step(self, tf: Any, data: DataSource, train: TrainStep,
                   step_fn: Callable[[Any, Any], Any], mode: str, distributed: bool,
                   gpu: bool) -> None:
        """Wrap ``step_fn`` (``train.replica``, or its replicated form under a strategy) for
        ``mode`` and trace it for ``data.first`` before timing (writes the compile flags)."""
        self.tf, self._data, self._train, self._gpu = tf, data, train, gpu
        self._calls, self._at_measure = 0, {}
        self._span: Callable[[str], AbstractContextManager[Any]] = no_span
        self._traced = mode in ("graph", "xla")
        self._split = not self._traced and not distributed
        self._fn = tf.function(step_fn, jit_compile=mode == "xla") if self._traced else step_fn
        self.flags["trace_time_s"] = 0.0
        if self._traced:
            specs = (list(data.first) if distributed
                     else [tf.TensorSpec.from_tensor(t) for t in data.first])
            t0 = time.perf_counter()
            self._fn.get_concrete_function(*specs)
            self.flags["trace_time_s"] = time.perf_counter() - t0
        self.flags["first_call_s"] = self.flags["second_call_s"] = None
        self.flags["compile_time_s"] = self._compile_time()
        self.flags["retraces"] = self._tracing_count()

    # --- the iteration ---------------------------------------------------------------------

    def staged_step(self, mark: Callable[..., None]) -> Any:
        """One iteration with the batch in two parts (``t_io``: fetched; ``t_h2d``: on the
        device), then the step's stages (module docstring); returns the loss, unread."""
        return self._iteration(mark, self._data.fetch, self._data.to_device)

    def step(self) -> Any:
        """The fused iteration: :meth:`staged_step`'s code with no-op marks, the batch taken
        in one call (``next_batch``: module docstring)."""
        return self._iteration(no_mark, self._data.next_batch, identity)

    def _iteration(self, mark: Callable[..., None], fetch: Callable[[], Any],
                   to_device: Callable[[Any], Any]) -> Any:
        b = fetch()
        mark("t_io")
        with self._span("t_h2d"):
            x, y = to_device(b)
        mark("t_h2d", y)
        if self._calls < 2:
            return self._timed_call(x, y, mark)
        return self._compute(x, y, mark)

    def _compute(self, x: Any, y: Any, mark: Callable[..., None]) -> Any:
        if self._split:  # eager on one device: forward, backward and update are stages
            return self._train.run(x, y, mark, self._span)
        out = self._fn(x, y)
        mark("t_fbu", out)
        return out

    def _timed_call(self, x: Any, y: Any, mark: Callable[..., None]) -> Any:
        # The first two calls only: each timed to completion (compile time, module docs).
        t0 = time.perf_counter()
        out = self._compute(x, y, mark)
        out.numpy()
        self.flags["first_call_s" if self._calls == 0 else "second_call_s"] = \
            time.perf_counter() - t0
        self._calls += 1
        return out

    def phase_timer(self) -> HostPhaseTimer:
        """Host clock at each mark. CPU: TensorFlow runs synchronously, nothing to wait for.
        GPU: wait for the stage's output (no device-event API in TensorFlow)."""
        return HostPhaseTimer(block=phase_block(self.tf) if self._gpu else None)

    # --- compilation -----------------------------------------------------------------------

    def _tracing_count(self) -> int:
        return int(self._fn.experimental_get_tracing_count()) if self._traced else 0

    def _compile_time(self) -> float:
        if not self._traced:
            return 0.0
        first, second = self.flags["first_call_s"], self.flags["second_call_s"]
        extra = max(0.0, first - second) if first is not None and second is not None \
            else (first or 0.0)
        return self.flags["trace_time_s"] + extra

    def on_phase(self, phase: str) -> None:
        """At ``"measure"``: snapshot the trace count (and the data-wait recorder's)."""
        if phase == "measure":
            self._at_measure["traces"] = self._tracing_count()
            if self.data_wait is not None:
                self.data_wait.mark_measure()

    def compile_count(self) -> int:
        """Traces so far (``tf.function``'s tracing count; 0 in eager mode): called by the
        harness after every step (docs/measurement.md, "Recompiles"; about 0.15 us on the dev
        CPU)."""
        return self._tracing_count()

    def compile_info(self) -> dict[str, Any]:
        """``{"compile_time_s", "n_compiles" (traces), "recompiles_measured",
        "compile_before_loop_s"}`` (module docstring; the tracing before timing is before the
        loop, graph optimisation / XLA compilation in the first step); also updates
        ``flags["retraces"]`` and ``flags["compile_time_s"]``."""
        n = self._tracing_count()
        self.flags["retraces"], self.flags["compile_time_s"] = n, self._compile_time()
        return {"compile_time_s": self.flags["compile_time_s"], "n_compiles": n,
                "recompiles_measured": n - self._at_measure.get("traces", n),
                "compile_before_loop_s": self.flags["trace_time_s"]}

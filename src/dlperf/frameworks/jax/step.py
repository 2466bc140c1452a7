"""The JAX training step, written once (:meth:`JaxStep.staged_step`).

Forward, loss, gradient and the Optax update are one ``jax.jit`` program with the train state
(parameters, BN statistics, optimizer state, dropout key) donated (``donate_argnums=0``), so
XLA updates it in place. The same bound function serves the fused timing (``step()``: no-op
marks) and the breakdown (``phased_step(mark)``: timed marks ``t_io``, ``t_h2d``, ``t_fbu``;
forward, backward and update are one XLA program, split later by the trace).

* compilation (docs/measurement.md rule 4): the step is lowered and compiled ahead of the
  loop (``jitted.lower(...).compile()``, timed: ``lower_time_s`` = trace + StableHLO
  lowering, ``backend_compile_time_s`` = XLA, ``compile_time_s`` = both). The loop then calls
  the same ``jax.jit`` function, whose caches that compilation filled. ``retraces`` counts how
  many times the Python step function was traced (1 = traced once, never again);
  ``recompiles`` counts XLA compilations of any function after the ahead-of-time one (0 in
  steady state; from ``jax.monitoring``). :meth:`JaxStep.compile_info` reports them
  (``n_compiles`` = traces) with ``recompiles_measured``: traces or compilations during the
  measured segment.
* loss (zoo/spec.py contract): ``ce``/``mlm`` softmax cross-entropy (``optax.smooth_labels``
  for a spec's label smoothing); ``ctc``: ``optax.ctc_loss`` (blank 0, no paddings), per
  utterance divided by the target length, batch mean (PyTorch's ``reduction="mean"``).
* gradient accumulation (``--grad-accum K``): the K micro-batches are unrolled inside the one
  compiled step (gradients summed, divided by K; BN statistics updated micro-batch by
  micro-batch, as in PyTorch), one optimizer update per step.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from dlperf.frameworks.base import TrainingRun
from dlperf.frameworks.jax.probes import xla_costs
from dlperf.measure.phases import LaggedPhaseTimer
from dlperf.zoo.spec import ModelSpec

#: Steps that may be in flight when the lagged timers read the clock (fused and phased).
TIMER_LAG = 2

_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
#: Counters of XLA compilations after a run's ahead-of-time compile (the flags dict of the
#: active run, written by the ``jax.monitoring`` listener below).
_ACTIVE_FLAGS: dict[str, Any] | None = None
_LISTENER_REGISTERED = False


#: Further counters (:func:`compiles_counted`), each counting besides the active run's flags.
_SCOPES: list[dict[str, Any]] = []


def _compile_listener(event: str, duration_s: float, **_: Any) -> None:
    if event != _BACKEND_COMPILE_EVENT:
        return
    for d in ([_ACTIVE_FLAGS] if _ACTIVE_FLAGS is not None else []) + _SCOPES:
        d["recompiles"] += 1
        d["recompile_time_s"] += float(duration_s)


@contextlib.contextmanager
def compiles_counted() -> Iterator[dict[str, Any]]:
    """Count the XLA compilations of the ``with`` block: yields ``{"recompiles": n,
    "recompile_time_s": s}`` (counts, seconds of XLA backend compile), filled in as they happen
    (the ``jax.monitoring`` event of :func:`listen_for_compiles`, which must be registered).
    The active run's flags count them too, as without it."""
    counter: dict[str, Any] = {"recompiles": 0, "recompile_time_s": 0.0}
    _SCOPES.append(counter)
    try:
        yield counter
    finally:
        _SCOPES.remove(counter)


def listen_for_compiles(jax: Any) -> None:
    """Register the ``jax.monitoring`` listener that counts XLA compilations (once a process;
    it counts into the flags given to :func:`count_compiles_into`)."""
    global _LISTENER_REGISTERED
    if not _LISTENER_REGISTERED:
        jax.monitoring.register_event_duration_secs_listener(_compile_listener)
        _LISTENER_REGISTERED = True


def count_compiles_into(flags: dict[str, Any] | None) -> None:
    """From now on count XLA compilations into ``flags["recompiles"]`` and
    ``flags["recompile_time_s"]`` (None: count nowhere)."""
    global _ACTIVE_FLAGS
    _ACTIVE_FLAGS = flags


def stop_counting_compiles(flags: dict[str, Any]) -> None:
    """Stop counting into ``flags`` if it is the active run's (a later run's stay active)."""
    if _ACTIVE_FLAGS is flags:
        count_compiles_into(None)


def traced_compiles(retraces: int, seen: dict[str, Any]) -> dict[str, Any]:
    """The ``trace.compiles`` part of a record: what the profiled steps compiled. ``retraces``:
    traces of the Python step function during them; ``seen``: :func:`compiles_counted`'s
    counter over them. Keys ``retraces``, ``xla_compiles`` (counts), ``xla_compile_time_s``
    (s) and ``executable``: ``"reused"`` (the measured step's compiled program ran under the
    profiler, nothing was compiled) or ``"compiled again"``."""
    n = int(seen["recompiles"])
    return {"retraces": retraces, "xla_compiles": n,
            "xla_compile_time_s": float(seen["recompile_time_s"]),
            "executable": "reused" if n == 0 and retraces == 0 else "compiled again"}


def make_loss_fn(spec: ModelSpec) -> Callable[[Any, Any], Any]:
    """The spec's loss ``(logits, y) -> float32 scalar`` in JAX (zoo/spec.py contract).

    ``custom`` (``file:`` and entry-point models): the ``loss_fn(spec)`` hook of the spec's
    implementation module. ``ce``/``mlm``: mean softmax cross-entropy of ``logits.reshape(-1, V)`` against
    ``y.reshape(-1)``, with ``optax.smooth_labels`` for ``spec.label_smoothing``; ``ctc``:
    ``optax.ctc_loss`` of ``[B, T, C]`` logits against ``[B, S]`` labels (blank 0, no
    paddings), each utterance divided by ``S``, then the batch mean (torch ``reduction="mean"``).
    """
    import jax
    import jax.numpy as jnp
    import optax

    if getattr(spec, "loss", "ce") == "custom":  # a model from a source: its module's hook
        from dlperf.zoo import impl_module

        return importlib.import_module(impl_module(spec.family, "jax")).loss_fn(spec)
    n_classes = spec.num_classes
    smoothing = float(getattr(spec, "label_smoothing", 0.0) or 0.0)
    ctc = getattr(spec, "loss", "ce") == "ctc"

    def loss_fn(logits, y):
        if ctc:
            # Blank 0, every utterance T_out frames and S labels (no paddings); optax
            # takes the log-softmax itself. Per utterance / S, then the batch mean
            # (PyTorch ctc_loss reduction="mean").
            logits = logits.astype(jnp.float32)
            per_seq = optax.ctc_loss(logits, jnp.zeros(logits.shape[:2], jnp.float32), y,
                                     jnp.zeros(y.shape, jnp.float32), blank_id=0)
            return (per_seq / y.shape[1]).mean()
        logits = logits.astype(jnp.float32).reshape(-1, n_classes)
        y = y.reshape(-1)
        if smoothing:
            labels = optax.smooth_labels(jax.nn.one_hot(y, n_classes), smoothing)
            return optax.softmax_cross_entropy(logits, labels).mean()
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return loss_fn


def make_optimizer(optax: Any, o: Any) -> Any:
    """The zoo :class:`~dlperf.zoo.spec.OptimizerSpec` ``o`` in Optax, with PyTorch's semantics.

    SGD: ``optax.sgd`` (trace: ``buf = momentum * buf + g``, as ``torch.optim.SGD`` without
    dampening); weight decay added to the gradient first (torch's coupled L2). Adam: L2 into
    the gradient like ``torch.optim.Adam``; AdamW: decoupled (``optax.adamw``).
    """
    b1, b2 = getattr(o, "betas", (0.9, 0.999))
    eps = getattr(o, "eps", 1e-8)
    if o.name == "sgd":
        tx = optax.sgd(o.lr, momentum=o.momentum or None)
    elif o.name == "adam":
        tx = optax.adam(o.lr, b1=b1, b2=b2, eps=eps)
    else:
        return optax.adamw(o.lr, b1=b1, b2=b2, eps=eps, weight_decay=o.weight_decay)
    if o.weight_decay:
        tx = optax.chain(optax.add_decayed_weights(o.weight_decay), tx)
    return tx


def optimizer_flags(o: Any) -> dict[str, Any]:
    """``flags["optimizer"]`` of a JAX run (the record it has always stored, and
    ``in_compiled_step``: the Optax update is traced into the one ``jax.jit`` program of
    :func:`make_train_step`, so XLA fuses it; tested in
    ``tests/frameworks/jax/test_jax_staged_step.py``)."""
    return {"name": o.name, "lr": o.lr, "momentum": o.momentum,
            "weight_decay": o.weight_decay, "impl": "optax", "in_compiled_step": True}


def init_state(jax: Any, model: Any, tx: Any, keys: tuple[Any, Any],
               sample: tuple[tuple[int, ...], Any], dropout: bool, replicated: Any,
               dev: Any) -> dict[str, Any]:
    """The train state ``{"params", "opt_state"[, "batch_stats"][, "rng"]}``, initialised on the
    device by a jitted init (a host init of a 118 M parameter FCN and its copy cost seconds).

    Args:
        keys: ``(init key, dropout key)``.
        sample: ``(input_shape, dtype)`` of one sample: the model is initialised for a
            ``[1, *input_shape]`` zero input (made inside the jitted init).
        dropout: keep the dropout key in the state (the model has dropout).
        replicated: the replicated sharding of a data-parallel run (the state is made
            replicated over the mesh), else None (the state is put on ``dev``).
    """
    import jax.numpy as jnp

    def init(k):
        v = model.init(k, jnp.zeros((1, *sample[0]), sample[1]), train=False)
        return v, tx.init(v["params"])

    variables, opt_state = jax.jit(init, out_shardings=replicated)(keys[0])
    state: dict[str, Any] = {"params": variables["params"], "opt_state": opt_state}
    if "batch_stats" in variables:
        state["batch_stats"] = variables["batch_stats"]
    if dropout:
        state["rng"] = keys[1]
    if replicated is None:
        state = jax.device_put(state, dev)
    return jax.block_until_ready(state)


def _split(jax: Any, rng: Any) -> tuple[Any, Any]:
    """``(next key, this (micro-)batch's dropout key)``; ``(None, None)`` without dropout."""
    if rng is None:
        return None, None
    rng, sub = jax.random.split(rng)
    return rng, sub


def _grads(jax: Any, grad_fn: Any, params: Any, bs: Any, x: Any, y: Any, rng: Any) -> tuple:
    """``(loss, grads, batch_stats, rng)`` of one batch; a dropout key is split off."""
    rng, sub = _split(jax, rng)
    (loss, bs), grads = grad_fn(params, bs, x, y, sub)
    return loss, grads, bs, rng


def _grads_accumulated(jax: Any, grad_fn: Any, params: Any, bs: Any, x: Any, y: Any, rng: Any,
                       k: int, w: int) -> tuple:
    """``(loss, grads, batch_stats, rng)`` over ``k`` micro-batches, unrolled (``k`` is small:
    inside a lax.scan XLA:CPU ran resnet56_tiny's convolutions 5x slower than unrolled,
    measured with k=2); gradients and loss are the micro-batches' mean.

    Device ``d`` of ``w`` holds rows ``[d B/w, (d+1) B/w)``; its micro-batch ``i`` is its
    ``i``-th slice (``w = 1``: the plain split into ``k`` consecutive micro-batches).
    """
    import jax.numpy as jnp

    b = x.shape[0]

    def micro(a):
        a = a.reshape(w, k, b // (w * k), *a.shape[1:])
        return jnp.swapaxes(a, 0, 1).reshape(k, b // k, *a.shape[3:])

    xs, ys = micro(x), micro(y)
    grads, loss = None, jnp.zeros((), jnp.float32)
    for i in range(k):
        rng, sub = _split(jax, rng)  # before slicing the batch: the program's order as before
        (loss_i, bs), g = grad_fn(params, bs, xs[i], ys[i], sub)
        grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
        loss = loss + loss_i
    grads = jax.tree.map(lambda g: g / k, grads)
    return loss / k, grads, bs, rng


def make_train_step(jax: Any, model: Any, tx: Any, loss_fn: Callable[[Any, Any], Any],
                    grad_accum: int, devices: int,
                    on_trace: Callable[[], None]) -> Callable[[Any, Any, Any], tuple[Any, Any]]:
    """The pure train step ``(state, x, y) -> (new state, loss)`` to be jitted.

    ``x`` is the global batch ``[B, ...]``, ``y`` its targets; ``devices`` the data-parallel
    devices the batch is sharded over (1 without data parallelism); ``on_trace`` is called each
    time JAX traces the step (rule 4: counts retraces).
    """
    import optax

    def forward_loss(params, batch_stats, x, y, rng):
        variables = {"params": params}
        kw: dict[str, Any] = {"rngs": {"dropout": rng}} if rng is not None else {}
        if batch_stats is not None:
            variables["batch_stats"] = batch_stats
            logits, upd = model.apply(variables, x, train=True, mutable=["batch_stats"], **kw)
            return loss_fn(logits, y), upd["batch_stats"]
        return loss_fn(model.apply(variables, x, train=True, **kw), y), None

    grad_fn = jax.value_and_grad(forward_loss, has_aux=True)

    def train_step(state, x, y):
        on_trace()  # runs in Python once per trace
        params, bs, rng = state["params"], state.get("batch_stats"), state.get("rng")
        if grad_accum == 1:
            loss, grads, bs, rng = _grads(jax, grad_fn, params, bs, x, y, rng)
        else:
            loss, grads, bs, rng = _grads_accumulated(jax, grad_fn, params, bs, x, y, rng,
                                                      grad_accum, devices)
        new_state = dict(state)
        updates, new_state["opt_state"] = tx.update(grads, state["opt_state"], params)
        new_state["params"] = optax.apply_updates(params, updates)
        if bs is not None:
            new_state["batch_stats"] = bs
        if rng is not None:
            new_state["rng"] = rng
        return new_state, loss

    return train_step


class JaxStep(TrainingRun):
    """The compiled train step, the state it updates and the batches it takes: the part of a
    JAX run that executes each iteration (:class:`dlperf.frameworks.jax.adapter.JaxRun` builds
    it and adds the probes).

    Attributes set by the subclass before :meth:`_compile`:
        state: the train state (device arrays; donated to and returned by each step).
        flags: the run's flags (compile times and counters are written into it).
        _fetch: returns the step's batch as held (host or device): ``t_io``.
        _to_device: puts it on the device (the identity where it is there): ``t_h2d``.
        _jax: the ``jax`` module.
    """

    state: dict[str, Any]
    _fetch: Callable[[], Any]
    _to_device: Callable[[Any], Any]
    _jitted: Any
    _jax: Any
    _traces = 0
    _at_measure: dict[str, int] | None = None

    def staged_step(self, mark: Callable[..., None]) -> Any:
        """One iteration: the batch (``t_io``), its copy to the device (``t_h2d``: enqueued; the
        copy runs on the device ahead of the step), the compiled step with the state donated
        (``t_fbu``); returns the loss (a device scalar, not read)."""
        b = self._fetch()
        mark("t_io")
        x, y = self._to_device(b)
        mark("t_h2d")
        self.state, loss = self._jitted(self.state, x, y)
        mark("t_fbu", loss)
        return loss

    #: ``--breakdown`` runs the very same function with timed marks.
    phased_step = staged_step

    def phase_timer(self) -> LaggedPhaseTimer:
        """No device events in JAX: iterations are timed by completion, :data:`TIMER_LAG`
        behind the dispatch as in the fused loop (waiting at each phase boundary would stop
        host dispatch overlapping device work: +16-50% on the H200, breakdown.db)."""
        return LaggedPhaseTimer(block=self._jax.block_until_ready, lag=TIMER_LAG)

    def _count_trace(self) -> None:
        self._traces += 1
        self.flags["retraces"] = self._traces

    def _compile(self, train_step: Callable[..., Any], first: tuple[Any, Any], replicated: Any,
                 keep_hlo: bool) -> str | None:
        """Jit ``train_step`` (state donated; a data-parallel run's state and loss come out
        ``replicated``), lower and compile it for the ``first`` batch ahead of the loop (timed
        into ``flags``, with XLA's cost estimates), and start counting later compilations.
        Returns the compiled program's HLO text where ``keep_hlo`` (it names every instruction
        a trace shows, with its metadata: phase and op class for --breakdown/--trace,
        :mod:`dlperf.measure.breakdown.xla`), else None."""
        jax, flags = self._jax, self.flags
        if replicated is None:
            self._jitted = jax.jit(train_step, donate_argnums=0)
        else:  # state and loss stay replicated; the batch comes in sharded
            self._jitted = jax.jit(train_step, donate_argnums=0,
                                   out_shardings=(jax.tree.map(lambda _: replicated, self.state),
                                                  replicated))
        flags["retraces"] = 0
        t0 = time.perf_counter()
        lowered = self._jitted.lower(self.state, *first)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        flags["lower_time_s"] = t1 - t0
        flags["backend_compile_time_s"] = t2 - t1
        flags["compile_time_s"] = t2 - t0
        flags.update(xla_costs(lowered, compiled))
        hlo_text = compiled.as_text() if keep_hlo else None
        flags["recompiles"] = 0
        flags["recompile_time_s"] = 0.0
        count_compiles_into(flags)
        return hlo_text

    def on_phase(self, phase: str) -> None:
        """At ``"measure"``: snapshot the trace and compile counters (and the data-wait
        recorder's) so that :meth:`compile_info` can tell what happened while measuring."""
        if phase == "measure":
            self._at_measure = {"traces": self._traces, "compiles": self.flags["recompiles"]}
            if self.data_wait is not None:
                self.data_wait.mark_measure()

    def compile_count(self) -> int:
        """Traces plus XLA compilations after the ahead-of-time one, so far: an attribute and
        a dict read, called by the harness after every step (docs/measurement.md,
        "Recompiles"; about 100 ns on the dev CPU)."""
        return self._traces + self.flags["recompiles"]  # type: ignore[no-any-return]

    def compile_info(self) -> dict[str, Any]:
        """``{"compile_time_s", "n_compiles" (traces), "lower_time_s",
        "backend_compile_time_s", "recompiles", "recompiles_measured",
        "compile_before_loop_s"}`` (seconds, counts). The ahead-of-time compile is all
        before the loop: ``compile_before_loop_s`` = ``compile_time_s``."""
        # A retrace during measurement nearly always compiles too; a compile without a
        # retrace (e.g. arguments placed differently) is a recompile all the same.
        f, measured = self.flags, None
        if self._at_measure:
            measured = max(self._traces - self._at_measure["traces"],
                           f["recompiles"] - self._at_measure["compiles"])
        return {"compile_time_s": f["compile_time_s"], "n_compiles": self._traces,
                "lower_time_s": f["lower_time_s"],
                "backend_compile_time_s": f["backend_compile_time_s"],
                "recompiles": f["recompiles"], "recompiles_measured": measured,
                "compile_before_loop_s": f["compile_time_s"]}

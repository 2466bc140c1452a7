"""The MXNet training step, written once: a Gluon iteration with its stages marked.

:class:`GluonStep` is the one training iteration of both modes (``eager``: the Gluon model run
op by op; ``graph``: the same model hybridized, one cached graph). The fused timing calls it
with :func:`~dlperf.frameworks.base.no_mark` (:meth:`MXNetRun.step
<dlperf.frameworks.mxnet.adapter.MXNetRun.step>`); the stage marks are where a phased
breakdown would cut it. MXNet has no breakdown in dlperf (``breakdown=False`` in its
:mod:`dlperf.registry` entry: no profiler split and no phase timer for its asynchronous
engine), so only the no-op marks run today.

The iteration (each part chosen to match the other adapters):

* input (``t_io``): the next batch of the prepared pool (:mod:`dlperf.frameworks.mxnet.input`);
  ``t_h2d`` is empty: the batches are NDArrays on the CPU context already, which is the
  only device here.
* forward and loss (``t_f``): under ``autograd.record()``, the model and its loss as one
  block (:func:`with_loss`): mean softmax cross-entropy of ``out.reshape(-1, C)`` against
  ``y.reshape(-1)`` (``gluon.loss.SoftmaxCrossEntropyLoss``, averaged over the batch and time
  steps), the same loss as the other adapters.
* backward (``t_b``): ``loss.backward()``.
* gradient accumulation (``--grad-accum K``): ``grad_req = "add"`` (set by the adapter),
  gradients zeroed before each iteration (counted in the first ``t_f``), each micro-batch's loss
  divided by K; ``t_f`` and ``t_b`` are marked once per micro-batch.
* update (``t_u``): ``Trainer.step(1)`` (:func:`make_trainer`), then ``mx.nd.waitall()``.

Timing (docs/measurement.md rules 1-2): MXNet's engine is asynchronous on the CPU too (an
operator call returns once it is queued for the engine's worker threads), so a host clock
alone would time the dispatch. Each step ends with ``mx.nd.waitall()`` (every queued operator,
the parameter updates included, has finished) and the harness reads a
:class:`~dlperf.measure.timers.HostTimer`: the step time is its completion time. This does
forgo the overlap of the next step's Python dispatch with the current step's execution; on the
CPU, where the engine's threads and the Python thread share the same cores, that overlap is
small, and it is what a Gluon loop that reads its loss or metric every batch (as Gluon's own
training examples do) gets as well. No device events exist in MXNet's API, and a lagged read of
an earlier step's loss would not wait for that step's updates. The marks' handles are the loss:
a timed mark would have to wait for the engine (``mx.nd.waitall()``) to time a stage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlperf.errors import UnavailableError
from dlperf.zoo.spec import ModelSpec


def make_trainer(mx: Any, params: Any, spec: ModelSpec) -> tuple[Any, dict[str, Any]]:
    """``(gluon.Trainer, flags["optimizer"])`` for the spec's optimizer over ``params`` (no
    kvstore: one device). Step it with ``batch_size=1``: the loss is already a batch mean.

    MXNet's momentum update ``m = mu m - lr (g + wd w); w += m`` is PyTorch's ``b = mu b + g +
    wd w; w -= lr b`` at a constant learning rate (``m = -lr b``), tested against
    ``torch.optim.SGD`` in ``tests/frameworks/mxnet/test_mxnet.py``.

    Raises:
        UnavailableError: an optimizer other than SGD (the Adam specs are Transformers',
            which have no MXNet models).
    """
    o = spec.optimizer
    if o.name != "sgd":
        raise UnavailableError(f"{spec.name}: optimizer {o.name!r} is not wired for MXNet "
                               f"(only the SGD models have MXNet implementations)")
    trainer = mx.gluon.Trainer(params, "sgd",
                               {"learning_rate": o.lr, "momentum": o.momentum,
                                "wd": o.weight_decay},
                               kvstore=None, update_on_kvstore=False)
    return trainer, {"name": "sgd", "lr": o.lr, "momentum": o.momentum,
                     "weight_decay": o.weight_decay, "weight_decay_kind": "l2_in_gradient",
                     "impl": "gluon.Trainer('sgd'), step(batch_size=1)"}


def with_loss(mx: Any, net: Any, spec: ModelSpec) -> Any:
    """A ``HybridBlock`` ``(x, y) -> mean cross-entropy`` over ``net`` (one graph in ``graph``
    mode): ``SoftmaxCrossEntropyLoss(axis=-1, sparse_label=True)`` of the logits ``[B, C]`` or
    ``[B, T, V]`` against ``[B]`` or ``[B, T]`` float ids, averaged.

    Raises:
        UnavailableError: a spec outside the default input/loss contract.
    """
    if not spec.default_io:
        raise UnavailableError(f"{spec.name}: loss {spec.loss!r} / {spec.input_kind} inputs "
                               f"are not wired for MXNet")
    gluon = mx.gluon

    class WithLoss(gluon.HybridBlock):
        def __init__(self) -> None:
            super().__init__(prefix="")
            self.net = net  # registered as a child, its parameter names unchanged
            self.ce = gluon.loss.SoftmaxCrossEntropyLoss(axis=-1, sparse_label=True)

        def hybrid_forward(self, F, x, y):  # noqa: N803
            return F.mean(self.ce(self.net(x), y))

    return WithLoss()


class GluonStep:
    """One Gluon training iteration with its stages marked (module docstring).

    Args:
        mx: the ``mxnet`` module.
        model: the block ``(x, y) -> mean loss`` (:func:`with_loss`), hybridized or not.
        trainer: its ``gluon.Trainer`` (:func:`make_trainer`).
        trainable: the parameters whose gradients are zeroed before an accumulated iteration
            (their ``grad_req`` is ``"add"`` when ``grad_accum > 1``).
        grad_accum: micro-batches per iteration, K >= 1; the batch's first axis must split
            into K equal parts.
        fetch: returns the next ``(x, y)`` NDArrays on the step's context.

    Calling it with ``mark`` runs one iteration, calls ``mark(stage, handle)`` after each
    stage (``t_io``, ``t_h2d``, then ``t_f``, ``t_b`` per micro-batch, then ``t_u``) and
    returns the loss (a 0-d NDArray, already computed: the step ends with ``waitall``).
    """

    def __init__(self, mx: Any, model: Any, trainer: Any, trainable: list[Any],
                 grad_accum: int, fetch: Callable[[], tuple[Any, Any]]) -> None:
        self.mx, self.model, self.trainer = mx, model, trainer
        self.trainable, self.grad_accum, self.fetch = trainable, grad_accum, fetch
        self.record = mx.autograd.record

    def __call__(self, mark: Callable[..., None]) -> Any:
        x, y = self.fetch()
        mark("t_io")
        mark("t_h2d")  # nothing to copy: the batch is on the CPU context already
        if self.grad_accum == 1:
            with self.record():
                loss = self.model(x, y)
            mark("t_f", loss)
            loss.backward()
            mark("t_b", loss)
        else:
            loss = self._accumulate(x, y, mark)
        self.trainer.step(1)
        self.mx.nd.waitall()  # the engine is asynchronous: the step ends when all has run
        mark("t_u", loss)
        return loss

    def _accumulate(self, x: Any, y: Any, mark: Callable[..., None]) -> Any:
        """Forward and backward of ``grad_accum`` micro-batches into the zeroed gradients;
        returns the sum of their losses, each divided by K (the batch mean)."""
        K = self.grad_accum
        for p in self.trainable:
            p.zero_grad()
        loss = None
        for xs, ys in zip(self.mx.nd.split(x, num_outputs=K, axis=0),
                          self.mx.nd.split(y, num_outputs=K, axis=0)):
            with self.record():
                part = self.model(xs, ys) / K
            mark("t_f", part)
            part.backward()
            mark("t_b", part)
            loss = part if loss is None else loss + part
        return loss

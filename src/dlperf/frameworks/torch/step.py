"""The PyTorch training step, written once and staged (docs/architecture.md, "one staged step").

:class:`TorchStep` runs one iteration (input, host-to-device copy, forward, backward, update)
and calls ``mark(stage)`` after each stage: ``t_io``, ``t_h2d``, then ``t_f``/``t_b`` for each
micro-batch, then ``t_u``. The fused timing runs it with the no-op
:func:`~dlperf.frameworks.base.no_mark`; the breakdown (:mod:`dlperf.measure.phases`) with timed
marks; the FLOP counter on the eager model (:meth:`TorchStep.with_model`). So the three measure
the same code, as TorchBench's ``_invoke_staged_train_test`` stages one step.

The numerics of the step live here too: the precision settings (:func:`apply_precision`,
:func:`make_autocast`), the optimizer (:func:`make_optimizer`, the one place it is chosen) and
the loss (:func:`make_loss`). This module does not import torch; the functions take it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Callable, Iterable
from typing import Any

from dlperf.frameworks.base import no_mark
from dlperf.frameworks.common import optimizer_flags
from dlperf.zoo.spec import ModelSpec, OptimizerSpec

#: The context of a micro-batch that all-reduces (no DDP, or the last micro-batch).
_SYNCED = contextlib.nullcontext()


def apply_precision(torch: Any, precision: str) -> dict[str, Any]:
    """Set the float32 matmul/convolution precision for ``precision`` (``fp32``: IEEE, TF32
    off, explicitly, since cuDNN convolutions default to TF32 in PyTorch; ``tf32``: TF32 on;
    ``bf16``: TF32 off for what autocast leaves in fp32); return the settings as applied."""
    tf32 = precision == "tf32"
    mm, conv = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(mm, "fp32_precision"):  # PyTorch >= 2.9 API
        mm.fp32_precision = "tf32" if tf32 else "ieee"
        conv.conv.fp32_precision = "tf32" if tf32 else "ieee"
        conv.rnn.fp32_precision = "tf32" if tf32 else "ieee"
        applied = {"matmul_fp32_precision": mm.fp32_precision,
                   "cudnn_conv_fp32_precision": conv.conv.fp32_precision,
                   "cudnn_rnn_fp32_precision": conv.rnn.fp32_precision}
    else:  # pragma: no cover - older PyTorch
        mm.allow_tf32 = tf32
        conv.allow_tf32 = tf32
        applied = {"matmul_allow_tf32": mm.allow_tf32, "cudnn_allow_tf32": conv.allow_tf32}
    applied["autocast_dtype"] = "bfloat16" if precision == "bf16" else None
    applied["tf32"] = tf32
    return applied


def make_autocast(torch: Any, precision: str, device_type: str) -> Any:
    """``torch.autocast(device_type, dtype=bfloat16)`` for ``bf16`` (mixed precision over fp32
    master weights; no loss scaling is needed for bf16), None otherwise. One instance serves
    every step: entering it saves the state that leaving restores, so sequential use is safe."""
    if precision != "bf16":
        return None
    return torch.autocast(device_type=device_type, dtype=torch.bfloat16)


#: ``--optimizer-impl`` -> the keyword arguments of ``torch.optim.SGD``/``Adam``/``AdamW``
#: (:data:`dlperf.registry.OPTIMIZER_IMPLS`); ``default`` passes none: PyTorch's own default
#: (what ``auto`` ran before issue 23, and runs where no fused kernel serves).
_IMPL_KWARGS: dict[str, dict[str, bool]] = {"default": {}, "fused": {"fused": True},
                                            "foreach": {"foreach": True},
                                            "single": {"foreach": False}}
#: The zoo's optimizers that ``torch.optim`` implements fused (``fused=True``; the torch.optim
#: documentation lists Adam, AdamW, SGD and Adagrad; the zoo uses the first three).
FUSED_OPTIMIZERS = frozenset({"sgd", "adam", "adamw"})
#: Why ``auto`` is ``fused`` (docs/frameworks.md, "Optimizer implementation").
AUTO_EVIDENCE = ("H200, benchmarks/results/h200/yourmodel: fused against foreach -4.5% per step "
                 "(fcn5 fp32 b=512), -4.9% (gpt2_small bf16 b=8, AdamW); 2-core Xeon, "
                 "optimizer step alone: fused 1.5x (SGD) and 4.9x (AdamW) faster than the "
                 "for-loop, foreach no faster than it")


def fused_devices(torch: Any) -> tuple[str, ...]:
    """The device types with fused optimizer kernels in this PyTorch:
    ``torch.utils._foreach_utils._get_fused_kernels_supported_devices()`` (``cuda``, ``cpu``,
    ``mps``, ``xpu``, ... in PyTorch 2.13; a private function: empty where it is missing, so
    ``auto`` keeps PyTorch's default)."""
    try:
        mod = importlib.import_module(f"{torch.__name__}.utils._foreach_utils")
        return tuple(mod._get_fused_kernels_supported_devices())
    except (ImportError, AttributeError):  # pragma: no cover - a PyTorch without it
        return ()


def auto_impl(optimizer: str, device_types: Iterable[str], fused_on: Iterable[str]) -> str:
    """What ``--optimizer-impl auto`` runs (issue 23 item 5: the fastest standard
    implementation): ``fused`` when ``optimizer`` is in :data:`FUSED_OPTIMIZERS` and every
    parameter's device type (``device_types``, e.g. ``{"cuda"}``) is among ``fused_on``
    (:func:`fused_devices`), else ``default`` (PyTorch's own pick: ``foreach`` on CUDA, the
    for-loop elsewhere). No parameters: ``default``. Evidence: :data:`AUTO_EVIDENCE`."""
    types, fused_on = set(device_types), set(fused_on)
    if optimizer in FUSED_OPTIMIZERS and types and types <= fused_on:
        return "fused"
    return "default"


def default_impl(torch: Any, params: list[Any]) -> str:
    """The implementation PyTorch picks when neither ``foreach`` nor ``fused`` is given:
    ``foreach`` when every parameter is on a device with foreach kernels (CUDA), else
    ``single`` (its for-loop; the CPU), as ``torch.optim.optimizer._default_to_fused_or_foreach``
    decides (a private function: ``default`` where it is missing)."""
    try:  # torch.optim deletes its submodule names: imported by name (torch is imported)
        mod = importlib.import_module(f"{torch.optim.__name__}.optimizer")
    except ImportError:  # pragma: no cover - a PyTorch without it
        mod = None
    decide = getattr(mod, "_default_to_fused_or_foreach", None)
    if decide is None:  # pragma: no cover - a PyTorch without it
        return "default"
    fused, foreach = decide(params, False, False)
    return "fused" if fused else "foreach" if foreach else "single"


def _construct(torch: Any, params: list[Any], o: OptimizerSpec, kw: dict[str, bool]) -> Any:
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum,
                               weight_decay=o.weight_decay, **kw)
    if o.name in ("adam", "adamw"):
        cls = torch.optim.Adam if o.name == "adam" else torch.optim.AdamW
        return cls(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay, **kw)
    raise ValueError(f"optimizer {o.name!r} has no PyTorch implementation in dlperf; "
                     "use sgd, adam or adamw in the model's spec")


def make_optimizer(torch: Any, params: Any, o: OptimizerSpec,
                   impl: str = "auto") -> tuple[Any, dict[str, Any]]:
    """``(optimizer, flags["optimizer"])`` for the zoo's optimizer spec ``o``:
    ``torch.optim.SGD``/``Adam``/``AdamW`` in implementation ``impl`` (``--optimizer-impl``):
    ``auto`` (the fastest: :func:`auto_impl`, ``fused`` wherever PyTorch has fused kernels for
    the optimizer on the parameters' device, CUDA and the CPU; PyTorch's default elsewhere;
    before issue 23 it was always PyTorch's default, ``foreach`` on CUDA), ``fused``
    (``fused=True``), ``foreach`` (``foreach=True``) or ``single`` (``foreach=False``).

    The record: ``impl_asked`` is ``impl``; ``impl`` the implementation that ran (the one
    comparisons read, :mod:`dlperf.results.view`); ``fused`` whether ``fused=True`` was
    passed; ``foreach`` the ``foreach=`` keyword passed, ``"default"`` where none was (at
    ``auto``, as in results stored before the option). Should ``auto``'s fused optimizer be
    refused by PyTorch, PyTorch's default runs and ``auto_fallback`` says why.

    Raises:
        ValueError: ``o.name`` is none of ``sgd``, ``adam``, ``adamw``, or ``impl`` is not one
            of :data:`dlperf.registry.OPTIMIZER_IMPLS`.
        RuntimeError: PyTorch refuses the implementation for these parameters (e.g. ``fused``
            on a device without fused kernels); the message names ``--optimizer-impl``.
    """
    if impl != "auto" and (impl not in _IMPL_KWARGS or impl == "default"):
        raise ValueError(f"optimizer implementation {impl!r} is unknown; use one of "
                         f"auto, {', '.join(k for k in _IMPL_KWARGS if k != 'default')}")
    params = list(params)
    fallback = None
    if impl == "auto":
        ran = auto_impl(o.name, {p.device.type for p in params}, fused_devices(torch))
        try:
            opt = _construct(torch, params, o, _IMPL_KWARGS[ran])
        except RuntimeError as e:  # pragma: no cover - a device PyTorch lists but refuses
            fallback, ran = f"fused refused by PyTorch {torch.__version__}: {e}", "default"
            opt = _construct(torch, params, o, {})
    else:
        ran = impl
        try:
            opt = _construct(torch, params, o, _IMPL_KWARGS[impl])
        except RuntimeError as e:
            raise RuntimeError(f"--optimizer-impl {impl}: PyTorch {torch.__version__} refuses "
                               f"it for {o.name} here ({e}); use --optimizer-impl auto") from e
    kw = _IMPL_KWARGS[ran]
    flags = optimizer_flags(o, kw.get("foreach", "default" if impl == "auto" else False))
    flags.update(impl_asked=impl, fused=kw.get("fused", False),
                 impl=default_impl(torch, params) if ran == "default" else ran)
    if fallback:
        flags["auto_fallback"] = fallback
    return opt, flags


def make_loss(torch: Any, spec: ModelSpec) -> Callable[[Any, Any], Any]:
    """The loss ``(logits, targets) -> scalar`` of ``spec``: mean cross-entropy of ``[B, C]``
    or ``[B, T, V]`` logits against ``[B]`` or ``[B, T]`` targets; for a model outside the
    default input/loss contract (``not spec.default_io``: CTC, masked LM, label smoothing;
    :mod:`dlperf.zoo.spec`) its implementation module's ``loss_fn(spec)``."""
    if not spec.default_io:
        return importlib.import_module(f"dlperf.zoo.{spec.family}.torch_impl").loss_fn(spec)
    F = torch.nn.functional
    n_classes = spec.num_classes

    def loss_fn(out: Any, y: Any) -> Any:
        return F.cross_entropy(out.reshape(-1, n_classes), y.reshape(-1))

    return loss_fn


@dataclasses.dataclass(eq=False)
class TorchStep:
    """One staged training iteration (see the module docstring).

    Attributes:
        model: the module trained (eager, ``torch.compile``-d, or DDP-wrapped).
        opt: its optimizer; ``zero_grad(set_to_none=True)`` (no kernels) before the forward.
        loss_fn: ``(logits, targets) -> loss`` (:func:`make_loss`).
        fetch: returns the step's batch as it is held (``DataSource.fetch``).
        to_device: puts it on the device; None where ``fetch`` gives device tensors already
            (``DataSource.to_device`` is the identity): no call then.
        autocast: the ``torch.autocast`` instance of bf16 (:func:`make_autocast`), or None.
        begin: called at the start of each step, or None; ``torch.compiler.
            cudagraph_mark_step_begin`` in the CUDA-graph compile modes (a new step starts a new
            generation of CUDA-graph outputs, PyTorch's CUDAGraph Trees documentation; nothing
            reads the previous step's outputs).
        grad_accum: ``K`` micro-batches per step (``x.chunk(K)``), each loss divided by ``K``.
        no_sync: DDP's ``no_sync`` (the first ``K - 1`` micro-batches do not all-reduce: one
            all-reduce per step, with the last backward), or None without DDP.
    """

    model: Any
    opt: Any
    loss_fn: Callable[[Any, Any], Any]
    fetch: Callable[[], Any]
    to_device: Callable[[Any], Any] | None = None
    autocast: Any = None
    begin: Callable[[], Any] | None = None
    grad_accum: int = 1
    no_sync: Callable[[], Any] | None = None

    def run(self, mark: Callable[..., None] = no_mark) -> Any:
        """One iteration, ``mark(stage)`` after each stage; returns the loss (a detached device
        scalar, the sum over micro-batches of ``loss / K``). ``zero_grad`` counts in ``t_f``."""
        b = self.fetch()
        mark("t_io")
        x, y = b if self.to_device is None else self.to_device(b)
        mark("t_h2d")
        if self.begin is not None:
            self.begin()
        self.opt.zero_grad(set_to_none=True)
        K = self.grad_accum
        if K == 1:
            total = self._forward_backward(x, y, mark)
        else:
            total = None
            for i, (xs, ys) in enumerate(zip(x.chunk(K), y.chunk(K))):
                with self.no_sync() if self.no_sync is not None and i < K - 1 else _SYNCED:
                    loss = self._forward_backward(xs, ys, mark)
                total = loss if total is None else total + loss
        self.opt.step()
        mark("t_u")
        return total

    def _forward_backward(self, x: Any, y: Any, mark: Callable[..., None]) -> Any:
        """Forward and loss (``t_f``), backward (``t_b``) of one micro-batch; its loss, detached."""
        if self.autocast is None:  # no context entered: the fused step's Python calls count
            loss = self.loss_fn(self.model(x), y)
        else:  # the forward under autocast, the backward outside it (PyTorch's AMP recipe)
            with self.autocast:
                loss = self.loss_fn(self.model(x), y)
        if self.grad_accum > 1:
            loss = loss / self.grad_accum
        mark("t_f")
        loss.backward()
        mark("t_b")
        return loss.detach()

    def with_model(self, model: Any) -> TorchStep:
        """The same step (optimizer, data, loss, precision) on another module, e.g. the eager
        model under a FLOP counter (a dispatch mode under ``torch.compile`` would recompile)."""
        return dataclasses.replace(self, model=model)

"""What identifies a benchmark point: its run key, point key and label, and the
back-compatibility rules that keep the keys of stored results valid.

A run key (:func:`run_key`) is what a resumed sweep looks up to tell which points are done, so
it must not change when dlperf grows: every field added after the first stored results is left
out of the key while at its default (:data:`KEY_OMIT_AT_DEFAULT` and the rules in
:func:`run_key`), and fields that say how long or from where (not what) are never in it. Tests
pin keys of points stored before each field existed (tests/unit/test_config.py,
tests/integration/test_repeats.py).

These functions read a :class:`~dlperf.config.RunConfig` (or, for :func:`layout_change` and
:func:`ddp_changes`, a stored result's config dict); capabilities come from the registry.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from dlperf.config.axes import ddp_changes
from dlperf.registry import framework_info

#: Fields added after the first stored results, with their defaults: a field at its default
#: is left out of :func:`run_key`, so adding a field does not change the key (and the
#: resumability) of every point already stored.
KEY_OMIT_AT_DEFAULT: dict[str, Any] = {"layout": "auto", "repeat": 0, "loader_impl": "auto",
                                       "compile_mode": "default", "optimizer_impl": "auto",
                                       "cpu_bind": "none"}

#: Fields never in a run key: how long, from where, how it is labelled or probed, and the
#: fields whose place in the key :func:`run_key` decides itself (batch and data parallelism).
KEY_EXCLUDED = frozenset({"data_dir", "timeout_s", "iterations", "breakdown", "trace_dir",
                          "timeline",
                          "input_bound_share", "measure_ceilings", "power_interval_s",
                          "target_loss", "comm_profile_iters", "scaling", "nproc", "nnodes",
                          "dp_layout", "ddp", "batch_size"})


def has_image_layout(model: str) -> bool:
    """True if ``model`` has image (4-D) activations, where ``layout`` applies; True for an
    unknown name (the layout then stays in its key; the model is refused elsewhere)."""
    from dlperf.zoo import get_spec, is_model

    return not is_model(model) or get_spec(model).input_kind == "image"


def takes_ddp_options(framework: Any) -> bool:
    """Whether ``framework``'s data-parallel engine takes PyTorch DDP's options (registry
    ``ddp``); False for an unknown name."""
    info = framework_info(framework)
    return bool(info and info.ddp)


def layout_change(framework: Any, dp_layout: Any) -> str | None:
    """``dp_layout`` when it is not the framework's default (its registry ``dp_layouts[0]``),
    e.g. ``"per_device"`` for a TensorFlow or JAX run with one process per device; else None
    (also for an unknown framework or a missing layout)."""
    info = framework_info(framework)
    return dp_layout if info and dp_layout and dp_layout != info.dp_layouts[0] else None


def run_key(cfg: Any) -> str:
    """A stable 16-hex-digit key of the benchmark point ``cfg``: what is trained, where and how.

    ``iterations``, ``data_dir`` and ``timeout_s`` are excluded: they say how long and from
    where, not what is measured, so changing them does not make a finished point of a sweep run
    again (the policy actually used is stored with every result); so are the labelling and
    probing settings ``input_bound_share``, ``measure_ceilings`` and ``power_interval_s``. A
    breakdown or a trace is part of what is measured: ``breakdown: true`` and ``trace: true``
    enter the key when set (not the trace folder), and ``timeline: true`` likewise. Fields added after the first results
    (``layout``, ``repeat``, ``compile_mode``, ``optimizer_impl``, the input-pipeline fields)
    count only when set,
    so keys of results stored before they existed stay valid: repeat 0 has the key the point
    always had, repeat k > 0 a key of its own; ``loader_impl`` counts when it is not ``auto``
    and there are workers (with 0 workers every implementation makes the batch on the calling
    thread: one measurement). The key is the first 16 hex digits of the SHA-256 of the fields'
    sorted, compact JSON.
    """
    d = cfg.model_dump(exclude=set(KEY_EXCLUDED))
    for k, default in KEY_OMIT_AT_DEFAULT.items():
        if d.get(k) == default:
            del d[k]
    if "layout" in d and not has_image_layout(cfg.model):
        del d["layout"]  # no 4-D activations: the layout changes nothing measured
    if d["loader_workers"] is None:
        del d["loader_workers"], d["loader_prefetch"]
    if not cfg.loader_workers:  # 0 workers: the calling thread, whatever loader_impl says
        d.pop("loader_impl", None)
    if cfg.breakdown:
        d["breakdown"] = True
    if cfg.trace_dir:
        d["trace"] = True
    if cfg.timeline:
        d["timeline"] = True
    # The batch by what it measures: the global batch (one replica: the batch as before, so
    # keys of single-device results made before data parallelism existed do not change).
    d["batch_size"] = cfg.global_batch
    if cfg.distributed:
        d.update(nproc=cfg.nproc, nnodes=cfg.nnodes, dp_layout=cfg.dp_layout)
        if takes_ddp_options(cfg.framework):
            d["ddp"] = cfg.ddp.key_dict()
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def point_key(cfg: Any) -> str:
    """The run key of ``cfg``'s repeat 0: the same for every repeat of a point (what
    ``dlperf results --compare repeats`` groups by)."""
    return run_key(cfg) if cfg.repeat == 0 else run_key(cfg.model_copy(update={"repeat": 0}))


def label(cfg: Any) -> str:
    """Short human label of ``cfg``, e.g. ``resnet50 torch/eager cuda bf16 b=64 synthetic``.

    A compile mode other than the default follows the mode (``torch/graph
    [reduce-overhead]``); data parallel: ``b=128 (2x64)`` and ``x2`` devices (``2x2`` for 2
    nodes of 2), a data-parallel layout other than the framework's default and the DDP options
    that are not at their default; a repeated run ends in ``#k`` (its ``repeat``, 0-based;
    repeat 0 has none).
    """
    thr = f" threads={cfg.threads}" if cfg.threads else ""
    thr += f" cpu-bind={cfg.cpu_bind}" if cfg.cpu_bind != "none" else ""
    thr += (f" layout={cfg.layout}" if cfg.layout != "auto" and has_image_layout(cfg.model)
            else "")
    lw = f" workers={cfg.loader_workers}" if cfg.loader_workers is not None else ""
    lw += f" loader={cfg.loader_impl}" if cfg.loader_impl != "auto" else ""
    extra = (" +breakdown" if cfg.breakdown else "") + (" +trace" if cfg.trace_dir else "")
    extra += " +timeline" if cfg.timeline else ""
    b, par = f"b={cfg.global_batch}", ""
    if cfg.distributed:
        b += f" ({cfg.world_size}x{cfg.per_device_batch})"
        par = (f" x{cfg.nproc}" if cfg.nnodes == 1 else f" {cfg.nnodes}x{cfg.nproc}")
        lay = layout_change(cfg.framework, cfg.dp_layout)
        extra += f" {lay}" if lay else ""
        if takes_ddp_options(cfg.framework):
            changed = cfg.ddp.changed()
            extra += f" ddp({', '.join(changed)})" if changed else ""
    extra += f" #{cfg.repeat}" if cfg.repeat else ""
    cm = f" [{cfg.compile_mode}]" if cfg.compile_mode != "default" else ""
    extra += f" opt={cfg.optimizer_impl}" if cfg.optimizer_impl != "auto" else ""
    return (f"{cfg.model} {cfg.framework}/{cfg.mode}{cm} {cfg.device}{par} "
            f"{cfg.precision} {b} {cfg.data}{thr}{lw}{extra}")


__all__ = ["KEY_EXCLUDED", "KEY_OMIT_AT_DEFAULT", "ddp_changes", "has_image_layout", "label",
           "layout_change", "point_key", "run_key", "takes_ddp_options"]

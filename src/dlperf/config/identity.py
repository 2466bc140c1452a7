"""What identifies a benchmark point: its run key, point key and label, and the
back-compatibility rules that keep the keys of stored results valid.

A run key (:func:`run_key`) is what a resumed sweep looks up to tell which points are done, so
it must not change when dlperf grows: every field added after the first stored results is left
out of the key while at its default (:data:`KEY_OMIT_AT_DEFAULT` and the rules in
:func:`run_key`), and fields that say how long or from where (not what) are never in it. Tests
pin keys of points stored before each field existed (tests/unit/test_config.py,
tests/integration/test_repeats.py).

These functions read a :class:`~dlperf.config.RunConfig` (its settings by name,
:meth:`~dlperf.config.RunConfig.flat`, make the key; or, for :func:`layout_change` and
:func:`ddp_changes`, a stored result's settings); capabilities come from the registry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
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
                          "timeline", "options",
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
    d = {k: v for k, v in cfg.flat().items() if k not in KEY_EXCLUDED}
    for k, default in KEY_OMIT_AT_DEFAULT.items():
        if d.get(k) == default:
            del d[k]
    if "layout" in d and not has_image_layout(cfg.workload.model):
        del d["layout"]  # no 4-D activations: the layout changes nothing measured
    if d["loader_workers"] is None:
        del d["loader_workers"], d["loader_prefetch"]
    if not cfg.input.loader_workers:  # 0 workers: the calling thread, whatever loader_impl is
        d.pop("loader_impl", None)
    if cfg.measure.breakdown:
        d["breakdown"] = True
    if cfg.measure.trace_dir:
        d["trace"] = True
    if cfg.measure.timeline:
        d["timeline"] = True
    keyed = key_options(cfg)
    if keyed:
        d["options"] = keyed
    # The batch by what it measures: the global batch (one replica: the batch as before, so
    # keys of single-device results made before data parallelism existed do not change).
    d["batch_size"] = cfg.global_batch
    if cfg.distributed:
        par = cfg.parallel
        d.update(nproc=par.nproc, nnodes=par.nnodes, dp_layout=par.dp_layout)
        if takes_ddp_options(cfg.runtime.framework):
            d["ddp"] = cfg.runtime.ddp.key_dict()
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def key_options(cfg: Any) -> dict[str, Any]:
    """The framework options of ``cfg`` that are part of its run key: those its ``Options``
    model lists in ``KEY_FIELDS`` (:func:`dlperf.config.rules.options_model`), as given; ``{}``
    for none (a framework's scripted or environmental options leave the point as it is)."""
    if not cfg.runtime.options:
        return {}
    from dlperf.config.rules import options_model

    info = framework_info(cfg.runtime.framework)
    model = options_model(info) if info is not None else None
    keys: frozenset[str] = getattr(model, "KEY_FIELDS", frozenset())
    return {k: v for k, v in sorted(cfg.runtime.options.items()) if k in keys}


def point_key(cfg: Any) -> str:
    """The run key of ``cfg``'s repeat 0: the same for every repeat of a point (what
    ``dlperf results --compare repeats`` groups by)."""
    return run_key(cfg) if cfg.measure.repeat == 0 else run_key(cfg.with_(repeat=0))


def label(cfg: Any) -> str:
    """Short human label of the run config ``cfg`` (:func:`label_of` of its settings), e.g.
    ``resnet50 torch/eager cuda bf16 b=64 synthetic``."""
    flat = {k: v for k, v in cfg.flat().items() if k != "iterations"}
    return label_of({**flat, "batch_size": cfg.global_batch,
                     "per_device_batch": cfg.per_device_batch, "world_size": cfg.world_size})


def label_of(s: Mapping[str, Any]) -> str:
    """The label of a benchmark point or of a group of points, from its settings: the one
    place a label is written, in one order.

    ``s`` holds some of a run config's fields (``model``, ``framework``, ``mode``,
    ``compile_mode``, ``device``, ``nproc``, ``nnodes``, ``precision``, ``grad_accum``, ``data``,
    ``threads``, ``cpu_bind``, ``layout``, ``loader_workers``, ``loader_impl``, ``breakdown``,
    ``trace_dir``, ``timeline``, ``dp_layout``, ``ddp``, ``optimizer_impl``, ``repeat``) with
    ``batch_size`` the global batch and, for data parallelism, ``world_size`` and
    ``per_device_batch`` (:func:`dlperf.results.view.settings_of` reads them from a record).
    A setting absent or None is left out, so a group's label names what its points share.

    Order: ``model framework/mode [compile mode] device[ xN] precision b=B[ (NxP)][ accum=K]
    data`` (``accum=`` for K > 1 micro-batches per step), then
    the settings not at their default: ``threads=`` ``cpu-bind=`` ``layout=`` (image models
    only) ``workers=`` ``loader=`` ``+breakdown`` ``+trace`` ``+timeline``, a data-parallel
    layout other than the framework's, ``ddp(...)`` (PyTorch DDP options not at their
    default), ``opt=`` and ``#repeat`` (0-based; repeat 0 has none). E.g.
    ``resnet50 torch/graph [reduce-overhead] cuda x2 bf16 b=128 (2x64) synthetic`` (2 devices
    on one node; ``2x2`` for 2 nodes of 2).
    """
    def given(k: str) -> Any:
        return s.get(k)

    model, fw, mode = given("model"), given("framework"), given("mode")
    nproc, nnodes = given("nproc"), given("nnodes") or 1
    world = given("world_size") or (nproc * nnodes if nproc else 1)
    words: list[str] = []
    if model is not None:
        words.append(str(model))
    if fw is not None or mode is not None:
        fm = "/".join(str(x) for x in (fw, mode) if x is not None)
        cm = given("compile_mode")
        words.append(fm + (f" [{cm}]" if cm and cm != "default" else ""))
    if given("device") is not None:
        par = ""
        if world > 1:
            per_node = nproc or world // nnodes
            par = f" x{per_node}" if nnodes == 1 else f" {nnodes}x{per_node}"
        words.append(f"{given('device')}{par}")
    if given("precision") is not None:
        words.append(str(given("precision")))
    if given("batch_size") is not None:
        pdb = given("per_device_batch")
        words.append(f"b={given('batch_size')}" + (f" ({world}x{pdb})" if world > 1 and pdb
                                                    else ""))
    if (given("grad_accum") or 1) != 1:
        words.append(f"accum={given('grad_accum')}")
    if given("data") is not None:
        words.append(str(given("data")))
    if given("threads"):
        words.append(f"threads={given('threads')}")
    if given("cpu_bind") not in (None, "none"):
        words.append(f"cpu-bind={given('cpu_bind')}")
    if given("layout") not in (None, "auto") and (model is None or has_image_layout(model)):
        words.append(f"layout={given('layout')}")
    if given("loader_workers") is not None:
        words.append(f"workers={given('loader_workers')}")
    if given("loader_impl") not in (None, "auto"):
        words.append(f"loader={given('loader_impl')}")
    words += [w for k, w in (("breakdown", "+breakdown"), ("trace_dir", "+trace"),
                             ("timeline", "+timeline")) if given(k)]
    if world > 1:
        lay = layout_change(fw, given("dp_layout"))
        words += [lay] if lay else []
        changed = ddp_changes(given("ddp")) if takes_ddp_options(fw) else []
        words += [f"ddp({', '.join(changed)})"] if changed else []
    if given("optimizer_impl") not in (None, "auto"):
        words.append(f"opt={given('optimizer_impl')}")
    if given("repeat"):
        words.append(f"#{given('repeat')}")
    return " ".join(words)


def session_of(hostname: Any, cpu_model: Any, cpu_id: Mapping[str, Any] | None,
               created_at: Any) -> str:
    """The label of a host session, ``hostname/cpu/day``: the one place it is written (the
    performance model's ``host time from``, ``dlperf results --compare``'s origin column).

    The CPU is named by its name (``env.cpu_model``, e.g. ``Intel(R) Xeon(R) Processor``) in
    every record, with its family and model number after it where the record holds the CPU's
    identity (``env.cpu_id``, e.g. ``Intel(R) Xeon(R) Processor (family 6 model 207)``: a
    virtual machine's name is often generic). ``created_at`` is an ISO time whose day is
    kept. A part the record lacks is named as unrecorded, never ``None``."""
    cid = cpu_id if isinstance(cpu_id, Mapping) else {}
    model = cid.get("model")
    cpu = str(cpu_model) if cpu_model not in (None, "") else None
    if model not in (None, ""):
        fam = cid.get("family")
        num = f"family {fam} model {model}" if fam not in (None, "") else f"model {model}"
        cpu = f"{cpu or 'cpu'} ({num})"
    return "/".join((str(hostname) if hostname not in (None, "") else "host unrecorded",
                     cpu or "cpu unrecorded",
                     str(created_at or "")[:10] or "date unrecorded"))


__all__ = ["KEY_EXCLUDED", "KEY_OMIT_AT_DEFAULT", "ddp_changes", "has_image_layout", "label",
           "label_of", "session_of",
           "layout_change", "point_key", "run_key", "takes_ddp_options"]

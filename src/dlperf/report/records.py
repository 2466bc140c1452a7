"""What the report reads of a stored result: its record (:class:`~dlperf.results.schema.
RunRecord`), the point it measured and the settings that set a run apart from another of the
same point.

Every report function takes records (``ResultStore.records``) or store rows
(``ResultStore.rows``, read as records by :func:`dlperf.results.view.as_record`) and reads
the record's typed parts. Framework facts come from the registry
(:func:`dlperf.registry.framework_info`), never from a framework's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.registry import framework_info
from dlperf.results.schema import RunRecord
from dlperf.results.view import as_record, as_records, config_of, setting

__all__ = ["POINT_KEYS", "as_record", "as_records", "field", "fields", "point_of", "label",
           "is_ok", "layout_setting", "compile_mode_label", "optimizer_impl_label",
           "optimizer_label", "extra_measurements",
           "workers_kind", "applied_layout", "dist_options", "eager_mode_of"]

#: What makes two results comparable: the point they measured.
POINT_KEYS = ("model", "device", "precision", "batch_size", "data", "threads", "loader_workers",
              "world_size", "grad_accum")
#: Point fields whose missing value means 1 (results stored before the field existed).
_ONE_IF_NULL = ("world_size", "grad_accum")


def field(rec: RunRecord, name: str) -> Any:
    """The identity field ``name`` of a record (``model``, ``batch_size``, ...: the names of
    the store's columns), or ``loader_workers`` from its config.

    Raises:
        AttributeError: ``name`` is neither.
    """
    if name == "loader_workers":
        return setting(rec, "loader_workers")
    return getattr(rec.identity, name)


def fields(rec: RunRecord, names: Sequence[str]) -> dict[str, Any]:
    """``{name: field(rec, name)}`` for each of ``names``."""
    return {k: field(rec, k) for k in names}


def point_of(r: RunRecord | Mapping[str, Any], keys: Sequence[str] = POINT_KEYS) -> tuple:
    """The comparison point of a result: its ``keys`` fields (default :data:`POINT_KEYS`).
    ``loader_workers`` None (batches prepared before timing) differs from 0 (the pipeline in
    the training thread); ``world_size`` and ``grad_accum`` None (results stored before data
    parallelism) are 1."""
    rec = as_record(r)
    return tuple((field(rec, k) or 1) if k in _ONE_IF_NULL else field(rec, k) for k in keys)


def label(rec: RunRecord) -> str:
    """``framework/mode`` of a record."""
    return f"{rec.identity.framework}/{rec.identity.mode}"


def is_ok(r: RunRecord | Mapping[str, Any]) -> bool:
    """True for a result that measured (status ``ok``)."""
    return as_record(r).identity.status == "ok"


def layout_setting(r: RunRecord | Mapping[str, Any]) -> str:
    """The ``--layout`` a result ran with: ``auto`` (each framework's recommended layout, and
    results stored before the option existed), ``nchw`` or ``nhwc`` (forced)."""
    return setting(as_record(r), "layout") or "auto"


def compile_mode_label(r: RunRecord | Mapping[str, Any]) -> str | None:
    """``[reduce-overhead]`` etc. for a run with a compiler mode other than the default
    (``--compile-mode``), so that it tells apart from the default run; None otherwise (and
    for results stored before the option existed: default)."""
    mode = setting(as_record(r), "compile_mode")
    return f"[{mode}]" if mode and mode != "default" else None


def optimizer_impl_label(r: RunRecord | Mapping[str, Any]) -> str | None:
    """``opt=fused`` etc. for a run with an optimizer implementation other than the default
    (``--optimizer-impl``), so that it tells apart from the default run; None otherwise (and
    for results stored before the option existed: auto)."""
    impl = setting(as_record(r), "optimizer_impl")
    return f"opt={impl}" if impl and impl != "auto" else None


def optimizer_label(r: RunRecord | Mapping[str, Any]) -> str | None:
    """The optimizer part of a result's label in the results table: ``opt=fused`` etc. for an
    implementation asked for (:func:`optimizer_impl_label`); for ``auto``, what it ran where
    that is not the framework's own default, ``opt=fused (auto)`` (the record's
    ``flags.optimizer``: ``impl_asked`` ``auto``, ``fused`` passed, ``impl`` what ran; PyTorch
    records these); None where ``auto`` ran the framework's default (no fused kernels here, a
    fused optimizer refused, a framework with one implementation) or the record does not say
    (stored before ``--optimizer-impl``)."""
    rec = as_record(r)
    asked = optimizer_impl_label(rec)
    if asked:
        return asked
    o = (rec.flags or {}).get("optimizer")
    if isinstance(o, Mapping) and o.get("impl_asked") == "auto" and o.get("fused") is True \
            and o.get("impl"):
        return f"opt={o['impl']} (auto)"
    return None


def extra_measurements(r: RunRecord | Mapping[str, Any]) -> str | None:
    """``+breakdown`` / ``+trace`` for a run measured with --breakdown / --trace (a point of
    its own: its run key says so), so that it tells apart from the plain run; else None."""
    cfg = config_of(as_record(r))
    marks = [m for m, on in (("+breakdown", cfg.get("breakdown")),
                             ("+trace", cfg.get("trace_dir"))) if on]
    return " ".join(marks) or None


def workers_kind(r: RunRecord | Mapping[str, Any]) -> str | None:
    """``processes`` or ``threads``: the kind of loader workers of a pipeline with workers,
    for a framework that offers several kinds (its registry ``loader_impls``, e.g. JAX's Grain
    processes or dlperf's HostPipeline threads; results stored before ``workers_kind``
    existed ran the threads); else None."""
    rec = as_record(r)
    pipe = (rec.data_info or {}).get("pipeline")
    info = framework_info(rec.identity.framework)
    if not isinstance(pipe, dict) or info is None or len(info.loader_impls) < 2:
        return None
    if pipe.get("workers_kind"):
        return str(pipe["workers_kind"])
    if str(pipe.get("impl", "")).startswith("dlperf HostPipeline") and pipe.get("num_workers"):
        return "threads"
    return None


def applied_layout(r: RunRecord | Mapping[str, Any]) -> str | None:
    """The image layout a run applied (``NCHW``/``NHWC``, from its flags) where its framework
    runs more than one (its registry ``layouts``), so that runs differing only in layout tell
    apart; None for a framework of one layout and for models without 4-D activations."""
    rec = as_record(r)
    info = framework_info(rec.identity.framework)
    if info is None or len(info.layouts) < 2 or not isinstance(rec.flags, dict):
        return None
    return rec.flags.get("layout")


def dist_options(r: RunRecord | Mapping[str, Any]) -> str | None:
    """A data-parallel run's options that are not at their default (:func:`dlperf.perfmodel.
    scaling.variant_of`: ``per_device``, ``ddp(broadcast_buffers=False)``), so runs differing
    only in them tell apart; None for a one-device run or none changed."""
    from dlperf.perfmodel.scaling import variant_of  # pydantic only, no framework

    rec = as_record(r)
    if int(rec.identity.world_size or 1) <= 1:
        return None
    return variant_of(rec) or None


def eager_mode_of(framework: Any) -> str | None:
    """The eager mode of ``framework`` (its registry ``eager_mode``), the baseline of its
    other modes; None for a framework without one or not registered here."""
    info = framework_info(framework)
    return info.eager_mode if info is not None else None

"""What a line of the report's plots is: a *series*, the points of one configuration along
the batch size.

A series is every setting of a point's run key (:func:`dlperf.config.identity.run_key`) but
the model (each figure is one model's), the batch (the x axis) and the repeat (repeats are one
point): framework, mode, compile mode, device and devices, precision, data, threads, a forced
layout, loader workers, optimizer implementation, seed, ... (:func:`series_config`). Points
that differ in any of them are two lines. Its label is the points' own label
(:func:`dlperf.results.view.label_of_record`) without those three settings; two series of one
model that share a label are told apart by the settings that differ (:func:`tell_apart`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlperf.results.schema import RunRecord
from dlperf.results.view import config_of, label_of_record, settings_of

__all__ = ["series_config", "series_of", "tell_apart"]


#: Config fields that do not set a series (a line) apart: the model (each figure is one
#: model's, and a series keeps its colour across models), the batch (the x axis), the repeat
#: (repeats are one point), and what the run key leaves out (:data:`dlperf.config.identity.
#: KEY_EXCLUDED`: how long and from where; the data-parallel fields are added back as the run
#: key adds them).
_NOT_SERIES = frozenset({"model", "batch_size", "repeat"})
#: Settings a series' label leaves out (the figure names the model, the axis the batch).
_NOT_IN_SERIES_LABEL = frozenset({"model", "batch_size", "per_device_batch", "repeat"})


def series_config(rec: RunRecord) -> dict[str, Any]:
    """What sets ``rec``'s series apart: its stored config as the run key reads it
    (:func:`dlperf.config.identity.run_key`), without the model, the batch and the repeat,
    with the devices (a forced ``--layout`` is in the config; ``auto`` is one setting, whatever
    layout each model resolves it to, so one configuration keeps one colour across models)."""
    from dlperf.config.identity import KEY_EXCLUDED, KEY_OMIT_AT_DEFAULT, has_image_layout

    i = rec.identity
    cfg = config_of(rec)
    d = {k: v for k, v in cfg.items() if k not in KEY_EXCLUDED and k not in _NOT_SERIES}
    for k, default in KEY_OMIT_AT_DEFAULT.items():
        if d.get(k) == default:
            d.pop(k, None)
    if "layout" in d and not has_image_layout(str(i.model)):
        del d["layout"]  # no 4-D activations: the layout changes nothing measured
    if d.get("loader_workers") is None:  # batches prepared before timing: no pipeline
        d.pop("loader_workers", None)
        d.pop("loader_prefetch", None)
    if not d.get("loader_workers"):  # 0 workers: the calling thread, whatever the impl
        d.pop("loader_impl", None)
    for k in ("breakdown", "timeline"):
        if cfg.get(k):
            d[k] = True
    if cfg.get("trace_dir"):
        d["trace"] = True
    for k in ("framework", "mode", "device", "precision", "data", "threads"):
        d.setdefault(k, getattr(i, k))  # records stored without a config
    d.update(world_size=int(i.world_size or 1), nnodes=int(i.nnodes or 1))
    if d["world_size"] > 1:
        d.update(dp_layout=cfg.get("dp_layout"), ddp=cfg.get("ddp"), scaling=cfg.get("scaling"))
    return d


def series_of(rec: RunRecord) -> tuple[tuple[str, ...], str]:
    """``((label, key), label)``: the series of ``rec`` (every setting but the model, the
    batch and the repeat: :func:`series_config`) and its label, the point's label
    (:func:`dlperf.results.view.label_of_record`) without those settings, e.g.
    ``torch/graph [max-autotune] cuda bf16 synthetic layout=nhwc +breakdown``."""
    import json

    shown = [k for k in settings_of(rec) if k not in _NOT_IN_SERIES_LABEL]
    label = label_of_record(rec, only=shown)
    key = json.dumps(series_config(rec), sort_keys=True, default=str)
    return (label, key), label


def tell_apart(views: Sequence[Any]) -> None:
    """Series of one model that share a label but differ in a setting the label leaves out:
    each label gets the differing settings it has, e.g. ``(seed=1)`` (a setting another
    series lacks or leaves at its default shows on the series that has it). ``views``: the
    report's points (:class:`dlperf.report.html_plots.PointView`: ``model``, ``series`` as
    ``(label, key)`` and ``series_label``), changed in place."""
    import json

    by_label: dict[tuple[str, str], set[str]] = {}
    for pv in views:
        by_label.setdefault((pv.model, pv.series[0]), set()).add(pv.series[1])
    for (model, lab), keys in by_label.items():
        if len(keys) < 2:
            continue
        cfgs = {k: json.loads(k) for k in keys}
        names = sorted({f for c in cfgs.values() for f in c
                        if len({json.dumps(d.get(f), sort_keys=True) for d in cfgs.values()}) > 1})
        for pv in views:
            if pv.model == model and pv.series[0] == lab:
                c = cfgs[pv.series[1]]
                extra = ", ".join(f"{f}={c[f]}" for f in names if c.get(f) is not None)
                pv.series_label = f"{lab} ({extra})" if extra else lab
                pv.series = (pv.series_label, pv.series[1])

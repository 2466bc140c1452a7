"""``dlperf predict``: the iteration time of a stored series at a batch size not measured.

Pure functions over result rows (the store's columns); see :mod:`dlperf.perfmodel.batch` for
the model and its sources. The interval comes from the held-out residuals of every series in
the same results file that has at least 4 batch sizes (leave-one-batch-size-out), so it says
how far this model has missed on this file's own data, not a textbook formula.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.errors import ConfigError
from dlperf.perfmodel import batch as pb

#: The series-selecting options of ``dlperf predict`` (store columns), in the order they are
#: named in messages.
SELECTORS = ("model", "framework", "mode", "precision", "device")


def _select(series: Sequence[pb.Series], want: Mapping[str, Any]) -> pb.Series:
    keys = pb.SERIES_KEY
    hits = [s for s in series
            if all(v is None or dict(zip(keys, s.key))[k] == v for k, v in want.items())]
    if not hits:
        known = sorted({s.label for s in series})
        raise ConfigError("no stored series matches " + ", ".join(
            f"{k}={v}" for k, v in want.items() if v is not None)
            + "; stored series: " + ("; ".join(known[:20]) or "none") + (" ..." if len(known) > 20 else ""))
    if len(hits) > 1:
        raise ConfigError("several stored series match; narrow with --framework/--mode/"
                          "--precision/--device: " + "; ".join(sorted(s.label for s in hits)))
    return hits[0]


def predict(rows: Sequence[Mapping[str, Any]], *, batch_size: int, model: str,
            framework: str | None = None, mode: str | None = None,
            precision: str | None = None, device: str | None = None,
            level: float = 0.9) -> dict[str, Any]:
    """Predict the iteration time of one stored series at ``batch_size`` samples.

    Args:
        rows: result rows of one results file (``ResultStore.rows()``).
        batch_size: the global mini-batch to predict (samples), >= 1.
        model, framework, mode, precision, device: pick the series (None: any, if only one).
        level: coverage of the interval.

    Returns:
        ``predicted_step_time_s``, ``interval_s`` [low, high], ``samples_per_s``, ``bound``
        (host or device), ``parts`` {``host_s``, ``device_s``}, ``calibrated_on`` (result ids
        and batch sizes), ``measured_step_time_s`` when that batch was stored, ``model``.

    Raises:
        ConfigError: no series or several match, fewer than 2 batch sizes are stored for it,
            or ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {batch_size}")
    series = pb.series_from_rows(rows)
    s = _select(series, {"model": model, "framework": framework, "mode": mode,
                         "precision": precision, "device": device})
    train = {b: v for b, v in s.points.items() if b != batch_size}
    if len(train) < 2:
        raise ConfigError(f"{s.label}: {len(train)} other batch size(s) stored "
                          f"({sorted(s.points)}); the batch-size model needs at least 2: "
                          "measure the series at more batch sizes (dlperf run -b 16,64,256)")
    fit = pb.fit_batch(list(train), [v[0] for v in train.values()])
    t = fit.step_time_s(batch_size)
    lo, hi = pb.prediction_interval(pb.validate_batch(series), level)
    meas = s.points.get(batch_size)
    return {"series": s.label, "batch_size": batch_size,
            "predicted_step_time_s": t, "interval_s": [t * lo, t * hi],
            "interval_level": level, "samples_per_s": batch_size / t,
            "bound": fit.bound(batch_size),
            "parts": {"host_s": fit.host_s, "device_s": fit.device_s(batch_size)},
            "calibrated_on": [{"result_id": v[1], "batch_size": b} for b, v in sorted(train.items())],
            "measured_step_time_s": meas[0] if meas else None,
            "model": f"host/device p-norm, p={pb.SMOOTH_P:g} (dlperf.perfmodel.batch)"}


def validation_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: per back-test category the count, MdAPE and max of the model and the
    ``a + b*B`` baseline (%)."""
    summary = pb.summarize_validation(pb.validate_batch(pb.series_from_rows(rows)))
    if not summary:
        return ("no series with 4 or more batch sizes in this file: nothing to back-test\n")
    lines = ["| category | count | MdAPE % | max % | a+b*B MdAPE % | a+b*B max % |",
             "|---|---:|---:|---:|---:|---:|"]
    for d in summary:
        lines.append(f"| {d['category']} | {d['count']} | {d['mdape_pct']:.2f} | "
                     f"{d['max_pct']:.1f} | {d['baseline_mdape_pct']:.2f} | "
                     f"{d['baseline_max_pct']:.1f} |")
    return "\n".join(lines) + "\n"

"""``dlperf predict``: the iteration time at a batch size that was not measured, from a
stored series (:mod:`dlperf.perfmodel.predict`); ``--validate`` back-tests it."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from dlperf.cli import common
from dlperf.cli.common import check_db, guard, print_markdown
from dlperf.errors import ConfigError


def predict(
    db: Annotated[str, typer.Option(help="Results file whose stored series calibrate the model.")] = common.DEFAULT_DB,
    model: Annotated[Optional[str], typer.Option(help="Model of the series to predict.")] = None,
    framework: Annotated[Optional[str], typer.Option(help="Framework of the series (if several are stored).")] = None,
    mode: Annotated[Optional[str], typer.Option(help="Mode of the series (if several are stored).")] = None,
    precision: Annotated[Optional[str], typer.Option(help="Precision of the series (if several are stored).")] = None,
    device: Annotated[Optional[str], typer.Option(help="Device of the series (if several are stored).")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Global mini-batch to predict.")] = None,
    validate: Annotated[bool, typer.Option("--validate", help="Back-test on every stored series with 4+ batch sizes (held-out batch, largest batch) and print MdAPE and max per category.")] = False,
    format: Annotated[str, typer.Option(help="text or json.")] = "text",
) -> None:
    """Predict the iteration time at a batch size that was not measured, from a stored series (one device; a first part of the performance model, docs/perfmodel.md)."""
    def body() -> None:
        from dlperf.perfmodel.predict import predict as predict_point, validation_table
        from dlperf.results.store import ResultStore

        if format not in ("text", "json"):
            raise ConfigError(f"--format {format!r}: give text or json")
        check_db(db, must_exist=True)
        with ResultStore(db, read_only=True) as store:
            rows = store.rows()
        if validate:
            print_markdown(validation_table(rows))
            return
        if model is None or batch_size is None:
            raise ConfigError("give --model and --batch-size (or --validate)")
        p = predict_point(rows, batch_size=batch_size, model=model, framework=framework,
                          mode=mode, precision=precision, device=device)
        if format == "json":
            sys.stdout.write(json.dumps(p, indent=1) + "\n")
            return
        lo, hi = p["interval_s"]
        meas = (f"; measured {p['measured_step_time_s'] * 1e3:.3f} ms (not used in the fit)"
                if p["measured_step_time_s"] else "")
        common.out.print(
            f"{p['series']} b={batch_size}: {p['predicted_step_time_s'] * 1e3:.3f} ms per "
            f"iteration ({lo * 1e3:.3f}-{hi * 1e3:.3f} ms, {p['interval_level']:.0%} "
            f"interval), {p['samples_per_s']:.1f} samples/s, {p['bound']}-bound (host "
            f"{p['parts']['host_s'] * 1e3:.3f} ms, device {p['parts']['device_s'] * 1e3:.3f} ms)"
            f"{meas}; calibrated on batch sizes "
            + ", ".join(str(c['batch_size']) for c in p['calibrated_on']), highlight=False)

    guard(body)

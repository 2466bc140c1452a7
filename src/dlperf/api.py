"""The Python API, for notebooks and scripts: measure a point or a sweep, read the results as
a pandas DataFrame (docs/api.md has the worked examples, which a test runs).

The layers it joins, each usable on its own:

* :func:`dlperf.config.make_run_config` validates one point (a :class:`~dlperf.config.RunConfig`,
  the same fields as ``dlperf run``'s flags and a sweep file's keys);
* :func:`dlperf.worker.run_config` measures it in this process and returns the result dict;
  :func:`dlperf.launch.distributed.run_point` in a fresh worker process (or a data-parallel
  launch), as ``dlperf run`` does;
* :func:`dlperf.sweep.execute` runs a list of points into a
  :class:`~dlperf.results.store.ResultStore` (SQLite), resuming where it stopped;
* :func:`to_dataframe` turns results (dicts, a store, or a results file) into one row per
  result with the columns of the store (``step_time_median_s``, ``samples_per_s``, ...).

Models are named as everywhere in dlperf: a zoo name (``resnet50``), or a model from a source
(``hf:gpt2?layers=4``, ``timm:resnet50``, ``file:nets.py:mlp``, an entry-point name; see
docs/zoo.md). pandas is optional: only :func:`to_dataframe` needs it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from dlperf.config import RunConfig, SweepConfig, make_run_config
from dlperf.errors import ConfigError, UnavailableError, with_article
from dlperf.results.schema import RunRecord
from dlperf.results.store import ResultStore, flatten
from dlperf.sweep import SweepOutcome


def config(model: str, **fields: Any) -> RunConfig:
    """One validated point: ``make_run_config(model=model, **fields)``.

    ``fields`` are :class:`~dlperf.config.RunConfig`'s settings by name (``framework``,
    ``mode``, ``device``, ``precision``, ``batch_size``, ``threads``, ``iterations`` as a dict
    of :class:`~dlperf.config.IterationPolicy` fields, ``breakdown``, ...;
    :data:`dlperf.config.SETTINGS`), put on the run config's axes.

    Raises:
        ConfigError: naming each bad field, its value and what is allowed.
    """
    return make_run_config(model=model, **fields)


def run(model: str | RunConfig, *, in_process: bool = False, db: str | Path | None = None,
        **fields: Any) -> RunRecord:
    """Measure one point and return its record (:class:`~dlperf.results.schema.RunRecord`:
    ``identity.status``, ``summary`` with the step time statistics in seconds,
    ``throughput``, ``identity.spec``, ``flags``, ...; ``to_dict()`` is the stored JSON).

    Args:
        model: a model name (with ``fields`` for the rest of the point) or a ready
            :class:`~dlperf.config.RunConfig` (then no ``fields``).
        in_process: measure in this process (:func:`dlperf.worker.run_record`: quick, but the
            framework's state, threads and compile caches stay for the next point); default a
            fresh worker process per point, as ``dlperf run`` does.
        db: also store the result in this results file (created if missing).

    A failed run is a record with ``identity.status`` other than ``ok`` and the reason in
    ``identity.error``; it does not raise.

    Raises:
        ConfigError: a bad field or model name (before anything runs).
    """
    if isinstance(model, RunConfig):
        if fields:
            raise ConfigError(f"run(RunConfig, ...) takes no other fields (got "
                              f"{sorted(fields)}); set them in the RunConfig")
        cfg = model
    else:
        cfg = config(model, **fields)
    if in_process:
        from dlperf.worker import run_record

        result = run_record(cfg)
    else:
        from dlperf.config.limits import check_points_here
        from dlperf.launch.distributed import run_point
        from dlperf.placement import check_here

        check_points_here([cfg])  # its processes and CPU binding can be made on this machine
        check_here([(cfg.hardware.cpu_bind, cfg.parallel.nproc)])
        result = run_point(cfg)
    if db is not None:
        with ResultStore(db) as store:
            store.add(result)
    return result


def sweep(grid: Iterable[Mapping[str, Any]], *, defaults: Mapping[str, Any] | None = None,
          name: str = "api", db: str | Path | None = None, in_process: bool = False,
          resume: bool = True, retry_failed: bool = False, quiet: bool = False,
          console: Any = None) -> SweepOutcome:
    """Run a sweep: the points of ``grid`` (entries of a sweep file: a list value is an axis,
    crossed with the entry's other lists; ``defaults`` apply to every entry), one line per
    result printed as they finish.

    Args:
        grid: sweep entries, e.g. ``[{"model": ["resnet50_tiny", "hf:gpt2?layers=2"],
            "batch_size": [8, 16]}]``.
        defaults: fields for every entry (``device``, ``iterations``, ...).
        name: the sweep name stored with each result.
        db: the results file (points already in it are skipped with ``resume``); default a
            temporary file, dropped afterwards (the results are in the returned outcome).
        in_process: measure each point in this process (see :func:`run`).
        resume, retry_failed: as ``dlperf sweep``'s.
        quiet: print nothing.
        console: the ``rich.console.Console`` the lines go to (the CLI passes its stderr
            console, :data:`dlperf.cli.common.err`, which off a terminal keeps lines whole);
            default: a new one on stderr (``quiet`` applies).

    Returns:
        :class:`~dlperf.sweep.SweepOutcome`: ``ran``, ``failed``, ``skipped`` and the new
        ``results`` (records, in order).

    Raises:
        ConfigError: a bad entry or field (naming ``grid[i]`` and the field), or data that do
            not fit a model, before anything runs.
    """
    from pydantic import ValidationError
    from rich.console import Console

    from dlperf.sweep import execute, preflight

    try:
        sc = SweepConfig(name=name, defaults=dict(defaults or {}),
                         grid=[dict(e) for e in grid])
    except ValidationError as e:
        raise ConfigError(f"sweep {name!r}: {e}") from None
    points = sc.expand()
    if not in_process:
        from dlperf.config.limits import check_points_here
        from dlperf.placement import check_here

        check_points_here(points)  # their processes and CPU bindings can be made here
        check_here((p.hardware.cpu_bind, p.parallel.nproc) for p in points)
    missing = preflight(points, allow_missing=True)
    runner: Callable[[RunConfig], RunRecord] | None = None
    if in_process:
        from dlperf.worker import run_record

        runner = run_record
    with ExitStack() as stack:
        if db is None:
            db = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "results.db"
        store = stack.enter_context(ResultStore(db))
        return execute(points, store, sweep=name, resume=resume, retry_failed=retry_failed,
                       runner=runner,
                       console=console or Console(stderr=True, quiet=quiet),
                       show_progress=False, missing_data=missing)


def to_dataframe(source: Any, *, latest: bool = True, result_json: bool = False,
                 **filters: Any) -> Any:
    """Results as a ``pandas.DataFrame``, one row per result, the columns of the results
    store (``model``, ``framework``, ``batch_size``, ``status``, ``step_time_median_s``,
    ``samples_per_s``, ``tokens_per_s``, ``mfu``, ``params``, ...; units in the names).

    Args:
        source: a results file path, a :class:`~dlperf.results.store.ResultStore`, a record
            (:func:`run`'s; or its flat dict), a list of them, or a
            :class:`~dlperf.sweep.SweepOutcome`.
        latest: from a store, only the newest result per point (as ``dlperf results``).
        result_json: keep the ``result_json`` column (the whole result as JSON: breakdown,
            op classes, flags, environment); dropped by default.
        filters: column=value (or =[values]) equality filters, e.g. ``model="resnet50"``.

    Raises:
        UnavailableError: pandas is not installed.
        ConfigError: a results file that does not exist or is not one, an unknown filter
            column, or a source of another type.
    """
    try:
        import pandas as pd
    except ImportError:
        from dlperf.install import install_hint

        raise UnavailableError("to_dataframe needs pandas, which is not installed: "
                               f"{install_hint('notebook')} (or pip install pandas; and "
                               "pyarrow for DataFrame.to_parquet)") from None
    rows = _rows(source, latest, filters)
    df = pd.DataFrame(rows)
    if not result_json and "result_json" in df.columns:
        df = df.drop(columns=["result_json"])
    return df


def _rows(source: Any, latest: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(source, ResultStore):
        return source.rows(latest=latest, **filters)
    if isinstance(source, (str, Path)):
        with ResultStore(source, read_only=True) as store:
            return store.rows(latest=latest, **filters)
    if isinstance(source, SweepOutcome):
        source = source.results
    if isinstance(source, (Mapping, RunRecord)):
        source = [source]
    if not isinstance(source, (list, tuple)) or not all(isinstance(r, (Mapping, RunRecord))
                                                        for r in source):
        raise ConfigError("to_dataframe takes a results file, a ResultStore, a record, a "
                          "list of them or a SweepOutcome; got "
                          f"{with_article(type(source).__name__)}")
    rows = [flatten(r if isinstance(r, RunRecord) else RunRecord.from_dict(dict(r)))
            for r in source]
    for k, v in filters.items():
        if rows and k not in rows[0]:
            raise ConfigError(f"unknown result column {k!r}; columns: {', '.join(rows[0])}")
        vals = v if isinstance(v, (list, tuple)) else [v]
        rows = [r for r in rows if r[k] in vals]
    return rows


__all__ = ["config", "run", "sweep", "to_dataframe"]

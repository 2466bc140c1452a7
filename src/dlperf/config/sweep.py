"""Grids of benchmark points: :class:`SweepConfig` (a sweep YAML file) and :func:`expand_grid`,
the one cross product of dlperf (``dlperf run`` builds a one-entry grid from its flags).

A sweep file (``dlperf sweep FILE.yaml``)::

    name: dlbench-h200
    defaults:                 # any RunConfig field
      device: cuda
      iterations: {min_iters: 30, min_time_s: 2.0}
      repeats: 3              # each point 3 times, each run a fresh process (default 1)
    grid:                     # each entry: lists are crossed (Cartesian product)
      - model: [fcn5, fcn8]
        batch_size: [16, 64, 256]
        precision: [fp32, bf16]
      - suite: quick          # expands to the suite's (model, data) entries
        batch_size: 16
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlperf.config.axes import SETTINGS
from dlperf.config.limits import MAX_REPEATS, MAX_RUNS, over
from dlperf.config.messages import format_validation, setting_of
from dlperf.config.run import RunConfig, resolve_device
from dlperf.errors import ConfigError, unknown_choice
from dlperf.yamlsafe import load_yaml_file


def check_repeats(value: Any, where: str = "--repeats") -> int:
    """``value`` as a number of runs per point (an integer >= 1).

    Raises:
        ConfigError: anything else (0, a negative number, a list, a bool, text, more than
            :data:`~dlperf.config.limits.MAX_REPEATS`), naming ``where`` (``--repeats``, or
            ``grid[i].repeats:`` in a sweep file) and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where} {value!r} is not a valid number of runs per point: give an "
                          "integer >= 1 (each run is a fresh process; 3 or more give the "
                          "olympic mean)")
    msg = over(value, MAX_REPEATS, "runs per point")
    if msg:
        raise ConfigError(f"{where} {msg}; 3 to 10 runs give a point's run-to-run spread")
    return value


def with_repeats(points: Sequence[RunConfig], repeats: int | Sequence[int]) -> list[RunConfig]:
    """Each point as ``repeats`` runs (``repeat`` 0 .. N-1), in rounds: repeat 0 of every
    point, then repeat 1 of every point, and so on (a point with fewer repeats drops out of
    the later rounds).

    Rounds rather than a point's repeats back to back: slow drift over a sweep (clocks and
    temperature, other tenants of the machine, caches) then spreads over every point instead
    of landing on one point's runs, so the spread of a point's runs covers the whole sweep; a
    sweep stopped early has every point at least once. Each run is a fresh worker process
    either way (:mod:`dlperf.sweep`), which is what makes the runs independent.

    Args:
        points: the points (their own ``repeat`` is replaced).
        repeats: runs per point, one number for all or one per point.

    Raises:
        ConfigError: a count below 1 (:func:`check_repeats`); ValueError if a list of counts
            does not match ``points`` in length.
    """
    counts = [repeats] * len(points) if isinstance(repeats, int) else list(repeats)
    if len(counts) != len(points):
        raise ValueError(f"{len(counts)} repeat counts for {len(points)} points")
    for n in counts:
        check_repeats(n)
    return [p if p.measure.repeat == r else p.with_(repeat=r)
            for r in range(max(counts, default=0))
            for p, n in zip(points, counts) if r < n]


def crossed_compile_mode(mode: Any, compile_mode: Any, modes_listed: Any) -> bool:
    """True for a combination that a cross product of ``--mode eager,graph`` with
    ``--compile-mode default,reduce-overhead`` makes but that means nothing: a compile mode
    other than the default with a mode other than ``graph``, when ``graph`` is among the modes
    listed. Such combinations are dropped (the eager point is kept once, with the default);
    without ``graph`` in the list the combination is kept, and refused with its reason."""
    listed = modes_listed if isinstance(modes_listed, (list, tuple)) else [modes_listed]
    return (compile_mode not in (None, "default") and mode != "graph" and "graph" in listed)


#: The keys of a sweep file's defaults and grid entries: a run config's settings by name
#: (:data:`~dlperf.config.axes.SETTINGS`; ``repeat`` is set by dlperf; ``ddp``, PyTorch DDP's
#: options as a mapping, is read into ``options``), ``suite`` and ``repeats``.
GRID_KEYS = frozenset((set(SETTINGS) - {"repeat"}) | {"suite", "repeats", "ddp"})


def _at(where: str, field: str) -> str:
    """``grid[2].model`` (a sweep file's entry), or ``model`` (``dlperf run``'s one entry)."""
    return f"{where}.{field}" if where else field


def _check_keys(where: str, d: Mapping[str, Any]) -> None:
    for k in d:
        if k == "repeat":
            raise ConfigError(f"{where}: 'repeat' is set by dlperf for each run; give "
                              "'repeats: N' for N runs of each point")
        if k not in GRID_KEYS:
            raise ConfigError(f"{where}: {unknown_choice('key', k, sorted(GRID_KEYS))}") from None
        if k == "repeats":
            check_repeats(d[k], f"{where}.repeats:")


def _axes(where: str, merged: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Each field's values: a list is an axis, anything else (and ``iterations``) one value."""
    axes: dict[str, list[Any]] = {}
    for k, v in merged.items():
        if k == "iterations" or not isinstance(v, list):
            axes[k] = [v]
        elif not v:
            raise ConfigError(f"{_at(where, k)}: empty list; give at least one value")
        else:
            axes[k] = v
    if "device" in axes:
        axes["device"] = [resolve_device(d) if d == "auto" else d for d in axes["device"]]
    return axes


def _error_prefix(e: ValidationError, where: str, entry: Mapping[str, Any],
                  defaults: Mapping[str, Any]) -> str:
    """Where a point's validation error is: ``defaults.`` when every field it names came from
    ``defaults`` (the entry does not set it), else ``grid[i].`` (``where``; nothing for
    ``dlperf run``'s one entry)."""
    fields = {setting_of(err) for err in e.errors()} - {None}
    if where and fields and all(f in defaults and f not in entry for f in fields):
        return "defaults."
    return f"{where}." if where else ""


def _model_pairs(where: str, suite: Any, axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The (model, data) pairs of a suite entry (data: the suite's, or each value of the
    entry's ``data`` axis, which is taken out of ``axes``); ``[{}]`` for a model entry."""
    from dlperf.zoo import get_suite

    if suite is None:
        if "model" not in axes:
            raise ConfigError(f"{where}: needs 'model' (or 'suite'); e.g. model: [resnet50]")
        return [{}]
    try:
        entries = get_suite(suite)
    except ConfigError as e:
        raise ConfigError(f"{_at(where, 'suite')}: {e}" if where else str(e)) from None
    axes.pop("model", None)
    data_override = axes.pop("data", None)
    if data_override is None:
        return [{"model": s.model, "data": s.data} for s in entries]
    return [{"model": s.model, "data": d} for s in entries for d in data_override]


def expand_grid(defaults: Mapping[str, Any], grid: Sequence[Mapping[str, Any]], *,
                cli: bool = False) -> list[RunConfig]:
    """All points of a grid, in order, duplicates removed (first one kept), with repeats.

    Each entry is merged over ``defaults``; its list values are crossed (the first key is the
    outermost loop), a ``suite`` gives (model, data) pairs outside them. ``device: auto`` is
    resolved here (cuda if a GPU is usable, else cpu). A compile mode crossed with a mode it
    means nothing in is dropped (:func:`crossed_compile_mode`). ``repeats: N`` (one integer >=
    1, not crossed) runs each point of that entry N times, as :func:`with_repeats` orders them:
    repeat 0 of every point, then repeat 1, ...; a point listed by two entries runs the larger
    number of times.

    Args:
        defaults: fields for every entry.
        grid: the entries.
        cli: errors for ``dlperf run`` (its one entry is not named ``grid[0]``; fields are
            named with their flags) instead of for a sweep file.

    Raises:
        ConfigError: naming the grid entry (0-based) and field that is wrong.
    """
    _check_keys("defaults", defaults)
    for i, e in enumerate(grid):
        _check_keys(f"grid[{i}]", e)
    _check_size(defaults, grid, cli)
    points: list[RunConfig] = []
    repeats: dict[str, int] = {}  # run key (repeat 0) -> runs of that point
    for i, entry in enumerate(grid):
        where = "" if cli else f"grid[{i}]"
        entry = dict(entry)
        suite = entry.pop("suite", None)
        if suite is not None and "model" in entry:
            raise ConfigError(f"{where}: give 'model' or 'suite', not both (a suite names "
                              "its models); split the entry in two for both")
        if suite is not None and "model" in defaults:
            raise ConfigError(f"{where} runs suite {suite!r}, whose models would replace "
                              f"defaults.model ({defaults['model']!r}); move 'model' "
                              "from defaults into the grid entries without a suite")
        merged = {**defaults, **entry}
        n_rep = merged.pop("repeats", 1)
        axes = _axes(where, merged)
        pairs = _model_pairs(where, suite, axes)
        keys = list(axes)
        for pair in pairs:
            for combo in itertools.product(*(axes[k] for k in keys)):
                fields = {**dict(zip(keys, combo)), **pair}
                if crossed_compile_mode(fields.get("mode"), fields.get("compile_mode"),
                                        axes.get("mode", [])):
                    continue  # eager x reduce-overhead from crossing two lists
                try:
                    cfg = RunConfig(**fields)
                except ValidationError as e:
                    raise ConfigError(format_validation(
                        e, RunConfig, where=_error_prefix(e, where, entry, defaults),
                        flags=cli)) from None
                key = cfg.run_key()
                if key not in repeats:
                    points.append(cfg)
                repeats[key] = max(repeats.get(key, 0), n_rep)
    return with_repeats(points, [repeats[p.run_key()] for p in points])


def _check_size(defaults: Mapping[str, Any], grid: Sequence[Mapping[str, Any]], cli: bool
                ) -> None:
    """The runs the grid would make (each entry's list lengths multiplied, times its repeats;
    a suite counted by its models) are at most :data:`~dlperf.config.limits.MAX_RUNS`, counted
    before one point is built or validated.

    Raises:
        ConfigError: the count and the limit, and which entry is largest.
    """
    from dlperf.zoo import get_suite

    total, sizes = 0, []
    for entry in grid:
        merged = {**defaults, **entry}
        n = 1
        for k, v in merged.items():
            if k not in ("iterations", "suite", "repeats") and isinstance(v, list):
                n *= max(1, len(v))
        suite = merged.get("suite")
        if isinstance(suite, str):
            try:
                n *= max(1, len(get_suite(suite)))
            except (ConfigError, KeyError):
                pass  # an unknown suite is refused with its own message
        reps = merged.get("repeats", 1)
        n *= reps if isinstance(reps, int) and not isinstance(reps, bool) and reps > 0 else 1
        total += n
        sizes.append(n)
    msg = over(total, MAX_RUNS, "runs (points x repeats)")
    if msg:
        where = "" if cli else (f"; the largest entry is grid[{sizes.index(max(sizes))}] with "
                                f"{max(sizes):,}")
        raise ConfigError(f"this {'command' if cli else 'sweep'} would make {total:,} runs: "
                          f"{msg}{where}; split it into several sweeps, or take fewer values "
                          "per list")


class SweepConfig(BaseModel):
    """A sweep file: a name, defaults for every point and a list of grid entries."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(..., min_length=1, max_length=200)
    defaults: dict[str, Any] = Field(default_factory=dict)
    grid: list[dict[str, Any]] = Field(..., min_length=1)

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str) -> str:
        """A name without control characters: it is stored with every result and printed
        (``results -f csv`` on a terminal ran an escape sequence stored in it)."""
        import unicodedata

        bad = sorted({f"U+{ord(c):04X}" for c in v if unicodedata.category(c) == "Cc"})
        if bad:
            raise ValueError(f"has control characters ({', '.join(bad[:5])}); give a name of "
                             "letters, digits and punctuation, e.g. dlbench-h200")
        return v

    def expand(self) -> list[RunConfig]:
        """All points of the grid, in file order, duplicates removed (:func:`expand_grid`).

        Raises:
            ConfigError: naming the grid entry (0-based) and field that is wrong.
        """
        return expand_grid(self.defaults, self.grid)


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and validate a sweep YAML file (every point is validated now, before anything runs).

    Raises:
        ConfigError: the file is missing, is not YAML, or a field is invalid (the message names
            the file and the field).
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"sweep file {str(p)!r} is a folder; give the path of a YAML file")
    if not p.exists():
        raise ConfigError(f"sweep file {str(p)!r} does not exist; give the path of a YAML file")
    if not p.is_file():
        raise ConfigError(f"sweep file {str(p)!r} is not a regular file (a device, pipe or "
                          "socket); give the path of a YAML file")
    # yamlsafe: duplicate keys, alias bombs, deep nesting and oversized files are refused with
    # FILE:LINE:COL (a YamlError is a ConfigError), never expanded into the message
    raw = load_yaml_file(p, expect_mapping=True)
    if not isinstance(raw, dict):
        raise ConfigError(f"sweep file {str(p)!r} must be a mapping with 'name' and 'grid' keys")
    try:
        cfg = SweepConfig(**raw)
    except ValidationError as e:
        raise ConfigError(f"in {p}: " + format_validation(e, SweepConfig)) from None
    try:
        cfg.expand()
    except ConfigError as e:
        raise ConfigError(f"in {p}: {e}") from None
    return cfg

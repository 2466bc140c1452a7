"""On-disk caches of the performance model, keyed by what they were computed from.

A cache file's name holds a hash of :data:`~dlperf.perfmodel.api.MODEL_VERSION`, of the
``dlperf`` package's source, of the numpy and scipy versions and of the content and resolved
path of every results file loaded (:func:`content_key`), so any change to the code or the data
makes a new file and nothing computed from other inputs is ever read back. Two caches live under ``$DLPERF_CACHE_DIR``
(default ``~/.cache/dlperf``, :func:`dlperf.perfmodel.records.cache_root`):

* the back-test residuals behind prediction intervals (:mod:`dlperf.perfmodel.api`);
* the roofline group fits (:func:`~dlperf.perfmodel.onedevice.fit_group`: ``e_F``, ``e_Y``,
  ``t_k`` and the series' host times of one (framework, mode, precision, device) group without
  one model), here: each is a least-squares fit over every series of its group (0.3-0.6 s on
  the committed H200 files on a 2-core VM) and a prediction needs two to four of them, which
  made a command-line ``dlperf predict`` take 3.3 s where 2.1 s is left with the fits read
  back (1.1 s of it imports).

A damaged or foreign file, or an entry of the wrong shape or types (a number that is not finite
and positive where the model divides by it, a bool that is not a JSON bool), is an empty cache
or a dropped entry: recomputed, never misread. A cache folder that cannot be written means no
cache and one warning naming it, not an error.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dlperf.jsoncache import read_json, write_json
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.intervals import KeyedResidual
from dlperf.perfmodel.records import Records, cache_root

#: ``(group, without_model, device_name, kernels)``: the key of ``Calibration._eff``.
EffKey = tuple[tuple[str, str, str, str], "str | None", "str | None", bool]


def content_key(recs: Records, version: str) -> str:
    """A hex digest (20 characters) of ``version``, the source of the whole ``dlperf`` package
    (the loader, the store and the zoo's specs feed the fits too), the numpy and scipy versions
    (the fits' numerics) and every results file of ``recs`` (content and resolved path: cached
    rows name their points by it). A fit made under a runtime patch of the model (an ablation)
    is not covered: such a run must use a cache folder of its own
    (``benchmarks/perfmodel_validate.py`` does). Computed once per process for the same files
    (path, size and modification time): a prediction asks for it several times, and hashing
    the committed H200 files takes 50 ms."""
    stats = tuple((s, os.stat(s).st_mtime_ns, os.stat(s).st_size) for s in recs.sources)
    return _content_key(version, stats)


@functools.lru_cache(maxsize=64)
def _content_key(version: str, stats: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256(version.encode())
    h.update(_code_key().encode())
    for s, _, _ in stats:
        h.update(Path(s).read_bytes())
        h.update(os.path.realpath(s).encode())
    return h.hexdigest()[:20]


@functools.lru_cache(maxsize=1)
def _code_key() -> str:
    """The digest of the numpy and scipy versions and the ``dlperf`` package's source."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    h = hashlib.sha256()
    for dist in ("numpy", "scipy"):
        try:
            h.update(f"{dist}={dist_version(dist)}".encode())
        except PackageNotFoundError:
            h.update(f"{dist}=?".encode())
    for f in sorted(Path(__file__).parents[1].rglob("*.py")):
        h.update(str(f.relative_to(Path(__file__).parents[1])).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _write_atomic(f: Path, payload: Any) -> None:
    """Write ``payload`` to the cache file ``f`` (:func:`dlperf.jsoncache.write_json`: an
    unpredictable temporary name and a rename, owner-only, with a digest; a folder that cannot
    be written is skipped with one warning naming it, and every later process then recomputes
    what the cache would have held)."""
    write_json(f, payload)


#: The largest |log(predicted / measured)| a cached residual may hold (e^50: no prediction is
#: that far off; 1e308 made predict overflow).
MAX_LOG_RATIO = 50.0
#: The largest number a cached fit may hold (a larger one overflowed the model's arithmetic).
MAX_FIT_VALUE = 1e15


def _finite(x: Any, lo: float = 0.0, strict: bool = True) -> float:
    """``x`` as a float when it is a real number (not a bool), finite, at most
    :data:`MAX_FIT_VALUE` and above ``lo`` (at or above it if not ``strict``); else
    ``ValueError``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) \
            or x > MAX_FIT_VALUE or (x <= lo if strict else x < lo):
        raise ValueError(f"not a finite number {'>' if strict else '>='} {lo}: {x!r}")
    return float(x)


def _strs(x: Any, n: int | None = None) -> tuple[str, ...]:
    """``x`` as a tuple of strings when it is a list of strings (of length ``n``)."""
    if not isinstance(x, list) or not all(isinstance(v, str) for v in x) \
            or (n is not None and len(x) != n):
        raise ValueError(f"not a list of {n or 'any number of'} strings: {x!r}")
    return tuple(x)


def _bool(x: Any) -> bool:
    if not isinstance(x, bool):
        raise ValueError(f"not a bool: {x!r}")
    return x


def residuals_file(recs: Records, version: str) -> Path:
    """The back-test residual cache file of ``recs`` under model version ``version``."""
    return cache_root() / f"perfmodel-residuals-v{version}-{content_key(recs, version)}.json"


def read_residuals(f: Path) -> dict[str, list[KeyedResidual]]:
    """The on-disk residual cache: category -> ``[(log ratio, bound, point), ...]``; entries
    not of the form ``[[float, bound, point], ...]`` (an older format, a damaged file) are
    dropped, so they are recomputed, never misread."""
    try:
        raw = read_json(f) or {}  # trusted only if ours, intact (dlperf.jsoncache)
    except (OSError, ValueError):
        return {}
    out: dict[str, list[KeyedResidual]] = {}
    for cat, v in (raw.items() if isinstance(raw, dict) else ()):
        if isinstance(v, list) and all(
                isinstance(x, list) and len(x) == 3 and isinstance(x[0], (int, float))
                and not isinstance(x[0], bool) and abs(x[0]) <= MAX_LOG_RATIO
                and x[1] in (None, "host", "device") and (x[2] is None or isinstance(x[2], str))
                for x in v):
            out[cat] = [(float(x[0]), x[1], x[2]) for x in v]
    return out


def fits_file(recs: Records, version: str) -> Path:
    """The group-fit cache file of ``recs`` under model version ``version``."""
    return cache_root() / f"perfmodel-fits-v{version}-{content_key(recs, version)}.json"


def _eff_of(d: Any) -> rl.Efficiency:
    """An :class:`~dlperf.perfmodel.roofline.Efficiency` from its JSON form, every field of its
    type (numbers finite and positive where the model divides by them); ``ValueError``,
    ``TypeError`` or ``KeyError`` on anything else."""
    if not isinstance(d, dict) or not isinstance(d["hosts"], list):
        raise ValueError("an efficiency is an object with a list of hosts")
    hosts = []
    for h in d["hosts"]:
        if not isinstance(h, dict) or not isinstance(h["n_batch_sizes"], int) \
                or isinstance(h["n_batch_sizes"], bool) or h["n_batch_sizes"] < 1:
            raise ValueError(f"not a series host: {h!r}")
        m, data, layout = _strs([h["model"], h["data"], h["layout"]], 3)
        hosts.append(rl.SeriesHost(m, data, layout, _finite(h["host_s"]), _bool(h["host_bound"]),
                                   h["n_batch_sizes"], _bool(h["measured"])))
    g = _strs(d["group"], 4)
    return rl.Efficiency((g[0], g[1], g[2], g[3]), _finite(d["e_flops"]), _finite(d["e_bytes"]),
                         _strs(d["models"]), _strs(d["result_ids"]),
                         _finite(d["rms_log"], strict=False), tuple(hosts),
                         _finite(d["kernel_s"], strict=False), _strs(d["kernel_models"]))


def read_fits(f: Path) -> dict[EffKey, rl.Efficiency | None]:
    """The group fits stored in ``f``; an entry that does not read back as a key and an
    :class:`~dlperf.perfmodel.roofline.Efficiency` (or null: no point to fit on) is dropped."""
    try:
        raw = read_json(f) or []  # trusted only if ours, intact (dlperf.jsoncache)
    except (OSError, ValueError):
        return {}
    out: dict[EffKey, rl.Efficiency | None] = {}
    for item in raw if isinstance(raw, list) else ():
        try:
            (g, without, dev, kernels), val = item
            g4 = _strs(g, 4)
            if not all(x is None or isinstance(x, str) for x in (without, dev)):
                continue
            eff = None if val is None else _eff_of(val)
            if eff is not None and eff.group != g4:
                continue
            out[((g4[0], g4[1], g4[2], g4[3]), without, dev, _bool(kernels))] = eff
        except (TypeError, KeyError, ValueError):
            continue
    return out


def write_fits(f: Path, fits: dict[EffKey, rl.Efficiency | None]) -> None:
    """Store ``fits`` in ``f`` (:func:`_write_atomic`)."""
    rows = [[[list(k[0]), k[1], k[2], k[3]], None if v is None else asdict(v)]
            for k, v in fits.items()]
    _write_atomic(f, rows)


def write_residuals(f: Path, cache: dict[str, list[KeyedResidual]]) -> None:
    """Store the residual cache (category -> residuals) in ``f`` (:func:`_write_atomic`)."""
    _write_atomic(f, cache)

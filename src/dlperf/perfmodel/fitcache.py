"""On-disk caches of the performance model, keyed by what they were computed from.

A cache file's name holds a hash of :data:`~dlperf.perfmodel.api.MODEL_VERSION`, of this
package's source and of the content and resolved path of every results file loaded
(:func:`content_key`), so any change to the model or the data makes a new file and nothing
computed from other inputs is ever read back. Two caches live under ``$DLPERF_CACHE_DIR``
(default ``~/.cache/dlperf``, :func:`dlperf.perfmodel.records.cache_root`):

* the back-test residuals behind prediction intervals (:mod:`dlperf.perfmodel.api`);
* the roofline group fits (:func:`~dlperf.perfmodel.onedevice.fit_group`: ``e_F``, ``e_Y``,
  ``t_k`` and the series' host times of one (framework, mode, precision, device) group without
  one model), here: each is a least-squares fit over every series of its group (0.3-0.6 s on
  the committed H200 files on a 2-core VM) and a prediction needs two to four of them, which
  made a command-line ``dlperf predict`` take 3 s where 1 s is left with the fits read back.

A damaged or foreign file is an empty cache (the fits are recomputed, never misread); a
read-only cache folder means no cache, not an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.intervals import KeyedResidual
from dlperf.perfmodel.records import Records, cache_root

#: ``(group, without_model, device_name, kernels)``: the key of ``Calibration._eff``.
EffKey = tuple[tuple[str, str, str, str], "str | None", "str | None", bool]


def content_key(recs: Records, version: str) -> str:
    """A hex digest (20 characters) of ``version``, this package's ``*.py`` files and every
    results file of ``recs`` (content and resolved path: cached rows name their points by it)."""
    h = hashlib.sha256(version.encode())
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.read_bytes())
    for s in recs.sources:
        h.update(Path(s).read_bytes())
        h.update(os.path.realpath(s).encode())
    return h.hexdigest()[:20]


def residuals_file(recs: Records, version: str) -> Path:
    """The back-test residual cache file of ``recs`` under model version ``version``."""
    return cache_root() / f"perfmodel-residuals-v{version}-{content_key(recs, version)}.json"


def read_residuals(f: Path) -> dict[str, list[KeyedResidual]]:
    """The on-disk residual cache: category -> ``[(log ratio, bound, point), ...]``; entries
    not of the form ``[[float, bound, point], ...]`` (an older format, a damaged file) are
    dropped, so they are recomputed, never misread."""
    try:
        raw = json.loads(f.read_text()) if f.exists() else {}
    except (OSError, ValueError):
        return {}
    out: dict[str, list[KeyedResidual]] = {}
    for cat, v in (raw.items() if isinstance(raw, dict) else ()):
        if isinstance(v, list) and all(
                isinstance(x, list) and len(x) == 3 and isinstance(x[0], (int, float))
                and x[1] in (None, "host", "device") and (x[2] is None or isinstance(x[2], str))
                for x in v):
            out[cat] = [(float(x[0]), x[1], x[2]) for x in v]
    return out


def fits_file(recs: Records, version: str) -> Path:
    """The group-fit cache file of ``recs`` under model version ``version``."""
    return cache_root() / f"perfmodel-fits-v{version}-{content_key(recs, version)}.json"


def _eff_of(d: Any) -> rl.Efficiency:
    """An :class:`~dlperf.perfmodel.roofline.Efficiency` from its JSON form (lists back to
    tuples); raises ``TypeError``/``KeyError``/``ValueError`` on anything else."""
    hosts = tuple(rl.SeriesHost(str(h["model"]), str(h["data"]), str(h["layout"]),
                                float(h["host_s"]), bool(h["host_bound"]),
                                int(h["n_batch_sizes"]), bool(h["measured"]))
                  for h in d["hosts"])
    g = tuple(str(x) for x in d["group"])
    if len(g) != 4:
        raise ValueError("a group has 4 parts")
    return rl.Efficiency((g[0], g[1], g[2], g[3]), float(d["e_flops"]), float(d["e_bytes"]),
                         tuple(map(str, d["models"])), tuple(map(str, d["result_ids"])),
                         float(d["rms_log"]), hosts, float(d["kernel_s"]),
                         tuple(map(str, d["kernel_models"])))


def read_fits(f: Path) -> dict[EffKey, rl.Efficiency | None]:
    """The group fits stored in ``f``; an entry that does not read back as a key and an
    :class:`~dlperf.perfmodel.roofline.Efficiency` (or null: no point to fit on) is dropped."""
    try:
        raw = json.loads(f.read_text()) if f.exists() else []
    except (OSError, ValueError):
        return {}
    out: dict[EffKey, rl.Efficiency | None] = {}
    for item in raw if isinstance(raw, list) else ():
        try:
            (g, without, dev, kernels), val = item
            key = (tuple(str(x) for x in g), without, dev, bool(kernels))
            if len(key[0]) != 4 or not all(x is None or isinstance(x, str)
                                           for x in (without, dev)):
                continue
            out[key] = None if val is None else _eff_of(val)  # type: ignore[index]
        except (TypeError, KeyError, ValueError):
            continue
    return out


def write_fits(f: Path, fits: dict[EffKey, rl.Efficiency | None]) -> None:
    """Store ``fits`` in ``f`` (replacing it atomically); an unwritable folder is skipped."""
    from dataclasses import asdict

    rows = [[[list(k[0]), k[1], k[2], k[3]], None if v is None else asdict(v)]
            for k, v in fits.items()]
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, f)
    except OSError:
        pass

"""Test doubles shared by several test files (imported as ``from fakes import FakeClock``:
pytest puts this folder on ``sys.path``).

``FakeClock`` is the fake framework's clock (:mod:`dlperf.frameworks.fake.clock`): one clock
for the unit tests that script durations and for the fake adapter's runs. It only moves when a
test (or a fake step or device) sets ``t`` or calls ``advance``; seconds.

``make_db`` writes a small results database: fcn5_tiny at batch 8 and 16, one tag each.
"""

from __future__ import annotations

from pathlib import Path

from dlperf.frameworks.fake.clock import FakeClock

__all__ = ["FakeClock", "make_db"]


def make_db(path: Path, tags=("v1", "v2"), batches=(8, 16), scale: float = 1.0) -> Path:
    """Write ``path``: ok results of fcn5_tiny (torch, cpu, fp32) at the ``batches`` (8 and
    16), six measured steps of 10-11 ms each (times ``scale``), tagged ``tags`` (one per batch;
    None or "" for no tag). Returns ``path``."""
    from dlperf.config import make_run_config
    from dlperf.results.history import TAG_KEY
    from dlperf.results.schema import new_record
    from dlperf.results.store import ResultStore
    from dlperf.stats import summarize, throughput

    times = [t * scale for t in (0.01, 0.011, 0.0105, 0.0102, 0.0108, 0.0103)]
    with ResultStore(path) as s:
        for b, tag in zip(batches, tags, strict=True):
            r = new_record(make_run_config(model="fcn5_tiny", batch_size=b), "ok").to_dict()
            r.update(summary=summarize(times).to_dict(), throughput=throughput(6, b, sum(times)),
                     samples={"first": [0.5], "warmup": [0.02], "measure": times},
                     n_measured=6, steady_state=True)
            if tag:
                r[TAG_KEY] = tag
            s.add(r)
    return path

"""``dlperf list models`` shows each model's training FLOPs, and a dash where they are unknown."""

from __future__ import annotations

from dlperf.cli.list_ import _gflop


def test_gflop_known_and_unknown():
    """Known FLOPs print as GFLOP (4 significant digits); None (a spec without forward FLOPs)
    prints ``-`` instead of failing on ``None / 1e9``."""
    assert _gflop(12_345_678_901) == "12.35"
    assert _gflop(None) == "-"

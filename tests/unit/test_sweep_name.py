"""A sweep's name is stored with every result and printed: control characters in it (a
terminal escape sequence ran when `dlperf results -f csv` printed it) are refused."""

from __future__ import annotations

import pytest

from dlperf.config.sweep import SweepConfig
from dlperf.errors import ConfigError


@pytest.mark.parametrize("name", ["x\x1b]0;PWNED\x07y", "a\nb", "tab\there", "del\x7f",
                                  "n" * 201])
def test_a_sweep_name_with_control_characters_or_too_long_is_refused(name):
    with pytest.raises((ConfigError, ValueError)):
        SweepConfig(name=name, grid=[{"model": "fcn5_tiny", "batch_size": 2}])


@pytest.mark.parametrize("name", ["dlbench-h200", "résumé ünïcode ✓", "a b/c:d"])
def test_a_printable_sweep_name_is_kept(name):
    assert SweepConfig(name=name, grid=[{"model": "fcn5_tiny", "batch_size": 2}]).name == name

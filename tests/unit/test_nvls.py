"""NVLink SHARP (NVLS) is left at NCCL's default unless the user asks (``--nccl-nvls off``),
and what was set is recorded with each result (dlperf.launch.distributed.set_nccl_nvls)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dlperf.env import collect_env
from dlperf.errors import ConfigError
from dlperf.launch.distributed import NVLS_OFF_ENV, set_nccl_nvls


def test_default_sets_nothing_and_off_sets_and_records(monkeypatch):
    for k in NVLS_OFF_ENV:
        monkeypatch.delenv(k, raising=False)
    set_nccl_nvls("default")
    assert not any(k in os.environ for k in NVLS_OFF_ENV)
    assert "NCCL_NVLS_ENABLE" not in (collect_env().get("env") or {})
    set_nccl_nvls("off")
    assert {k: os.environ[k] for k in NVLS_OFF_ENV} == NVLS_OFF_ENV
    assert collect_env()["env"]["NCCL_NVLS_ENABLE"] == "0"  # what each worker records
    with pytest.raises(ConfigError, match="nccl-nvls"):
        set_nccl_nvls("on")


def test_no_launcher_sets_nvls_by_itself():
    """The launchers, the all-reduce benchmark and the SLURM scripts set no NVLS variable of
    their own: only set_nccl_nvls does."""
    from pathlib import Path

    import dlperf

    src = Path(dlperf.__file__).parent
    setters = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                     if any(s in p.read_text() for s in ('"NCCL_NVLS_ENABLE": "0"',
                                                         "export NCCL_NVLS_ENABLE",
                                                         'setdefault("NCCL_NVLS_ENABLE"')))
    assert setters == ["launch/distributed.py"]


def test_the_flag_is_checked():
    r = subprocess.run([sys.executable, "-m", "dlperf", "run", "-m", "fcn5_tiny",
                        "--nccl-nvls", "on", "--db", os.devnull], capture_output=True,
                       text=True, check=False)
    assert r.returncode == 2 and "nccl-nvls" in r.stderr and "off" in r.stderr

"""``dlperf env`` prints no framework start-up log lines and no line twice (the fresh-user
trial: TensorFlow 2.21's oneDNN notice and absl's notice came twice, once per shared library,
whatever TF_CPP_MIN_LOG_LEVEL said)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from dlperf.frameworks.common import filter_native_log, quiet_native_logs

TF_STARTUP = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "I0000 00:00:1796299601.823106   23165 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results.\n"
    "I0000 00:00:1796299629.819245   23216 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.\n"
    "To enable the following instructions: AVX2 AVX512F, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.\n"
    "W0000 00:00:1796299629.9   23216 gpu_device.cc:2344] Cannot dlopen some GPU libraries.\n"
)


def test_the_filter_drops_info_and_warning_lines_and_keeps_errors_once():
    err = "E0000 00:00:1796299630.1   23216 cuda_executor.cc:1] failed call to cuInit\n"
    text = TF_STARTUP + err + TF_STARTUP + err.replace("1796299630.1", "1796299631.5") + \
        "plain output\nplain output\n"
    assert filter_native_log(TF_STARTUP * 2) == ""
    assert filter_native_log(text) == err + "plain output\n"


def test_quiet_native_logs_catches_what_is_written_to_descriptor_2(capfd):
    with quiet_native_logs():
        os.write(2, TF_STARTUP.encode())
        os.write(2, b"E0000 00:00:1.5   1 x.cc:9] a real error\n")
    assert capfd.readouterr().err == "E0000 00:00:1.5   1 x.cc:9] a real error\n"
    os.write(2, b"after\n")  # descriptor 2 is back
    assert capfd.readouterr().err == "after\n"


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                    reason="TensorFlow is not installed: nothing would print its start-up lines")
def test_dlperf_env_prints_no_line_twice_and_no_start_up_log():
    p = subprocess.run([sys.executable, "-m", "dlperf", "env", "--no-threads"],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, "COLUMNS": "300"})
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert len(lines) == len(set(lines)), [ln for ln in lines if lines.count(ln) > 1]
    assert not any("absl::InitializeLog" in ln or "oneDNN custom operations" in ln
                   for ln in lines), p.stderr
    assert any(ln.strip().startswith("tensorflow 2.") for ln in lines), p.stdout  # imported
    assert any(ln.strip().startswith(("frameworks  torch 2.", "torch 2.")) for ln in lines), \
        p.stdout


def test_reading_stored_environments_imports_nothing_that_reads_the_host():
    """``dlperf compare`` and ``report`` compare stored environments
    (:func:`dlperf.env.environment_differences`): psutil, NVML and the placement helpers are
    for :func:`dlperf.env.collect_env` only."""
    code = ("import sys\nfrom dlperf.env import environment_differences\n"
            "print(sorted(m for m in ('psutil', 'dlperf.nvml', 'dlperf.placement') "
            "if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ,
                            "PYTHONPATH": os.pathsep.join(x for x in sys.path if x)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"

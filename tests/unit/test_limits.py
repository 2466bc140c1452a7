"""Every user-sized quantity is checked against a limit before work starts, with the limit in
the message (dlperf.config.limits; issue 40): a batch of 2^63, --repeats 10^9, a 10^6-point
grid, seed 2**70, absurd or negative hf: sizes and hf: options that are not config settings;
and the output of every command on an ASCII-only terminal, and a report of a model whose
``file:`` path is longer than a file name may be."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf.config import expand_grid, make_run_config
from dlperf.config.limits import MAX_BATCH, MAX_RUNS, MAX_SEED
from dlperf.config.sweep import check_repeats
from dlperf.errors import ConfigError
from dlperf.outputs import safe_filename
from dlperf.zoo.sources.hf.spec import MAX_OPTION_INT, apply_options, check_sizes


@pytest.mark.parametrize("field,value,said", [
    ("batch_size", 2**63, f"{MAX_BATCH:,}"), ("batch_size", MAX_BATCH + 1, "samples"),
    ("seed", 2**70, f"{MAX_SEED:,}"), ("seed", -1, "negative"),
    ("grad_accum", 10**9, "micro-batches"), ("threads", 10**6, "threads"),
    ("timeout_s", 1e12, "seconds"), ("loader_workers", 10**5, "loader workers"),
])
def test_a_run_config_over_a_limit_is_refused_naming_it(field, value, said):
    with pytest.raises(ConfigError, match=said):
        make_run_config(**{"model": "fcn5_tiny", "batch_size": 8, field: value})
    make_run_config(model="fcn5_tiny", batch_size=MAX_BATCH, seed=MAX_SEED)  # at the limit


def test_repeats_and_the_grid_are_counted_before_anything_is_built():
    with pytest.raises(ConfigError, match="1,000 runs per point"):
        check_repeats(10**9)
    t0 = time.perf_counter()
    grid = [{"model": "fcn5_tiny", "batch_size": list(range(1, 1001)),
             "seed": list(range(1000))}]
    with pytest.raises(ConfigError, match=f"1,000,000 runs.*{MAX_RUNS:,}"):
        expand_grid({}, grid)
    with pytest.raises(ConfigError, match="runs"):
        expand_grid({}, [{"model": "fcn5_tiny", "batch_size": [1, 2], "repeats": 1000},
                         {"model": "fcn5_tiny", "batch_size": list(range(1, 20)),
                          "repeats": 1000}])
    assert time.perf_counter() - t0 < 2.0  # refused before 10^6 points were validated


class FakeConfig:
    """A stand-in for a transformers config: data attributes and a method."""

    def __init__(self) -> None:
        self.num_hidden_layers, self.hidden_size, self.vocab_size = 12, 768, 50257
        self.max_position_embeddings, self.pad_token_id = 1024, -1

    def to_dict(self) -> dict:
        return dict(vars(self))


@pytest.mark.parametrize("options,said", [
    ({"__class__": "x"}, "not a setting"), ({"to_dict": 1}, "not a setting"),
    ({"_private": 1}, "not a setting"), ({"layers": -1}, "from 0 to"),
    ({"layers": 10**23}, f"{MAX_OPTION_INT:,}"), ({"hidden": 2.5}, "takes int"),
])
def test_hf_options_that_are_not_sane_settings_are_refused(options, said):
    with pytest.raises(ConfigError, match=said):
        apply_options(FakeConfig(), options, "hf:fake")


def test_hf_sizes_are_estimated_and_refused_before_anything_is_built():
    c = FakeConfig()
    apply_options(c, {"pad_token_id": -1}, "hf:fake")  # a negative default allows negatives
    assert 80e6 < check_sizes(c, "hf:fake") < 200e6  # GPT-2 small: 124M
    apply_options(c, {"layers": 5000}, "hf:fake")
    with pytest.raises(ConfigError, match="4,096 layers"):
        check_sizes(c, "hf:fake")
    apply_options(c, {"layers": 100, "hidden": 2_000_000}, "hf:fake")
    with pytest.raises(ConfigError, match="parameters.*limit"):
        check_sizes(c, "hf:fake")


def test_a_long_model_name_makes_a_file_name_that_fits():
    long = "file:/home/u/" + "a_very_long_folder/" * 30 + "m.py:build"
    name = safe_filename(f"step_time_vs_batch_{long}", ".png")
    assert len(name) <= 120 and name.endswith(".png")
    assert name != safe_filename(f"step_time_vs_batch_{long}x", ".png")  # still distinct
    assert safe_filename("fcn5", ".png") == "fcn5.png"


def test_an_ascii_terminal_gets_every_command_without_a_traceback(tmp_path):
    db = Path(__file__).resolve().parents[2] / "benchmarks/results/cpu-dev/dlbench_threads.db"
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "200"}
    for args in (["results", "--db", str(db)], ["results", "--db", str(db), "--compare",
                                                  "frameworks"],
                 ["results", "--db", str(tmp_path / "none.db")], ["list"]):
        r = subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True,
                           text=True, env=env, timeout=120, encoding="ascii",
                           errors="strict")
        assert "Traceback" not in r.stderr and r.returncode in (0, 2), (args, r.stderr[-500:])

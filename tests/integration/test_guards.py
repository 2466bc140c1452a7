"""Guards before and while points run (dlperf.guards, dlperf.heartbeat): a point that cannot
fit in memory is refused with the largest batch that would, ``sweep --dry-run`` says how long
the pending points take, and a worker with no progress is named while the parent waits."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from cli_here import dlperf_here as _here
from dlperf import guards, heartbeat
from dlperf.config import make_run_config
from dlperf.results.schema import RunRecord
from dlperf.zoo import get_spec
from dlperf.zoo.activations import ACTIVATION_BYTES

FAKE = {"DLPERF_FAKE_FRAMEWORK": "1"}


def dlperf(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True,
                          text=True, check=False, timeout=timeout,
                          env={**os.environ, **FAKE, **(env or {})})


def dlperf_here(*args):
    """``dlperf ARGS`` in this process (:func:`cli_here.dlperf_here`) with the fake framework,
    for a dry run (nothing runs)."""
    return _here(*args, env=FAKE)


def test_the_spec_lower_bound_and_the_largest_batch():
    """Weights, gradients and two Adam moments in fp32, plus per sample its token ids and the
    larger of its seq x vocab logits and 0.7 of its activations (bf16 halves both): for
    gpt2_small the activations, for fcn5 (10 classes) too, for a model outside the zoo the
    logits."""
    spec = get_spec("gpt2_small")
    assert spec.optimizer.name in ("adam", "adamw")
    assert guards.static_bytes(spec) == spec.params * 4 * 4
    seq, vocab = spec.input_shape[0], spec.num_classes
    act = ACTIVATION_BYTES["gpt2_small"]
    assert act * 0.7 > seq * vocab * 4  # the activations exceed the logits
    assert guards.per_sample_bytes(spec, "fp32") == seq * 8 + int(0.7 * act)
    assert guards.per_sample_bytes(spec, "bf16") == seq * 8 + int(0.7 * act / 2)
    outside = dataclasses.replace(spec, name="hf:not-in-the-zoo")
    assert guards.per_sample_bytes(outside, "fp32") == seq * 8 + seq * vocab * 4
    assert guards.per_sample_bytes(outside, "bf16") == seq * 8 + seq * vocab * 2
    est = guards.MemoryEstimate(1000.0, 10.0, "spec")
    assert est.at(5) == 1050 and est.largest_batch(1055) == 5 and est.largest_batch(999) == 0


def _rec(batch, peak, **kw):
    d = {"run_key": f"k{batch}", "status": "ok", "model": "fcn5_tiny", "framework": "torch",
         "mode": "eager", "device": "cpu", "precision": "fp32", "batch_size": batch,
         "per_device_batch": batch, "memory": {"peak_rss_bytes": peak}, **kw}
    return RunRecord.from_dict(d)


def test_measured_peaks_at_other_batches_are_extrapolated():
    """Two stored batches: the line through their peaks (never flatter than the spec's
    per-sample bound); one: its peak plus the spec's per-sample growth; other points' records
    are not used."""
    cfg = make_run_config(model="fcn5_tiny", batch_size=1024, device="cpu", threads=1)
    spec = get_spec("fcn5_tiny")
    two = guards.memory_estimate(cfg, spec, [_rec(8, 400e6), _rec(32, 496e6)])
    assert two.per_sample == pytest.approx(4e6) and two.at(1024) == pytest.approx(4464e6)
    assert "batch 8, 32" in two.source
    one = guards.memory_estimate(cfg, spec, [_rec(8, 400e6)])
    assert one.at(8) == pytest.approx(400e6)
    assert one.per_sample == guards.per_sample_bytes(spec, "fp32")
    other = guards.memory_estimate(cfg, spec, [_rec(8, 400e6, framework="jax")])
    assert other.source == "spec"


def test_a_point_that_cannot_fit_is_refused_before_anything_runs(tmp_path):
    """gpt2_small at batch 4096 on the CPU needs far more than any host here (its logits alone
    are 4096 x 1024 x 50257 x 4 bytes): refused, exit 2, nothing stored, the largest batch
    that fits named; --no-memory-check lets the check pass (the point is then a dry-run here)."""
    db = tmp_path / "m.db"
    r = dlperf("run", "-m", "gpt2_small", "-b", "4096", "--device", "cpu", "--threads", "1",
               "--db", str(db))
    assert r.returncode == 2, r.stderr
    assert "would not fit in memory; nothing was run" in r.stderr
    assert "the largest batch that fits is about" in r.stderr and "--no-memory-check" in r.stderr
    assert not db.exists() or db.stat().st_size == 0
    # activations, not only logits: resnet50 at batch 4096 on a CPU (fp32 logits of 4 KB a
    # sample would let it start and take the host down) needs hundreds of GiB
    cfg = make_run_config(model="resnet50", batch_size=4096, device="cpu", threads=1)
    est = guards.memory_estimate(cfg, get_spec("resnet50"))
    assert est.at(4096) > 200 * 2**30 and 50 < est.largest_batch(24 * 2**30) < 2000
    msgs = guards.memory_refusals([make_run_config(model="fcn5_tiny", batch_size=8,
                                                   device="cpu", threads=1)])
    assert msgs == []


def test_dry_run_says_how_long(tmp_path):
    sw = tmp_path / "s.yaml"
    sw.write_text("name: s\ndefaults: {device: cpu, threads: 1, framework: fake}\n"
                  "grid:\n  - {model: [fcn5_tiny], batch_size: [8, 16]}\n")
    db = tmp_path / "s.db"
    r = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert ("estimated time: about 8 s for the 2 pending run(s) (2 at the least the iteration "
            "policy allows (minimum time + 3 s of start-up each) (a lower bound))") in r.stdout
    r = dlperf("run", "-m", "fcn5_tiny", "--framework", "fake", "-b", "8", "--device", "cpu",
               "--threads", "1", "--no-ceilings", "--db", str(db))
    assert r.returncode == 0, r.stderr
    r = dlperf_here("sweep", str(sw), "--db", str(db), "--dry-run")
    assert "for the 1 pending run(s) (1 from stored runs of the same model at another batch)" \
        in r.stdout, r.stdout


def test_the_watch_names_a_worker_without_progress(tmp_path, monkeypatch):
    """No beat for the stall time: one line naming the point, its last progress and the
    timeout; quiet again after a beat; a measured segment's budget is no stall."""
    monkeypatch.setenv("DLPERF_STALL_S", "10")
    monkeypatch.setenv(heartbeat.ENV, str(tmp_path / "hb.json"))
    t0 = time.time()
    w = heartbeat.Watch(tmp_path / "hb.json", "m torch/eager cpu fp32 b=8", 900, started=t0)
    assert w.poll(t0 + 5) is None
    line = w.poll(t0 + 11)
    assert line and "it has not finished preparing in 11 s" in line and "900 s" in line
    assert w.poll(t0 + 12) is None  # said once per stall time
    heartbeat.beat("warm-up", 10)
    t = json.loads((tmp_path / "hb.json").read_text())["t"]
    assert w.poll(t + 5) is None
    assert "its last progress: warm-up after 10 step(s)" in (w.poll(t + 30) or "")
    heartbeat.beat("measuring", 20, budget_s=60)
    t = json.loads((tmp_path / "hb.json").read_text())["t"]
    assert w.poll(t + 65) is None and w.poll(t + 71) is not None


def test_a_hanging_point_is_named_while_it_waits(tmp_path):
    """A model whose step never returns: before its timeout the parent prints that no progress
    came since the run was prepared."""
    r = dlperf("run", "-m", "fcn5_tiny", "--framework", "fake", "-b", "8", "--no-ceilings",
               "--timeout", "12", "--db", str(tmp_path / "h.db"),
               "--framework-option", "fail={8: hang}", env={"DLPERF_STALL_S": "3"})
    assert "waiting: fcn5_tiny fake/eager cpu fp32 b=8 synthetic: no progress for" in r.stderr
    assert "its last progress: prepared" in r.stderr and "timeout of 12 s" in r.stderr
    assert "timeout" in r.stdout

"""JAX's input pipeline on Grain worker processes (dlperf.data.grain_pipeline,
dlperf.frameworks.jax.input): same batches as SampleSource, real processes, errors, shutdown,
the thread fallback without Grain, and loader_impl's validation and wiring (CPU)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import psutil
import pytest

from dlperf.config import IterationPolicy, SweepConfig, make_run_config
from dlperf.data.grain_pipeline import THREADS_WARNING, grain_installed
from dlperf.data.imagefolder import make_imagefolder
from dlperf.data.pipeline import SampleSource
from dlperf.errors import ConfigError

pytest.importorskip("grain")

FAST = IterationPolicy(min_iters=6, min_time_s=0.0, warmup_window=2, min_warmup_iters=0,
                       max_warmup_iters=4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("gif") / "jpegs"
    make_imagefolder(root, images=24, classes=3, size=40, seed=5)
    return root


def _source(data, model, batch, data_dir=None, seed=3):
    from dlperf.data import load_dataset
    from dlperf.zoo import get_spec

    return SampleSource(load_dataset(data, data_dir), get_spec(model), batch, layout="NHWC",
                        seed=seed)


def _grain_pids() -> set[int]:
    return {c.pid for c in psutil.Process().children(recursive=True)
            if any("multiprocessing.spawn" in a for a in c.cmdline())}


def test_grain_batches_equal_sample_source_batches_on_worker_processes(folder):
    """An ImageFolder (decode + crop + flip in the workers) over more than two passes: batch k of
    the stream is SampleSource.batch(k), made in 2 spawned processes, which close() ends."""
    from dlperf.data.grain_pipeline import GrainPipeline

    src = _source(f"imagefolder:{folder}", "resnet50_tiny", 5)
    pipe = GrainPipeline(src, 2, x_dtype=np.float32, y_dtype=np.int64, worker_buffer=1)
    try:
        for k in range(11):  # 55 positions over 24 images: three passes, three permutations
            x, y = pipe.next()
            ex, ey = src.batch(k)
            assert x.shape == (5, 32, 32, 3) and x.dtype == np.float32
            np.testing.assert_array_equal(x, ex)
            np.testing.assert_array_equal(y, ey)
        procs = pipe.worker_processes()
        assert len(procs) == 2 and {m for _, m in procs} == {"spawn"}
        pids = {p for p, _ in procs}
        assert os.getpid() not in pids and pids <= _grain_pids()
    finally:
        pipe.close()
    assert pipe.seen_at_close is not None and {p for p, _ in pipe.seen_at_close} == pids
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids)
    assert not pids & {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError, match="closed"):
        pipe.next()
    pipe.close()  # idempotent


@pytest.mark.parametrize("data,model,batch", [("mnist", "fcn_mnist_tiny", 32),
                                              ("ptb", "lstm_tiny", 8)])
def test_grain_batches_of_arrays_and_lm_batches(data, model, batch, shared_data):
    """MNIST samples (stacked in the workers) and per-batch LM items (taken whole, in order)."""
    from dlperf.data.grain_pipeline import GrainPipeline

    src = _source(data, model, batch, data_dir=shared_data)
    assert src.per_batch == (data == "ptb")
    xdt = np.int32 if src.per_batch else np.float32
    pipe = GrainPipeline(src, 2, x_dtype=xdt, y_dtype=np.int32)
    try:
        for k in range(5):
            x, y = pipe.next()
            ex, ey = src.batch(k)
            assert x.dtype == xdt and y.dtype == np.int32 and x.flags.c_contiguous
            np.testing.assert_array_equal(x, ex.astype(xdt))
            np.testing.assert_array_equal(y, ey.astype(np.int32))
    finally:
        pipe.close()


class _Probe:
    """A duck-typed SampleSource whose item p reports the process that made it and its JAX
    state; position 13 raises."""

    B, per_batch, n = 4, False, 1000
    ds = SimpleNamespace(name="probe")

    def item(self, p):
        jax_mod = sys.modules.get("jax")
        backends = None
        if jax_mod is not None:
            from jax._src import xla_bridge

            backends = xla_bridge.backends_are_initialized()
        if p == 13:
            raise ValueError(f"cannot read item {p}")
        return np.array([os.getpid(), jax_mod is not None, bool(backends), p]), np.int64(p)


def test_worker_errors_surface_from_next_and_workers_run_no_jax_backend():
    from dlperf.data.grain_pipeline import GrainPipeline

    pipe = GrainPipeline(_Probe(), 2, x_dtype=np.int64, worker_buffer=1)
    try:
        rows = np.concatenate([pipe.next()[0] for _ in range(3)])  # batches 0..2: positions 0..11
        np.testing.assert_array_equal(rows[:, 3], np.arange(12))
        made_by = set(rows[:, 0].tolist())
        assert len(made_by) == 2 and os.getpid() not in made_by  # two other processes
        assert not rows[:, 2].any()  # no JAX backend initialised in a worker
        with pytest.raises(ValueError, match="cannot read item 13") as e:
            pipe.next()  # batch 3 holds position 13
        assert any("batch 3 (positions 12..15)" in n and "Grain" in n
                   for n in getattr(e.value, "__notes__", []))
    finally:
        pipe.close()
    assert not made_by & {c.pid for c in psutil.Process().children(recursive=True)}


def _jax_pipeline(cfg):
    import jax

    from dlperf.data import load_dataset
    from dlperf.frameworks.jax.input import make_pipeline
    from dlperf.zoo import get_spec

    return make_pipeline(jax, cfg, get_spec(cfg.workload.model), load_dataset(cfg.input.data),
                         jax.devices("cpu")[0], int_ids=False)


def test_fallback_to_threads_without_grain(folder, monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.setitem(sys.modules, "grain", None)  # `import grain` raises ImportError
    assert not grain_installed()
    cfg = make_run_config(framework="jax", model="resnet50_tiny", batch_size=4,
                          data=f"imagefolder:{folder}", loader_workers=2)
    nxt, first, info, rec, close = _jax_pipeline(cfg)
    try:
        assert info["impl"] == "dlperf HostPipeline threads" and info["workers_kind"] == "threads"
        assert info["warnings"] == [THREADS_WARNING] and "pip install grain" in THREADS_WARNING
        src = _source(cfg.input.data, cfg.workload.model, 4, seed=cfg.workload.seed)
        for k in range(3):
            x, _ = nxt()
            np.testing.assert_array_equal(np.asarray(x), src.batch(k)[0])
    finally:
        close()
    with pytest.raises(ConfigError, match=r"pip install .*\[jax\].*brings grain"):
        _jax_pipeline(cfg.with_(loader_impl="processes"))
    from dlperf.sweep import preflight

    with pytest.raises(ConfigError, match=r"pip install .*\[jax\].*brings grain"):
        preflight([cfg.with_(loader_impl="processes")])
    # threads by choice: no warning; 0 workers: the calling thread, whatever loader_impl says
    for lw, impl, want in [(2, "threads", "dlperf HostPipeline threads"),
                           (0, "processes", "dlperf HostPipeline (calling thread)")]:
        _, _, info, _, close = _jax_pipeline(cfg.with_(loader_workers=lw, loader_impl=impl))
        close()
        assert info["impl"] == want and info["warnings"] == []


def test_fallback_warning_reaches_the_result(data_env, monkeypatch):
    pytest.importorskip("flax")
    from dlperf.worker import run_config

    monkeypatch.setitem(sys.modules, "grain", None)
    cfg = make_run_config(framework="jax", mode="xla", model="fcn_mnist_tiny", batch_size=16,
                          data="mnist", loader_workers=1, iterations=FAST,
                          measure_ceilings=False)
    r = run_config(cfg)
    assert r["status"] == "ok", r["error"]
    assert r["data_info"]["pipeline"]["impl"] == "dlperf HostPipeline threads"
    assert THREADS_WARNING in r["warnings"]


def test_loader_impl_validation_and_run_keys():
    for fw, mode, impl, msg in [("torch", "eager", "threads", "DataLoader"),
                                ("tensorflow", "graph", "processes", "tf.data")]:
        with pytest.raises(ConfigError, match=rf"--loader-impl \(loader_impl\): loader_impl "
                                              rf"'{impl}' is a JAX option.*{msg}"):
            make_run_config(framework=fw, mode=mode, model="fcn_mnist_tiny", batch_size=8,
                            data="mnist", loader_workers=2, loader_impl=impl)
    with pytest.raises(ConfigError, match="unknown loader_impl 'forks'"):
        make_run_config(framework="jax", model="fcn_mnist_tiny", batch_size=8, data="mnist",
                        loader_workers=2, loader_impl="forks")
    with pytest.raises(ConfigError, match="has none .*--loader-workers N"):
        make_run_config(framework="jax", model="fcn_mnist_tiny", batch_size=8, data="mnist",
                        loader_impl="threads")

    def key(**kw):
        return make_run_config(framework="jax", model="fcn_mnist_tiny", batch_size=8,
                               data="mnist", **kw).run_key()

    # auto keeps the keys stored before loader_impl existed (the key of the same dict without it)
    import hashlib

    cfg = make_run_config(framework="jax", model="fcn_mnist_tiny", batch_size=8, data="mnist",
                          loader_workers=2)
    d = {k: v for k, v in cfg.flat().items()
         if k in {"model", "framework", "mode", "device", "precision", "batch_size", "grad_accum",
                  "data", "threads", "seed", "loader_workers", "loader_prefetch"}}
    old = hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode())
    assert key(loader_workers=2) == old.hexdigest()[:16]
    assert len({key(loader_workers=2), key(loader_workers=2, loader_impl="threads"),
                key(loader_workers=2, loader_impl="processes")}) == 3
    assert key(loader_workers=0, loader_impl="threads") == key(loader_workers=0)  # one measurement
    # a sweep field like the other pipeline fields
    pts = SweepConfig(name="s", grid=[{"model": "fcn_mnist_tiny", "framework": "jax",
                                       "batch_size": 8, "data": "mnist", "loader_workers": [0, 2],
                                       "loader_impl": ["processes", "threads"]}]).expand()
    assert [(p.input.loader_workers, p.input.loader_impl) for p in pts] == [
        (0, "processes"), (2, "processes"), (2, "threads")]
    assert "loader=threads" in pts[-1].label()


def _dlperf(*args):
    return subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})


def test_cli_loader_impl_refused_for_torch():
    r = _dlperf("run", "--model", "fcn_mnist_tiny", "--framework", "torch", "--device", "cpu",
                "--data", "mnist", "--loader-workers", "2", "--loader-impl", "processes")
    assert r.returncode == 2 and "--loader-impl (loader_impl)" in r.stderr
    assert "JAX option" in r.stderr


@pytest.mark.slow
def test_dlperf_run_jax_on_grain_processes_end_to_end(folder, tmp_path):
    pytest.importorskip("flax")
    db = tmp_path / "g.db"
    r = _dlperf("run", "--model", "resnet50_tiny", "--framework", "jax", "--device", "cpu",
                "--batch-size", "4", "--data", f"imagefolder:{folder}", "--loader-workers", "2",
                "--min-iters", "5", "--min-time", "0", "--max-warmup-iters", "4",
                "--warmup-window", "2", "--no-ceilings", "--db", str(db))
    assert r.returncode == 0, r.stderr[-3000:]
    with sqlite3.connect(db) as con:
        (res,) = con.execute("SELECT result_json FROM results").fetchone()
    res = json.loads(res)
    assert res["status"] == "ok"
    pipe = res["data_info"]["pipeline"]
    assert pipe["impl"].startswith("grain ") and pipe["impl"].endswith(" processes")
    assert pipe["num_workers"] == 2 and pipe["workers_alive_at_close"] == 2
    assert pipe["start_method"] == "spawn" and pipe["read_options"]["num_threads"] == 0
    assert pipe["per_worker_buffer_size"] == 2 and pipe["queue_depth"] == 2
    assert res["data_wait"]["n"] == res["n_measured"] > 0
    assert not any("grain" in w for w in res["warnings"])

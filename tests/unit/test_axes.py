"""Comparisons along one axis (precision, modes, frameworks), the relative summary and the
batch-size advice (dlperf.report.axes, glance, batches), on hand-made records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlperf.report import axes, batches, glance, regress
from dlperf.report.cells import fmt_sig
from dlperf.results.schema import RunRecord


def rec(model: str = "m", *, fw: str = "torch", mode: str = "eager", prec: str = "fp32",
        b: int = 8, med: float = 0.010, rel: float = 0.01, n: int = 30, repeat: int = 0,
        status: str = "ok", seed: int = 0, cm: str = "default", error: str | None = None,
        threads: int | None = None, world: int = 1, **cfg_extra) -> RunRecord:
    """A result of one run: ``n`` iterations around ``med`` s with relative spread ``rel``."""
    rng = np.random.default_rng(seed)
    samples = list(med * (1 + rel * rng.standard_normal(n)))
    cfg = {"model": model, "framework": fw, "mode": mode, "precision": prec, "batch_size": b,
           "device": "cpu", "data": "synthetic", "compile_mode": cm, "repeat": repeat,
           "threads": threads, "iterations": {"min_iters": 10, "seed_differs": seed},
           "nproc": world, "dp_layout": "per_device", "ddp": {"bucket_cap_mb": 25.0},
           **cfg_extra}
    key = f"{model}-{fw}-{mode}-{cm}-{prec}-{b}-{threads}-{world}-{sorted(cfg_extra.items())}"
    d = {"run_key": f"{key}-{repeat}", "point_key": key, "repeat": repeat, "status": status,
         "error": error, "model": model, "framework": fw, "mode": mode, "device": "cpu",
         "precision": prec, "batch_size": b, "data": "synthetic", "threads": threads,
         "world_size": world,
         "config": cfg, "env": {"cpu_model": "c"}}
    if status == "ok":
        d["samples"] = {"measure": samples}
        d["summary"] = {"median": float(np.median(samples)), "ci_low": min(samples),
                        "ci_high": max(samples)}
        d["throughput"] = {"samples_per_s": b / float(np.mean(samples))}
    return RunRecord.from_dict(d)


def test_precision_speedup_from_runs_is_the_reciprocal_of_compares_interval():
    fp32 = [rec(med=0.020 * f, repeat=k, seed=k) for k, f in enumerate((1.0, 1.02, 0.99))]
    bf16 = [rec(prec="bf16", med=0.010 * f, repeat=k, seed=10 + k)
            for k, f in enumerate((1.0, 1.03, 0.98))]
    (c,) = axes.precision_speedups(fp32 + bf16)
    med = [regress.run_median_s(r) for r in fp32], [regress.run_median_s(r) for r in bf16]
    ratio, lo, hi = regress.ratio_from_runs(*med)  # bf16 / fp32 step time, Welch on logs
    assert c["ci_from"] == "runs" and c["runs"] == [3, 3]
    assert c["baseline"] == "fp32" and c["other"] == "bf16"
    assert c["speedup"] == pytest.approx(1 / ratio) and 1.9 < c["speedup"] < 2.1
    assert (c["ci_low"], c["ci_high"]) == pytest.approx((1 / hi, 1 / lo))
    assert c["ci_low"] < c["speedup"] < c["ci_high"]
    assert not any("precision" in n for n in c["notes"])  # the axis itself is no "difference"
    md = axes.precision_markdown([c])
    assert "runs (3 vs 3)" in md and "bf16 vs fp32" in md and "iterations*" not in md


def test_precision_speedup_with_one_run_a_side_bootstraps_iterations_and_says_so():
    (c,) = axes.precision_speedups([rec(med=0.03, seed=1), rec(prec="bf16", med=0.02, seed=2)])
    xb = rec(med=0.03, seed=1).measured_s
    xn = rec(prec="bf16", med=0.02, seed=2).measured_s
    ratio, lo, hi = regress.ratio_from_iterations(xb, xn)
    assert c["ci_from"] == "iterations"
    assert (c["speedup"], c["ci_low"], c["ci_high"]) == pytest.approx((1 / ratio, 1 / hi, 1 / lo))
    assert any("run-to-run variation not included" in n for n in c["notes"])
    md = axes.precision_markdown([c])
    assert "iterations* (1 vs 1 run)" in md and "bootstrap over the measured iterations" in md


def test_precision_pairs_need_the_same_point_and_an_fp32_side():
    # another batch, another mode, another thread count: not the same point
    recs = [rec(b=8), rec(prec="bf16", b=16), rec(prec="bf16", mode="graph"),
            rec(prec="bf16", threads=1)]
    assert axes.precision_speedups(recs) == []
    assert "No comparable pairs" in axes.precision_markdown([])
    # no fp32 side: tf32 and bf16 are not compared with each other
    assert axes.precision_speedups([rec(prec="tf32"), rec(prec="bf16")]) == []
    # tf32 and bf16 each against fp32; a failed side is no pair
    recs = [rec(), rec(prec="tf32", med=0.008), rec(prec="bf16", med=0.005),
            rec(model="x"), rec(model="x", prec="bf16", status="oom", error="out of memory")]
    got = [(c["model"], c["other"]) for c in axes.precision_speedups(recs)]
    assert got == [("m", "bf16"), ("m", "tf32")]


def test_modes_and_frameworks_axes_pick_their_baselines_from_the_registry():
    recs = [rec(mode="eager"), rec(mode="graph", med=0.006),
            rec(mode="graph", cm="reduce-overhead", med=0.005),
            rec(fw="jax", mode="xla", med=0.008)]
    modes = axes.axis_pairs(recs, axes.AXES["modes"])
    assert sorted((p.base, p.other) for p in modes) == [
        ("torch/eager", "torch/graph"), ("torch/eager", "torch/graph [reduce-overhead]")]
    fws = axes.axis_pairs(recs, axes.AXES["frameworks"])
    # the registry's first framework here, in its eager mode, is the baseline of the others
    assert [(p.base, p.other) for p in fws] == [("torch/eager", "jax/xla")]
    assert fws[0].speedup == pytest.approx(0.010 / 0.008, rel=0.02)
    # JAX has no eager mode: alone it has no modes pair
    assert axes.axis_pairs([rec(fw="jax", mode="xla")], axes.AXES["modes"]) == []


def test_settings_that_change_nothing_measured_do_not_split_a_pair():
    """One process: the data-parallel settings (each framework's default layout) are no
    difference; several: a DDP option is, except between frameworks (their engines differ)."""
    one = [rec(), rec(fw="jax", mode="xla", dp_layout="per_node", med=0.005)]
    assert [p.other for p in axes.axis_pairs(one, axes.AXES["frameworks"])] == ["jax/xla"]
    two = [rec(world=2), rec(prec="bf16", world=2, ddp={"bucket_cap_mb": 50.0})]
    assert axes.precision_speedups(two) == []
    two[1] = rec(prec="bf16", world=2)
    assert len(axes.precision_speedups(two)) == 1
    # the iteration policy and where the data came from are not the point
    other_policy = rec(prec="bf16", iterations={"min_iters": 50}, data_dir="/x", timeout_s=5.0)
    assert len(axes.precision_speedups([rec(), other_policy])) == 1


def test_relative_summary_is_the_geometric_mean_with_the_combined_interval():
    recs = []
    for k, (model, sp) in enumerate((("a", 2.0), ("b", 1.5), ("c", 1.2))):
        recs += [rec(model, med=0.02, seed=k), rec(model, prec="bf16", med=0.02 / sp,
                                                   seed=50 + k)]
    (s,) = glance.relative_summary(recs)
    pairs = axes.axis_pairs(recs, axes.AXES["precision"])
    gm, glo, ghi, n = regress.geometric_summary([p.comparison for p in pairs])
    assert n == 3 and s["points"] == 3 and s["axis"] == "precision"
    assert s["speedup"] == pytest.approx(1 / gm)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((1 / ghi, 1 / glo))
    assert s["speedup"] == pytest.approx(math.exp(np.mean(np.log([2.0, 1.5, 1.2]))), rel=0.02)
    assert s["min"] == pytest.approx(1.2, rel=0.02) and s["max"] == pytest.approx(2.0, rel=0.02)
    lines = glance.summary_lines([s])
    assert lines[1].startswith(f"  bf16 runs {s['speedup']:.2f}x as fast as fp32 [")
    assert "over 3 points (a, b, c; 1.20x to 2.00x)" in lines[1]
    assert "--repeats 3" in lines[-1]  # one run a side: said so
    md = glance.summary_markdown([s])
    assert "**bf16** runs" in md and "geometric mean" in md


def test_summary_names_one_point_and_stays_short():
    (s,) = glance.relative_summary([rec("resnet50", b=32, mode="eager", med=0.018),
                                    rec("resnet50", b=32, mode="graph", med=0.010)])
    assert s["context"] == "on resnet50 fp32 b=32" and s["speedup"] == pytest.approx(1.8,
                                                                                       rel=0.02)
    many = [dict(s, other=f"o{k}") for k in range(7)]
    lines = glance.summary_lines(many)
    assert len([ln for ln in lines if " as fast as " in ln]) == glance.MAX_LINES
    assert "  ... and 3 more: dlperf results --compare modes" in lines
    assert glance.summary_lines([]) == [] and glance.relative_summary([rec()]) == []


def _sweep(meds: dict[int, float], failed: dict[int, str] | None = None, **kw) -> list:
    out = [rec("r", b=b, med=m, seed=b, **kw) for b, m in meds.items()]
    for b, st in (failed or {}).items():
        out.append(rec("r", b=b, status=st, error="CUDA out of memory. Tried to allocate"))
    return out


def test_batch_advice_fits_fails_and_plateau():
    # throughput 800, 1333, 1600, 1641 samples/s: 32 is within 5% of the best (64)
    (a,) = batches.batch_advice(_sweep({8: 0.010, 16: 0.012, 32: 0.020, 64: 0.039},
                                       {128: "oom", 256: "oom"}, rel=0.002))
    assert a["batches"] == [8, 16, 32, 64, 128, 256]
    assert a["fits_up_to"] == 64 and a["first_failure"]["batch"] == 128
    assert a["first_failure"]["status"] == "OOM"
    assert a["best_batch"] == 64 and a["best_median_samples_per_s"] == pytest.approx(
        64 / 0.039, rel=0.01)
    # the number printed is the one that ranks: b / the median step, with that step
    best_runs = [r for r in _sweep({64: 0.039}, rel=0.002)]
    assert a["best_samples_per_s"] != a["best_median_samples_per_s"]
    assert a["best_samples_per_s"] == pytest.approx(best_runs[0].throughput.samples_per_s,
                                                    rel=0.01)
    assert a["best_step_s"] == pytest.approx(regress.run_median_s(best_runs[0]))
    assert (f"({fmt_sig(a['best_median_samples_per_s'])} samples/s at b=64: 64 / "
            f"{fmt_sig(a['best_step_s'] * 1e3)} ms median step)") in a["advice"]
    assert a["mean_best_batch"] == 64 and "ranks b=" not in a["advice"]
    pl = a["plateau"]
    assert pl["batch"] == 32 and pl["ci_low"] >= 0.95 and pl["ci_from"] == "iterations"
    assert pl["share"] == pytest.approx((32 / 0.020) / (64 / 0.039), rel=0.01)
    assert not a["still_growing"]
    assert "fits up to b=64 (b=128: OOM); throughput stops growing at b=32" in a["advice"]
    lines = batches.advice_lines([a])
    assert lines[0].startswith("batch size (within 5% of the best") and "r torch/eager" in lines[1]
    md = batches.advice_markdown([a])
    assert "| 8, 16, 32, 64, 128, 256 | 64 |" in md and "b=128: OOM" in md


def _slow_tail(b: int, med: float, slow: float, n_slow: int, n: int = 30) -> RunRecord:
    """A run of ``n`` iterations at ``med`` s but ``n_slow`` of them at ``slow`` s: its
    median stays at ``med`` while its mean (the table's samples/s) drops."""
    r = rec("r", b=b, med=med, rel=0.001, seed=b, n=n)
    xs = list(r.measured_s)[: n - n_slow] + [slow] * n_slow
    d = r.to_dict()
    d["samples"] = {"measure": xs}
    d["summary"] = {"median": float(np.median(xs)), "ci_low": min(xs), "ci_high": max(xs)}
    d["throughput"] = {"samples_per_s": b / float(np.mean(xs))}
    return RunRecord.from_dict(d)


def test_batch_advice_prints_the_statistic_that_ranks_and_says_where_the_mean_differs():
    """A fresh user's CPU sweep: b=8 at a 19.4 ms median (413 samples/s) with slow iterations
    (mean 194 samples/s), b=32 at 82.8 ms (386; mean ~386): b=8 ranks first by the median,
    b=32 by the table's mean. The printed best is the median's (413 at b=8), never the mean
    of b=8 (194) beside the claim that it is the best, and the mean's other ranking is said."""
    recs = [_slow_tail(8, 0.01936, 0.2, 3), _slow_tail(32, 0.08285, 0.0829, 1)]
    (a,) = batches.batch_advice(recs)
    assert a["best_batch"] == 8 and a["mean_best_batch"] == 32
    shown = a["best_median_samples_per_s"]
    assert shown == pytest.approx(8 / 0.01936, rel=0.01)
    assert a["best_samples_per_s"] < 0.6 * shown  # the mean of b=8 is far lower
    assert f"({fmt_sig(shown)} samples/s at b=8: 8 / 19.36 ms median step)" in a["advice"]
    assert f"{fmt_sig(shown)} (b=8: 8 / 19.36 ms median step)" in batches.advice_markdown([a])
    for text in (a["advice"], batches.advice_markdown([a])):
        assert fmt_sig(a["best_samples_per_s"]) in text  # said as the mean of b=8 ...
        assert "samples/s (mean) ranks b=32 first" in text  # ... beside the mean's ranking
    assert "best samples/s (b / median step)" in batches.advice_markdown([a])


def test_batch_plateau_respects_the_interval():
    """A batch whose estimate is within 5% of the best but whose interval reaches below 95%
    is not on the plateau: the next batch is."""
    meds = {8: 0.0100, 16: 0.0168, 32: 0.0330}  # 800, 952, 970 samples/s: 16 at 98%
    noisy = _sweep(meds, rel=0.15)  # 15% iteration spread: wide intervals
    quiet = _sweep(meds, rel=0.001)
    (an,), (aq,) = batches.batch_advice(noisy), batches.batch_advice(quiet)
    assert aq["plateau"]["batch"] == 16 and aq["plateau"]["ci_low"] >= 0.95
    b16 = next(r for r in an["per_batch"] if r["batch"] == 16)
    assert b16["share"] >= 0.95 > b16["ci_low"]
    assert an["plateau"]["batch"] == an["best_batch"] != 16


def test_batch_advice_says_when_throughput_still_grows_and_needs_two_batches():
    (a,) = batches.batch_advice(_sweep({8: 0.010, 16: 0.010, 32: 0.010}, rel=0.001))
    assert a["still_growing"] and a["first_failure"] is None
    assert "still grows at the largest batch tried" in a["advice"] and "try larger" in a["advice"]
    assert "still growing at b=32" in batches.advice_markdown([a])
    assert batches.batch_advice(_sweep({8: 0.01})) == []  # one batch size: no series
    assert "No batch sweep here" in batches.advice_markdown([])
    (none,) = batches.batch_advice(_sweep({}, {8: "oom", 16: "oom"}))
    assert none["fits_up_to"] is None and none["advice"].startswith("no batch ran")
    with pytest.raises(ValueError, match="tolerance"):
        batches.batch_advice([], tolerance=1.5)

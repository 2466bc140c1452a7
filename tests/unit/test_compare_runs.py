"""Statistics of ``dlperf compare`` (dlperf.report.regress) and the history selectors
(dlperf.results.history) on synthetic records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from dlperf.errors import ConfigError
from dlperf.report import regress, regress_text
from dlperf.results import history
from dlperf.results.schema import RunRecord
from dlperf.results.store import ResultStore
from dlperf.resume import resume_plan


def rec(point: str = "p1", samples=(0.010,) * 20, *, status: str = "ok", repeat: int = 0,
        model: str = "m", batch: int = 8, op_classes=None, tag=None, sha="a" * 40,
        created="2026-01-01T00:00:00+00:00", error=None) -> RunRecord:
    """A result record of point ``point`` with measured ``samples`` (s)."""
    d = {"run_key": f"{point}-{repeat}", "point_key": point, "repeat": repeat, "status": status,
         "error": error, "model": model, "framework": "fake", "mode": "eager", "device": "cpu",
         "precision": "fp32", "batch_size": batch, "data": "synthetic", "created_at": created,
         "config": {"iterations": {"min_iters": 10}, "repeat": repeat},
         "env": {"git": {"sha": sha, "dirty": False}, "cpu_model": "cpu"}}
    if status == "ok":
        d["samples"] = {"measure": list(samples)}
        d["summary"] = {"median": float(np.median(samples)), "ci_low": min(samples),
                        "ci_high": max(samples)}
        d["throughput"] = {"samples_per_s": batch / float(np.mean(samples))}
    if op_classes is not None:
        d["op_classes"] = {"per_iter_s": op_classes}
    if tag is not None:
        d["tag"] = tag
    return RunRecord.from_dict(d)


def noisy(median: float, n: int = 30, rel: float = 0.002, seed: int = 0) -> list[float]:
    """``n`` iteration times around ``median`` (s) with a small symmetric spread."""
    rng = np.random.default_rng(seed)
    return list(median * (1 + rel * rng.standard_normal(n)))


def test_parse_threshold():
    assert regress.parse_threshold("5%") == pytest.approx(0.05)
    assert regress.parse_threshold(" 12.5 % ") == pytest.approx(0.125)
    assert regress.parse_threshold("0.05%") == pytest.approx(0.0005)
    assert regress.parse_threshold(None) is None
    for bad in ("", "five", "0", "-3%", "5%%", "%5", "0%"):
        with pytest.raises(ConfigError, match="--fail-if-slower"):
            regress.parse_threshold(bad)
    # A bare number is ambiguous (percent or fraction?): refused with the % spelling to use.
    for bare in ("5", "0.05"):
        with pytest.raises(ConfigError, match=f"did you mean --fail-if-slower {bare}%"):
            regress.parse_threshold(bare)


def test_threshold_text_shows_the_parsed_digits():
    for text in ("0.05%", "5%", "12.5%", "0.125%", "3%"):
        assert regress.threshold_text(regress.parse_threshold(text)) == text


def test_run_level_interval_is_welch_t_on_log_run_medians():
    base, new = [1.00, 1.03, 0.98, 1.01], [1.12, 1.09, 1.11]
    r, lo, hi = regress.ratio_from_runs(base, new)
    assert r == pytest.approx(math.exp(np.mean(np.log(new)) - np.mean(np.log(base))))
    # scipy's own Welch interval of the difference of log means, exponentiated
    ci = sps.ttest_ind(np.log(new), np.log(base), equal_var=False).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((math.exp(ci.low), math.exp(ci.high)))
    assert 1.0 < lo < r < hi
    # a wider level gives a wider interval
    _, lo99, hi99 = regress.ratio_from_runs(base, new, level=0.99)
    assert lo99 < lo and hi99 > hi


def test_run_level_interval_edge_cases():
    assert regress.ratio_from_runs([2.0, 2.0], [2.2, 2.2]) == pytest.approx((1.1, 1.1, 1.1))
    with pytest.raises(ValueError, match="at least 2 runs"):
        regress.ratio_from_runs([1.0], [1.0, 1.1])
    with pytest.raises(ValueError, match="positive"):
        regress.ratio_from_runs([1.0, 0.0], [1.0, 1.1])


def test_regression_from_runs_is_caught_and_same_code_is_not():
    base = [rec("p1", noisy(0.010, seed=s), repeat=s) for s in range(3)]
    slow = [rec("p1", noisy(0.011, seed=10 + s), repeat=s) for s in range(3)]
    same = [rec("p1", noisy(0.010, seed=20 + s), repeat=s) for s in range(3)]
    comp = regress.compare_records(base, slow, threshold=0.05)
    (pc,) = comp.points
    assert pc.ci_from == "runs" and pc.significant and pc.regression
    assert pc.ratio == pytest.approx(1.1, rel=0.01)
    assert pc.verdict == "slower" and comp.regressions == [pc]
    comp2 = regress.compare_records(base, same, threshold=0.05)
    assert comp2.regressions == []
    assert comp2.points[0].ratio == pytest.approx(1.0, abs=0.01)
    # without a threshold nothing is a regression, however slow
    assert regress.compare_records(base, slow).regressions == []


def test_threshold_needs_significance_and_size():
    base = [rec("p1", noisy(0.010, seed=s), repeat=s) for s in range(3)]
    three = [rec("p1", noisy(0.0103, seed=30 + s), repeat=s) for s in range(3)]
    pc = regress.compare_records(base, three, threshold=0.05).points[0]
    assert pc.significant and pc.verdict == "slower" and not pc.regression  # 3% < 5%
    pc = regress.compare_records(base, three, threshold=0.02).points[0]
    assert pc.regression


def test_one_run_a_side_is_not_judged_and_says_what_would_judge_it():
    """One run a side: the gate gives the ratio and the iterations' interval, but no verdict
    (iterations of one process leave out the variation between processes)."""
    comp = regress.compare_records([rec("p1", noisy(0.010))],
                                   [rec("p1", noisy(0.012, seed=1))], threshold=0.05)
    (pc,) = comp.points
    assert pc.ci_from == "iterations" and pc.significant  # descriptive: shown
    assert pc.judged is False and not pc.regression and pc.verdict == "not judged"
    assert pc.ratio == pytest.approx(1.2, rel=0.01)
    assert pc.not_judged == ["1 run in BASE, 2 needed", "1 run in NEW, 2 needed"]
    assert "--repeats 3" in pc.advice and "compare --run" in pc.advice
    assert comp.summary is None and comp.not_judged == [pc]
    assert regress.gate_status(comp)[0] == regress.EXIT_NOT_JUDGED
    md = regress_text.comparison_markdown(comp)
    assert "| not judged |" in md and "To judge it: measure each side with --repeats 3" in md
    assert "1 point: 0 judged, 1 not judged (1 run in BASE, 2 needed; 1 run in NEW" in md
    assert "no point judged (1 run on both sides but not judged)" in md
    assert regress.gate_status(regress.compare_records([rec("p1")], [rec("p1")]))[0] == 0


def test_no_samples_and_one_run_a_side_has_no_interval():
    a, b = rec("p1"), rec("p1", (0.02,) * 5)
    a.samples, b.samples = None, None  # stored before raw samples: the summary median only
    pc = regress.compare_records([a], [b], threshold=0.05).points[0]
    assert pc.ratio == pytest.approx(2.0) and pc.ci is None and pc.ci_from is None
    assert not pc.significant and not pc.regression and pc.verdict == "not judged"
    assert any("no interval" in n for n in pc.notes)
    assert regress.compare_records([a], [b]).summary is None


def drifting(seed: int, n: int = 60) -> list[float]:
    return list(0.010 * np.linspace(1.0, 1.6, n) * (1 + 0.01 * np.random.default_rng(seed)
                                                     .standard_normal(n)))


def two_speeds(seed: int, n: int = 60) -> list[float]:
    return list(0.010 * np.where(np.arange(n) % 2, 1.3, 1.0)
                * (1 + 0.005 * np.random.default_rng(seed).standard_normal(n)))


def test_runs_unfit_to_judge_are_left_out_with_the_reason():
    """A drifting run, a run with two modes and a run whose thread waited for a CPU are left
    out; with 2 fit runs left on each side the point is judged on those, else not judged with
    the reasons counted and the advice for each."""
    base = [rec("p1", noisy(0.010, seed=s), repeat=s) for s in range(3)]
    new = [rec("p1", noisy(0.010, seed=10), repeat=0), rec("p1", noisy(0.010, seed=11), repeat=1),
           rec("p1", drifting(12), repeat=2)]
    comp = regress.compare_records(base, new, threshold=0.05)
    pc = comp.points[0]
    assert pc.judged and pc.left_out == [("NEW", 2, ["drifting"])] and not pc.regression
    # the runs column counts the runs the ms come from: NEW's geometric mean is of 2 runs
    assert pc.new_step_s == pytest.approx(float(np.exp(np.mean(np.log(
        [regress.run_median_s(r) for r in new[:2]])))))
    assert "| 3 / 2 of 3 |" in regress_text.comparison_markdown(comp)
    js = regress_text.comparison_json(comp)["points"][0]
    assert [r["used"] for r in js["new_runs"]] == [True, True, False]
    assert all(r["used"] for r in js["base_runs"])
    busy = rec("p1", noisy(0.010, seed=13), repeat=1)
    busy.host_cpu_wait = {"seconds": 0.2, "share": 0.2}
    new = [rec("p1", two_speeds(14), repeat=0), busy, rec("p1", drifting(15), repeat=2)]
    comp = regress.compare_records(base, new, threshold=0.05)
    (pc,) = comp.points
    assert pc.judged is False and pc.verdict == "not judged"
    assert pc.not_judged == ["0 runs in NEW fit to judge (3 left out), 2 needed",
                             "two modes: 1 run", "busy host: 1 run", "drifting: 1 run"]
    # not judged: the ms come from every ok run; the cell says how many are fit to judge
    assert "| 3, 3 fit to judge / 3, 0 fit to judge |" in regress_text.comparison_markdown(comp)
    assert "--repeats" not in pc.advice  # enough runs were made: each reason's own advice
    assert "quiet host" in pc.advice and "alternates" in pc.advice and "grows" in pc.advice
    assert regress.gate_status(comp)[0] == regress.EXIT_NOT_JUDGED
    assert regress.run_flags(base[0]) == []


def test_the_gate_fails_on_missing_points_and_nothing_in_common():
    """With a threshold: a point of BASE missing from NEW, or no point in common, exits 3; a
    point only in NEW does not; without a threshold nothing fails."""
    base = [rec(k, noisy(0.010, seed=s), repeat=s, batch=b) for k, b in (("a", 8), ("b", 16))
            for s in range(2)]
    new = [rec("a", noisy(0.010, seed=5 + s), repeat=s, batch=8) for s in range(2)]
    comp = regress.compare_records(base, new, threshold=0.05)
    code, why = regress.gate_status(comp)
    assert code == regress.EXIT_MISSING and "1 point(s) of BASE missing from NEW" in why
    assert regress.gate_status(regress.compare_records(base, new))[0] == 0
    other = [rec("c", noisy(0.010, seed=s), repeat=s, batch=32) for s in range(2)]
    code, why = regress.gate_status(regress.compare_records(base, other, threshold=0.05))
    assert code == regress.EXIT_MISSING and "no point in common" in why
    code, _ = regress.gate_status(regress.compare_records(new, base, threshold=0.05))
    assert code == 0  # b is new: not a failure
    # a regression outranks a missing point
    slow = [rec("a", noisy(0.012, seed=5 + s), repeat=s, batch=8) for s in range(2)]
    assert regress.gate_status(regress.compare_records(base, slow, threshold=0.05))[0] == 1


def test_runs_of_one_side_all_before_the_other_get_a_note():
    """BASE's runs all made before NEW's: judged, with a note naming dlperf compare --run;
    interleaved runs: no note."""
    t = "2026-01-01T00:00:0{}+00:00"
    base = [rec("p1", noisy(0.010, seed=s), repeat=s, created=t.format(s)) for s in range(2)]
    new = [rec("p1", noisy(0.010, seed=5 + s), repeat=s, created=t.format(5 + s))
           for s in range(2)]
    pc = regress.compare_records(base, new).points[0]
    assert pc.judged and any("compare --run alternates" in n for n in pc.notes)
    new = [rec("p1", noisy(0.010, seed=5 + s), repeat=s, created=t.format(2 * s + 1))
           for s in range(2)]
    base = [rec("p1", noisy(0.010, seed=s), repeat=s, created=t.format(2 * s)) for s in range(2)]
    pc = regress.compare_records(base, new).points[0]
    assert not any("alternates" in n for n in pc.notes)


def test_every_run_is_used_and_failures_are_outcomes():
    base = [rec("p1", noisy(0.010, seed=s), repeat=s) for s in range(3)]
    new = [rec("p1", noisy(0.010, seed=9), repeat=0), rec("p1", status="crash", repeat=1),
           rec("p1", noisy(0.010, seed=8), repeat=2)]
    comp = regress.compare_records(base + [rec("p2", batch=16)], new +
                                   [rec("p2", status="oom", batch=16), rec("p3", batch=32)],
                                   threshold=0.05)
    by = {p.key: p for p in comp.points}
    assert by["p1"].ci_from == "runs"  # 3 and 2 ok runs
    assert any("1 of 3 runs not used (crash)" in n for n in by["p1"].notes)
    assert by["p2"].outcome == "failed in NEW" and by["p2"].regression
    assert by["p2"].notes == ["failed in NEW: 1 run oom"]  # how, in the notes
    assert by["p3"].outcome == "only in NEW" and not by["p3"].regression
    # a crash in 1 of NEW's 3 runs where BASE's all measured: a regression (a new failure)
    assert by["p1"].regression and by["p1"].verdict == "failed in some NEW runs"
    assert "failed in 1 of 3 NEW runs (1 run crash), in none of 3 BASE runs" in by["p1"].notes
    js = regress_text.comparison_json(comp)
    p1 = next(p for p in js["points"] if p["point_key"] == "p1")
    assert len(p1["base_runs"]) == 3 and len(p1["new_runs"]) == 3
    assert p1["failed_runs"]["new"] == [1, 3] and p1["failed_runs"]["p"] is None
    assert sorted(js["regressions"]) == ["p1", "p2"]
    md = regress_text.comparison_markdown(comp)
    assert "| 3 / 2 of 3 |" in md and "failed in NEW **REGRESSION**" in md


def test_op_class_attribution():
    base_oc = {"normalisation": 0.010, "matmul": 0.050, "elementwise": 0.020}
    new_oc = {"normalisation": 0.018, "matmul": 0.051, "elementwise": 0.021}
    base = [rec("p1", noisy(0.100, seed=s), repeat=s, op_classes=base_oc) for s in range(2)]
    new = [rec("p1", noisy(0.110, seed=5 + s), repeat=s, op_classes=new_oc) for s in range(2)]
    pc = regress.compare_records(base, new).points[0]
    att = pc.attribution
    assert att is not None and att["runs"] == [2, 2]
    top = att["classes"][0]
    assert top["class"] == "normalisation" and top["diff_s"] == pytest.approx(0.008)
    delta = pc.new_step_s - pc.base_step_s
    assert top["share"] == pytest.approx(0.008 / delta)
    assert att["explained"] == pytest.approx(0.010 / delta)
    text = regress_text.attribution_text(pc)
    assert text.startswith("+10.") and "in normalisation" in text
    assert f"{0.008 / delta:.0%} in normalisation" in text
    # one side without traces: no attribution
    plain = [rec("p1", noisy(0.100, seed=s), repeat=s) for s in range(2)]
    assert regress.compare_records(plain, new).points[0].attribution is None


def test_summary_is_the_geometric_mean_with_a_combined_interval():
    base = [rec(k, noisy(0.010, seed=s), repeat=s, batch=b) for k, b in (("a", 8), ("b", 16))
            for s in range(3)]
    new = ([rec("a", noisy(0.011, seed=7 + s), repeat=s, batch=8) for s in range(3)]
           + [rec("b", noisy(0.0121, seed=9 + s), repeat=s, batch=16) for s in range(3)])
    comp = regress.compare_records(base, new)
    r, lo, hi, n = comp.summary
    ra, rb = (p.ratio for p in comp.points)
    assert n == 2 and r == pytest.approx(math.sqrt(ra * rb))
    assert lo < r < hi and lo > 1.0
    line = regress_text.summary_line(comp)
    assert line.startswith(f"NEW is {r:.3f}x [{lo:.3f}, {hi:.3f}] slower than BASE over 2 points")
    faster = regress_text.summary_line(regress.compare_records(new, base))
    assert "faster than BASE over 2 points" in faster and f"{r:.3f}x" in faster


def test_history_select_and_revisions(tmp_path):
    a = rec("p1", tag="v1", sha="abcdef12" + "0" * 32, created="2026-01-01T00:00:00+00:00")
    b = rec("p1", tag="v2", sha="abcdef34" + "0" * 32, created="2026-02-01T00:00:00")
    c = rec("p1", sha="99" * 20, created="2026-03-01T00:00:00+00:00")
    assert history.tag_of(a) == "v1" and history.tag_of(c) is None
    assert history.revision_of(c) == "99999999" and history.revision_of(b) == "v2"
    assert history.select([a, b, c], tag="v2") == [b]
    assert history.select([a, b, c], tag=["v1", "v2"]) == [a, b]
    assert history.select([a, b, c], sha="ABCDEF") == [a, b]
    assert history.select([a, b, c], since="2026-01-15") == [b, c]
    with pytest.raises(ConfigError, match="--since"):
        history.select([a], since="last week")
    with pytest.raises(ConfigError, match="hex digits"):
        history.select([a], sha="xyz")
    assert history.match_revision([a, b, c], "v1") == ("tag 'v1'", [a])
    assert history.match_revision([a, b, c], "9999")[1] == [c]
    with pytest.raises(ConfigError, match="2 commits"):
        history.match_revision([a, b, c], "abcdef")
    with pytest.raises(ConfigError, match="tags: v1, v2"):
        history.match_revision([a, b, c], "v3")
    with pytest.raises(ConfigError, match="--tag"):
        history.check_tag("has space")


class _Point:
    def __init__(self, key: str) -> None:
        self.key = key

    def run_key(self) -> str:
        return self.key


def test_a_new_tag_measures_again_and_its_own_tag_resumes(tmp_path):
    db = str(tmp_path / "h.db")
    with ResultStore(db) as store:
        store.add(rec("p1", tag="v1"))
        store.add(rec("p2", tag="v1", status="oom", batch=16))
        store.add(rec("p3", tag="v2", status="error", batch=32))
    pts = [_Point("p1-0"), _Point("p2-0"), _Point("p3-0")]
    todo, resume, n = resume_plan(pts, db, "v1", rerun=False, retry_failed=False)
    assert [p.key for p in todo] == ["p3-0"] and resume is False and n == 2
    todo, _, n = resume_plan(pts, db, "v1", rerun=False, retry_failed=True)
    assert [p.key for p in todo] == ["p2-0", "p3-0"] and n == 1
    todo, _, n = resume_plan(pts, db, "v2", rerun=False, retry_failed=False)
    assert len(todo) == 3 and n == 0  # p3 under v2 is an 'error': not done
    # --failed-final (dlperf compare --run's later rounds): an 'error' is done too
    todo, _, n = resume_plan(pts, db, "v2", rerun=False, retry_failed=False, failed_final=True)
    assert [p.key for p in todo] == ["p1-0", "p2-0"] and n == 1
    assert resume_plan(pts, db, None, rerun=False, retry_failed=False) == (pts, True, 0)
    assert resume_plan(pts, db, "v1", rerun=True, retry_failed=False) == (pts, False, 0)
    # the tag goes into the stored result, and rows can be selected by it
    tagged = history.tagging(lambda cfg: RunRecord.from_dict({"status": "ok"}), "v3")(None)
    assert tagged.identity.tag == "v3" and tagged.to_dict()["tag"] == "v3"
    with ResultStore(db, read_only=True) as store:
        rows = history.select_rows(store.rows(latest=False), tag="v1")
    assert sorted(r["run_key"] for r in rows) == ["p1-0", "p2-0"]


@pytest.mark.simulation
@pytest.mark.parametrize("spread,rounds,false_max,caught_min", [
    (0.01, 3, 0.005, 0.93), (0.01, 5, 0.002, 0.99), (0.02, 5, 0.01, 0.85)])
def test_the_gate_rule_on_simulated_runs(spread, rounds, false_max, caught_min):
    """The table of docs/usage.md: run medians with a lognormal spread, --fail-if-slower 3%;
    how often identical code is flagged and a 5% slowdown is caught (2,000 simulated gates)."""
    rng = np.random.default_rng(7)
    flagged = {1.0: 0, 1.05: 0}
    for true in flagged:
        for _ in range(2000):
            b = np.exp(spread * rng.standard_normal(rounds))
            n = true * np.exp(spread * rng.standard_normal(rounds))
            r, lo, hi = regress.ratio_from_runs(list(b), list(n))
            flagged[true] += (not lo <= 1.0 <= hi) and r > 1.03
    assert flagged[1.0] / 2000 <= false_max
    assert flagged[1.05] / 2000 >= caught_min


def test_gate_verdict_separates_regression_inconclusive_and_pass():
    """The rule: beyond 1 + threshold with the interval above 1: regression; beyond it with
    the interval including 1: inconclusive; at or below it: pass, however wide the interval."""
    assert regress.gate_verdict(1.10, 1.05, 1.15, 0.03) == "regression"
    assert regress.gate_verdict(2.65, 0.57, 12.3, 0.03) == "inconclusive"
    assert regress.gate_verdict(1.031, 0.99, 1.07, 0.03) == "inconclusive"
    assert regress.gate_verdict(1.02, 0.50, 2.08, 0.03) == "pass"  # estimate within it
    assert regress.gate_verdict(1.02, 1.01, 1.03, 0.03) == "pass"  # slower, but by less
    assert regress.gate_verdict(1.03, 0.99, 1.07, 0.03) == "pass"  # exactly at it
    assert regress.gate_verdict(0.50, 0.30, 0.90, 0.03) == "pass"


def test_rounds_to_tell_is_the_power_approximation():
    """The runs a side at which a change of the observed size would be significant 4 times in
    5 at the observed spread: more for a wider spread or a smaller change; the interval of that
    many runs with the same spread and change excludes 1."""
    base, new = [1.0, 1.01, 0.99], [1.2, 2.6, 1.7]
    n = regress.rounds_to_tell(base, new)
    assert n is not None and 3 < n < 20
    wider = regress.rounds_to_tell(base, [1.0, 2.8, 1.6])
    assert wider is not None and wider > n
    smaller = regress.rounds_to_tell(base, [x * 0.7 for x in new])
    assert smaller is not None and smaller > n
    # n runs a side with exactly the observed means and stdevs of the logs
    lb, ln = np.log(base), np.log(new)
    z = np.linspace(-1, 1, n)
    z = (z - z.mean()) / z.std(ddof=1)
    r, lo, hi = regress.ratio_from_runs(list(np.exp(lb.mean() + lb.std(ddof=1) * z)),
                                        list(np.exp(ln.mean() + ln.std(ddof=1) * z)))
    assert lo > 1.0
    assert regress.rounds_to_tell([1.0, 1.2], [1.02, 1.22]) is None  # over MAX_ROUNDS_ADVISED
    assert regress.rounds_to_tell([1.0, 1.0], [1.5, 1.5]) == regress.MIN_RUNS
    with pytest.raises(ValueError, match="at least 2 runs"):
        regress.rounds_to_tell([1.0], [1.0, 1.1])


def spread_runs(point: str, medians) -> list[RunRecord]:
    """One run a point per run median (s), its steps a small symmetric spread around it."""
    return [rec(point, noisy(m, seed=40 + i), repeat=i) for i, m in enumerate(medians)]


def test_an_inconclusive_point_fails_the_gate_with_what_would_judge_it():
    """A 2x slowdown whose NEW runs spread widely (a loaded host, 3 rounds): the interval
    includes 1, so the point is not a regression but inconclusive: exit 5, counted, with the
    CV of each side, the runs a side that spread needs and a quieter host as advice."""
    base = spread_runs("p1", [0.0100, 0.0101, 0.0099])
    new = spread_runs("p1", [0.0483, 0.0140, 0.0266])
    comp = regress.compare_records(base, new, threshold=0.03)
    (pc,) = comp.points
    assert pc.judged and pc.ci_from == "runs" and not pc.significant
    assert pc.ratio > 2 and pc.ci[0] < 1.0 < pc.ci[1]
    assert pc.inconclusive and not pc.regression and pc.verdict == "inconclusive"
    assert comp.inconclusive == [pc] and comp.regressions == []
    cb, cn = pc.run_cv
    assert cb == pytest.approx(np.std([0.0100, 0.0101, 0.0099], ddof=1) / 0.0100, rel=0.02)
    assert cn > 0.5
    assert pc.rounds_needed == regress.rounds_to_tell(
        [regress.run_median_s(r) for r in base], [regress.run_median_s(r) for r in new])
    assert pc.rounds_needed is not None and pc.rounds_needed > 3
    code, why = regress.gate_status(comp)
    assert code == regress.EXIT_INCONCLUSIVE == 5
    assert why.startswith("1 point(s) inconclusive (--fail-if-slower 3%)")
    assert "neither shown nor excluded" in why
    assert f"--rounds {pc.rounds_needed}" in pc.advice and "quiet host" in pc.advice
    assert "NEW's runs spread far more than the other side's" in pc.advice
    md = regress_text.comparison_markdown(comp)
    assert "| **inconclusive** |" in md and "1 point: 1 judged (1 inconclusive)" in md
    assert f"CV {cb:.1%} (BASE) and {cn:.1%} (NEW)" in md
    assert "Inconclusive (slower than 3% by the estimate" in md
    js = regress_text.comparison_json(comp)
    assert js["inconclusive"] == ["p1"] and js["counts"]["inconclusive"] == 1
    assert js["points"][0]["verdict"] == "inconclusive"
    assert js["points"][0]["rounds_needed"] == pc.rounds_needed
    # without a threshold: only a report, nothing inconclusive, exit 0
    plain = regress.compare_records(base, new)
    assert not plain.points[0].inconclusive and regress.gate_status(plain)[0] == 0
    # a larger threshold than the estimate's slowdown: the point passes
    assert regress.gate_status(regress.compare_records(base, new, threshold=3.0))[0] == 0
    # a regression outranks it, and a missing point too
    slow = spread_runs("p2", [0.0120, 0.0121, 0.0119])
    both = regress.compare_records(base + [rec("p2", noisy(0.010, seed=s), repeat=s, batch=16)
                                           for s in range(3)],
                                   new + [dataclass_batch(r, 16) for r in slow], threshold=0.03)
    assert regress.gate_status(both)[0] == regress.EXIT_REGRESSION
    assert "1 point: " not in regress_text.counts_line(both)
    assert "2 judged (1 regression, 1 inconclusive)" in regress_text.counts_line(both)
    gone = regress.compare_records(base + [rec("p3", batch=32), rec("p3", batch=32, repeat=1)],
                                   new, threshold=0.03)
    assert regress.gate_status(gone)[0] == regress.EXIT_MISSING


def dataclass_batch(r: RunRecord, batch: int) -> RunRecord:
    """``r`` as a run of batch size ``batch`` (another point)."""
    d = r.to_dict()
    d["batch_size"] = batch
    return RunRecord.from_dict(d)


@pytest.mark.simulation
@pytest.mark.parametrize("spread_base,spread_new,rounds,same_max,slow2x_min", [
    (0.01, 0.01, 5, 0.003, 1.0), (0.02, 0.02, 5, 0.01, 1.0), (0.02, 0.02, 3, 0.05, 1.0),
    (0.01, 0.25, 3, 0.45, 0.995), (0.30, 0.30, 3, 0.50, 0.99)])
def test_inconclusive_rates_on_simulated_runs(spread_base, spread_new, rounds, same_max,
                                              slow2x_min):
    """The inconclusive columns of docs/usage.md's table (2,000 simulated gates a cell,
    --fail-if-slower 3%): identical code is seldom inconclusive at the run-to-run spread of a
    quiet host (1-2%) and often under heavy spread (it cannot be told apart there); a 2x
    slowdown is caught or inconclusive, never passed, even when its runs spread by 25-30%."""
    rng = np.random.default_rng(11)
    counts = {1.0: {"regression": 0, "inconclusive": 0, "pass": 0},
              2.0: {"regression": 0, "inconclusive": 0, "pass": 0}}
    for true, c in counts.items():
        for _ in range(2000):
            b = np.exp(spread_base * rng.standard_normal(rounds))
            n = true * np.exp(spread_new * rng.standard_normal(rounds))
            c[regress.gate_verdict(*regress.ratio_from_runs(list(b), list(n)), 0.03)] += 1
    assert counts[1.0]["inconclusive"] / 2000 <= same_max
    assert (counts[2.0]["regression"] + counts[2.0]["inconclusive"]) / 2000 >= slow2x_min
    if spread_new >= 0.25:  # heavy spread: identical code cannot be told apart often
        assert counts[1.0]["inconclusive"] / 2000 >= 0.30
        assert counts[2.0]["inconclusive"] > 0  # the cases the rule without it passed


def test_the_cli_exits_5_on_an_inconclusive_point_and_says_why(tmp_path):
    """``dlperf compare A B --fail-if-slower 3%`` on two files whose one point is a 2x slowdown
    with NEW's runs spread widely: exit 5, the reason on stderr, the verdict, the count and the
    advice in the table; with a 200% threshold the same files pass (exit 0)."""
    from cli_here import dlperf_here

    a, b = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    for path, runs in ((a, spread_runs("p1", [0.0100, 0.0101, 0.0099])),
                       (b, spread_runs("p1", [0.0483, 0.0140, 0.0266]))):
        with ResultStore(path) as store:
            for r in runs:
                store.add(r)
    r = dlperf_here("compare", a, b, "--fail-if-slower", "3%", env={"COLUMNS": "400"})
    assert r.returncode == 5, r.stdout + r.stderr
    assert "1 point(s) inconclusive (--fail-if-slower 3%)" in " ".join(r.stderr.split())
    out = " ".join(r.stdout.split())
    assert "inconclusive" in out and "1 point: 1 judged (1 inconclusive)" in out
    assert "--rounds" in out and "quiet host" in out
    assert dlperf_here("compare", a, b, "--fail-if-slower", "200%").returncode == 0
    assert dlperf_here("compare", a, b).returncode == 0


def _gate_points() -> dict[str, tuple[list[RunRecord], list[RunRecord]]]:
    """One point of each kind the gate tells apart, as (BASE runs, NEW runs), each its own
    batch size: identical code, an inconclusive 2x slowdown (NEW's runs spread), a tight 10%
    slowdown (a regression at 3%), a tight 10% speed-up, a point with one run in NEW (not
    judged), a point only in BASE (missing), a point failing in NEW, a point failing in BASE
    and one failing on both sides (neither judged); then the failure policy's kinds: an OOM
    in 1 of NEW's 4 runs where BASE's all measured (a regression), 6 of 10 NEW runs failing
    against 1 of 10 in BASE (a regression by Fisher's exact test), 1 of 4 failing on each
    side (judged on the step time: the same), a new point whose runs all failed (not
    judged), a new point that ran, BASE's first run read twice (counted once: the same) and
    BASE and NEW on two machines of the same models (judged: the same)."""
    def pt(batch: int, medians: list[float], seed: int) -> list[RunRecord]:
        return [rec(f"p{batch}", noisy(m, seed=seed + i), repeat=i, batch=batch)
                for i, m in enumerate(medians)]

    def failed(batch: int, n: int, first: int = 0, how: str = "oom") -> list[RunRecord]:
        return [rec(f"p{batch}", status=how, repeat=first + i, batch=batch) for i in range(n)]

    def on_machine(runs: list[RunRecord], uuid: str) -> list[RunRecord]:
        out = []
        for r in runs:
            d = r.to_dict()
            d["env"]["gpus"] = [{"name": "NVIDIA H100", "driver": "550.54", "uuid": uuid}]
            out.append(RunRecord.from_dict(d))
        return out

    three = [0.0100, 0.0101, 0.0099]
    dup = pt(16384, three, 170)
    return {
        "same": (pt(8, three, 0), pt(8, three, 10)),
        "inconclusive": (pt(16, three, 20), pt(16, [0.0483, 0.0140, 0.0266], 30)),
        "regressed": (pt(32, three, 40), pt(32, [0.0110, 0.01111, 0.01089], 50)),
        "faster": (pt(64, three, 60), pt(64, [0.0090, 0.00909, 0.00891], 70)),
        "not judged": (pt(128, three, 80), pt(128, [0.0100], 90)),
        "missing": (pt(256, three, 100), []),
        "failed in NEW": (pt(512, three, 110),
                          [rec("p512", status="crash", repeat=i, batch=512) for i in range(3)]),
        "failed in BASE": ([rec("p1024", status="oom", repeat=i, batch=1024) for i in range(3)],
                           pt(1024, three, 120)),
        "failed in both": ([rec("p2048", status="crash", repeat=i, batch=2048) for i in range(3)],
                           [rec("p2048", status="crash", repeat=i, batch=2048) for i in range(3)]),
        "flaky NEW": (pt(4096, three + [0.0100], 130), pt(4096, three, 135) + failed(4096, 1, 3)),
        "flaky more": (pt(8192, three * 3, 140) + failed(8192, 1, 9),
                       pt(8192, three + [0.0100], 150) + failed(8192, 6, 4)),
        "flaky both": (pt(12, three, 160) + failed(12, 1, 3),
                       pt(12, three, 165) + failed(12, 1, 3, "crash")),
        "new failed": ([], failed(24, 3)),
        "new ran": ([], pt(48, three, 175)),
        "duplicate": (dup + [RunRecord.from_dict(dup[0].to_dict())], pt(16384, three, 180)),
        "other machine": (on_machine(pt(96, three, 185), "GPU-aaaaaaaa"),
                          on_machine(pt(96, three, 190), "GPU-bbbbbbbb")),
    }


def test_gate_status_and_summary_line_agree_on_every_combination_of_verdicts():
    """Combinations of the point kinds of :func:`_gate_points` (every one of the first nine,
    with the failure policy's kinds up to three at a time and all but one or none left
    out), with --fail-if-slower 3% and without: the exit status is the first that applies of
    1 (a regression, a failure in every NEW run, or in some where BASE failed in none or
    less often), 3 (a point missing, or none in common), 5 (inconclusive), 4 (a point not
    judged, with too few runs, failed in BASE or on both sides, or new with every run
    failed: judged points passing beside it do not make the gate pass), else 0; without a
    threshold 0. The summary line names the gate's outcome and the exit status, never says
    "no significant difference" without the points whose verdict says otherwise, and names
    no verdict that is absent; the table's rows, the counts, the notes and the JSON say the
    same."""
    import itertools

    kinds = _gate_points()
    # each point compared once (compare_records judges points one by one), then combined
    gated = {k: regress.compare_records(b, n, threshold=0.03).points[0]
             for k, (b, n) in kinds.items()}
    plain_pts = {k: regress.compare_records(b, n).points[0] for k, (b, n) in kinds.items()}
    assert [p.verdict for p in gated.values()] == [
        "no significant change", "inconclusive", "slower", "faster", "not judged",
        "only in BASE", "failed in NEW", "failed in BASE", "failed in both",
        "failed in some NEW runs", "failed in some NEW runs", "no significant change",
        "only in NEW", "only in NEW", "no significant change", "no significant change"]
    reg_kinds = {"regressed", "failed in NEW", "flaky NEW", "flaky more"}
    nj_kinds = {"not judged", "failed in BASE", "failed in both", "new failed"}
    with_ratio = {"same", "inconclusive", "regressed", "faster", "flaky NEW", "flaky more",
                  "flaky both", "duplicate", "other machine"}
    one_side = {"missing", "new failed", "new ran"}
    names = list(kinds)
    combos = {c for k in range(1, 10) for c in itertools.combinations(names[:9], k)}
    combos |= {c for k in (1, 2, 3, len(names) - 1, len(names))
               for c in itertools.combinations(names, k)}
    seen: set[int] = set()
    for combo in sorted(combos, key=lambda c: (len(c), c)):
        k, cs = len(combo), set(combo)
        comp = regress.Comparison([gated[c] for c in combo], "BASE", "NEW", 0.95, 0.03)
        code, why = regress.gate_status(comp)
        regs, n_nj = len(reg_kinds & cs), len(nj_kinds & cs)
        want = (1 if regs else 3 if "missing" in cs or cs <= one_side else
                5 if "inconclusive" in cs else 4 if n_nj else 0)
        assert code == want, (combo, code, why)
        seen.add(code)
        line = regress_text.summary_line(comp)
        assert line.endswith(f"; the gate fails (exit {code})" if code
                             else "; the gate passes (exit 0)"), (combo, line)
        by_point = line.partition("; by point: ")[2]
        for kind, word in (("inconclusive", "1 inconclusive"),
                           ("missing", "1 missing from NEW")):
            assert (word in by_point) == (kind in combo), (combo, line)
        assert (f"{regs} regressed" in by_point) == bool(regs), (combo, line)
        # points not judged are named beside judged points; alone, the line says none was
        # (the ones run on both sides in its head, a new one after "by point")
        n_both = n_nj - ("new failed" in cs)
        if with_ratio & cs:
            assert (f"{n_nj} not judged" in by_point) == bool(n_nj), (combo, line)
        else:
            assert line.startswith(f"no point judged ({n_both} run on") == bool(n_both), line
            assert ("1 not judged" in by_point) == ("new failed" in cs), (combo, line)
        if not n_nj:
            assert "not judged" not in line, (combo, line)
        # the counts line names each point once, under one heading
        counts = regress_text.counts_line(comp)
        assert counts.startswith(f"{k} point{'s' if k != 1 else ''}: "), counts
        assert ("failed in BASE:" in counts) == bool(
            {"failed in BASE", "failed in both"} & cs), counts
        if n_nj + ("failed in both" in cs) <= 4:  # the line names 4 reasons at most
            assert ("new point, every run failed" in counts) == ("new failed" in cs), counts
        assert ("1 only in NEW" in counts) == ("new ran" in cs), counts
        if n_nj:
            assert f"{n_nj} not judged (" in counts, counts
        assert "1 failed in both" not in counts and "1 failed in BASE" not in counts
        if "no significant difference" in line:  # the mean's word, and what differs
            assert ("1 significantly faster" in by_point) == ("faster" in combo), line
        assert "significantly slower" not in line  # the slowdowns are regressions here
        # the table, the notes and the JSON agree with the status and the line
        md = regress_text.comparison_markdown(comp)
        assert md.rstrip().endswith(line) and counts in md
        for c in combo:
            row = next(r for r in md.splitlines() if r.startswith(f"| {gated[c].label} |"))
            assert ("**REGRESSION**" in row) == (c in reg_kinds), (c, row)
            assert ("not judged" in row) == (c in nj_kinds), (c, row)
        assert ("read twice" in md) == ("duplicate" in cs), combo
        assert ("environment differs: machine: GPU-aaaaaaaa vs GPU-bbbbbbbb" in md) == (
            "other machine" in cs), combo
        assert ("in none of 4 BASE runs" in md) == ("flaky NEW" in cs), combo
        assert ("not shown more often than in BASE" in md) == ("flaky both" in cs), combo
        js = regress_text.comparison_json(comp)
        assert set(js["regressions"]) == {gated[c].key for c in reg_kinds & cs}, combo
        assert js["counts"]["not_judged"] == n_nj and js["counts"]["text"] == counts
        assert js["summary"] is None or js["summary"]["text"] == line
        assert (js["summary"] is None) == (not with_ratio & cs), combo
        for jp, c in zip(js["points"], combo):
            assert jp["regression"] == (c in reg_kinds) and jp["verdict"] == gated[c].verdict
            assert (jp["judged"] is False) == (c in nj_kinds), (c, jp["judged"])
            assert (jp["failed_runs"] is not None) == (c in {"flaky NEW", "flaky more",
                                                             "flaky both"}), c
            assert jp["notes"] == gated[c].notes
        plain = regress.Comparison([plain_pts[c] for c in combo], "BASE", "NEW", 0.95)
        assert regress.gate_status(plain)[0] == 0
        pline = regress_text.summary_line(plain)
        assert "gate" not in pline and "regressed" not in pline, (combo, pline)
        if "no significant difference" in pline:
            assert ("significantly slower" in pline) == ("regressed" in combo), pline
            assert ("significantly faster" in pline) == ("faster" in combo), pline
    assert seen == {0, 1, 3, 4, 5}


def test_a_point_not_judged_fails_the_gate_beside_points_that_pass():
    """Identical code judged on 3 runs a side passes (exit 0); the same comparison with a
    second point measured once in NEW exits 4 and names that point, why it was not judged
    and that it was not shown to pass; the summary line says so."""
    kinds = _gate_points()
    (b1, n1), (b2, n2) = kinds["same"], kinds["not judged"]
    ok = regress.compare_records(b1, n1, threshold=0.03)
    assert ok.points[0].judged and regress.gate_status(ok) == (0, None)
    assert regress_text.summary_line(ok).endswith("no significant difference over 1 point "
                                                  "(geometric mean, 95% CI); the gate passes "
                                                  "(exit 0)")
    comp = regress.compare_records(b1 + b2, n1 + n2, threshold=0.03)
    code, why = regress.gate_status(comp)
    assert code == regress.EXIT_NOT_JUDGED == 4
    assert why.startswith("1 of 2 point(s) run on both sides not judged, so not shown "
                          "to pass: m fake/eager cpu fp32 b=128")
    assert "(1 run in NEW, 2 needed)" in why and "--model" in why
    line = regress_text.summary_line(comp)
    assert "no significant difference over 1 point" in line
    assert line.endswith("; by point: 1 not judged; the gate fails (exit 4)")
    js = regress_text.comparison_json(comp)
    assert js["summary"]["text"] == line and js["counts"]["not_judged"] == 1
    # a busy host on every NEW run of the second point: not judged either
    busy = [rec("p128", noisy(0.010, seed=120 + i), repeat=i, batch=128) for i in range(3)]
    for r in busy:
        r.host_cpu_wait = {"seconds": 0.2, "share": 0.2}
    comp = regress.compare_records(b1 + b2, n1 + busy, threshold=0.03)
    code, why = regress.gate_status(comp)
    assert code == 4 and "0 runs in NEW fit to judge (3 left out)" in why


def test_a_point_failing_in_base_or_on_both_sides_is_not_judged_and_fails_the_gate():
    """Beside identical code that passes, a point whose BASE runs all failed (out of memory)
    or that failed on both sides is not judged: exit 4, named with how it failed in the
    reason, the table, the not-judged list, the counts and the JSON; never a silent pass.
    Failing in NEW only stays a regression (exit 1); without a threshold nothing fails and
    the descriptive comparison leaves ``judged`` unset."""
    kinds = _gate_points()
    b1, n1 = kinds["same"]
    for kind, words in (("failed in BASE", ["failed in BASE: 3 runs oom"]),
                        ("failed in both", ["failed in BASE: 3 runs crash",
                                            "failed in NEW: 3 runs crash"])):
        b2, n2 = kinds[kind]
        comp = regress.compare_records(b1 + b2, n1 + n2, threshold=0.03)
        pc = next(p for p in comp.points if p.outcome != "compared")
        assert pc.outcome == kind and pc.judged is False and not pc.regression
        assert pc.not_judged == words and "--model" in (pc.advice or "")
        assert comp.not_judged == [pc] and len(comp.judged) == 1
        code, why = regress.gate_status(comp)
        assert code == regress.EXIT_NOT_JUDGED, (kind, why)
        assert why.startswith("1 of 2 point(s) run on both sides not judged") and words[0] in why
        md = regress_text.comparison_markdown(comp)
        assert f"| {kind}, not judged |" in md
        assert f"b=1024 synthetic: {words[0]}" in md or f"b=2048 synthetic: {words[0]}" in md
        assert f"2 points: 1 judged, 1 not judged ({words[0]}" in md
        assert f"1 {kind}" not in regress_text.counts_line(comp)  # counted once
        line = regress_text.summary_line(comp)
        assert line.endswith("; by point: 1 not judged; the gate fails (exit 4)"), line
        js = regress_text.comparison_json(comp)
        assert js["counts"]["not_judged"] == 1 and js["counts"]["judged"] == 1
        jp = next(p for p in js["points"] if p["outcome"] == kind)
        assert jp["judged"] is False and jp["not_judged"] == words
        # alone: no point judged, and the line and the status say so
        alone = regress.compare_records(b2, n2, threshold=0.03)
        assert regress.gate_status(alone) == (regress.EXIT_NOT_JUDGED, (
            "no point could be judged (1 not judged; the table says why and what would make "
            "them judgeable)"))
        assert regress_text.summary_line(alone).startswith("no point judged (1 run on both")
        # no threshold: reported, not failed, and the descriptive comparison judges nothing
        plain = regress.compare_records(b1 + b2, n1 + n2)
        assert regress.gate_status(plain) == (0, None)
        desc = regress.compare_point(pc.key, b2, n2)
        assert desc.outcome == kind and desc.judged is None and desc.not_judged == []
    b3, n3 = kinds["failed in NEW"]
    comp = regress.compare_records(b1 + b3, n1 + n3, threshold=0.03)
    assert regress.gate_status(comp)[0] == regress.EXIT_REGRESSION and comp.not_judged == []


def test_one_implementation_of_the_input_checks_the_change_text_and_the_run_cv():
    """:func:`regress.rounds_to_tell` refuses what :func:`regress.ratio_from_runs` refuses,
    with the same words; the gate's whole-percent change is :func:`regress.change_text` with
    0 decimals (the table's has 1); :func:`regress.run_cv` is the ``cv`` of
    :func:`dlperf.stats.between_run` over the finite medians."""
    from dlperf.stats import between_run

    for b, n, words in (([1.0], [1.0, 1.1], "at least 2 runs on each side"),
                        ([1.0, 1.2], [1.0], "at least 2 runs on each side"),
                        ([1.0, -1.0], [1.0, 1.1], "must be positive"),
                        ([1.0, 1.1], [0.0, 1.1], "must be positive")):
        for f in (regress.ratio_from_runs, regress.rounds_to_tell):
            with pytest.raises(ValueError, match=words):
                f(b, n)
    pc = regress.PointComparison("k", "m", [], [], ratio=2.65, ci=(0.57, 12.33))
    assert regress_text.change_text is regress.change_text
    assert regress.change_text(pc) == "+165.0% [-43.0, +1133.0]"
    assert regress.change_text(pc, 0) == "+165% [-43, +1133]"
    assert regress.pct_change(0.94) == "-6.0%" and regress.pct_change(0.94, 0) == "-6%"
    pc.ci = None
    assert regress.change_text(pc) == "compared"
    rng = np.random.default_rng(3)
    for size in (2, 3, 5, 20):
        x = list(0.01 * np.exp(0.1 * rng.standard_normal(size)))
        assert regress.run_cv(x) == pytest.approx(between_run(x)["cv"], rel=1e-12)
        assert regress.run_cv(x) == pytest.approx(np.std(x, ddof=1) / np.mean(x), rel=1e-12)
    assert regress.run_cv([0.010, float("nan"), 0.012]) == pytest.approx(
        between_run([0.010, 0.012])["cv"])
    assert regress.run_cv([0.010, float("inf")]) is None and regress.run_cv([0.01]) is None
    assert regress.run_cv([1.0, -1.0]) is None  # a mean of 0: no CV


def test_class_changes_serve_the_gate_and_the_gaps_alike():
    """:func:`dlperf.report.opclasses.class_changes`: the classes named, with time on a side,
    largest change first, shares of the total (None without one); the gate's attribution is
    it over every class seen, under BASE/NEW names."""
    from dlperf.report.opclasses import class_changes

    a, b = {"matmul": 0.004, "conv": 0.002, "idle": 0.0}, {"matmul": 0.005, "conv": 0.0,
                                                            "norm": 0.0005, "idle": 0.0}
    got = class_changes(a, b, ["conv", "matmul", "norm", "idle", "other"], 0.001)
    assert [c["class"] for c in got] == ["conv", "matmul", "norm"]
    assert got[0] == {"class": "conv", "a_s": 0.002, "b_s": 0.0, "diff_s": -0.002,
                      "share": pytest.approx(-2.0)}
    assert [c["share"] for c in class_changes(a, b, ["matmul"], None)] == [None]
    assert [c["share"] for c in class_changes(a, b, ["matmul"], 0.0)] == [None]
    base = [rec("p1", op_classes=a)]
    new = [rec("p1", op_classes=b)]
    att = regress.attribute_op_classes(base, new, 0.001)
    assert att["classes"] == [{**{k: v for k, v in c.items() if k not in ("a_s", "b_s")},
                               "base_s": c["a_s"], "new_s": c["b_s"]}
                              for c in class_changes(a, b, sorted(set(a) | set(b)), 0.001)]
    assert att["class_diff_s"] == pytest.approx(-0.0005) and att["runs"] == [1, 1]


def raw_rec(point: str, samples, repeat: int, batch: int = 8) -> RunRecord:
    """An ``ok`` record of ``point`` storing exactly ``samples`` (s) and their median as its
    summary, whatever they are (0, negative, NaN, infinite: a damaged row, a broken clock)."""
    d = rec(point, noisy(0.010, seed=99), repeat=repeat, batch=batch).to_dict()
    d["samples"] = {"measure": list(samples)}
    d["summary"] = {"median": float(np.median(samples)), "ci_low": min(samples),
                    "ci_high": max(samples)}
    return RunRecord.from_dict(d)


@pytest.mark.parametrize("bad", [0.0, -0.01, float("nan"), float("inf")])
def test_stored_times_that_are_no_measurement_are_runs_without_a_step_time(bad, tmp_path):
    """A run stored ``ok`` whose step times are 0, negative, NaN or infinite has no step time:
    it is left out of the point with a note (the others judged), all of NEW's such runs are a
    failure in NEW (exit 1, a regression), all of BASE's make the point not judged (exit 4);
    never a ValueError (through the CLI a traceback, whose exit status 1 reads as a
    regression)."""
    from cli_here import dlperf_here

    base = [rec("p1", noisy(0.010, seed=s), repeat=s) for s in range(3)]
    one = [rec("p1", noisy(0.010, seed=5), repeat=0), raw_rec("p1", [bad] * 20, 1),
           rec("p1", noisy(0.010, seed=6), repeat=2)]
    comp = regress.compare_records(base, one, threshold=0.05)
    (pc,) = comp.points
    assert pc.judged and len(pc.new_used) == 2 and regress.gate_status(comp) == (0, None)
    assert "NEW: 1 of 3 runs not used (ok without a positive step time)" in pc.notes
    allbad = [raw_rec("p1", [bad] * 20, i) for i in range(3)]
    comp = regress.compare_records(base, allbad, threshold=0.05)
    assert comp.points[0].outcome == "failed in NEW" and regress.gate_status(comp)[0] == 1
    assert comp.points[0].notes == ["failed in NEW: 3 runs ok without a positive step time"]
    comp = regress.compare_records(allbad, base, threshold=0.05)
    assert comp.points[0].not_judged == ["failed in BASE: 3 runs ok without a positive step time"]
    assert regress.gate_status(comp)[0] == regress.EXIT_NOT_JUDGED
    # a summary's positive median at odds with its finite samples': the samples' median
    # decides (non-finite samples are left out, and the summary's median stands for them)
    odd = raw_rec("p1", [bad] * 20, 1)
    odd.summary.median = 0.010
    comp = regress.compare_records(base, one[:1] + [odd] + one[2:], threshold=0.05)
    assert len(comp.points[0].new_used) == (2 if math.isfinite(bad) else 3)
    assert regress.gate_status(comp) == (0, None)
    if bad != 0:
        return  # the store reads a negative or non-finite median as a damaged row
    a, b = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    for path, runs in ((a, base), (b, one)):
        with ResultStore(path) as store:
            for r in runs:
                store.add(r)
    r = dlperf_here("compare", a, b, "--fail-if-slower", "5%", env={"COLUMNS": "400"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "1 of 3 runs not used (ok without a positive step time)" in " ".join(r.stdout.split())


def test_damaged_rows_skipped_by_the_reader_do_not_let_the_gate_pass(tmp_path):
    """BASE's three runs of one of two points damaged in the file (a stored median changed
    to -1 after its checksum): the reader skips them, so that point is only in NEW and the
    other passes; the gate exits 4 and says how many rows of which file it skipped, in the
    reason, the summary line and the JSON; a regression still outranks it (exit 1); without a
    threshold the line says so too and the status is 0."""
    import json
    import sqlite3

    from cli_here import dlperf_here

    a, b = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    for path, seed in ((a, 0), (b, 10)):
        with ResultStore(path) as store:
            for k, batch in (("p1", 8), ("p2", 16)):
                for s in range(3):
                    store.add(rec(k, noisy(0.010, seed=seed + s), repeat=s, batch=batch))
    with sqlite3.connect(a) as con:
        con.execute("UPDATE results SET step_time_median_s = -1 WHERE batch_size = 16")
    r = dlperf_here("compare", a, b, "--fail-if-slower", "5%", env={"COLUMNS": "400"})
    err, out = " ".join(r.stderr.split()), " ".join(r.stdout.split())
    assert r.returncode == regress.EXIT_NOT_JUDGED, r.stdout + r.stderr
    assert f"3 damaged row(s) of {a} skipped: the points they held are not judged" in err
    assert "1 only in NEW" in out
    assert out.endswith(f"3 damaged row(s) of {a} skipped; the gate fails (exit 4)")
    r = dlperf_here("compare", a, b, "--fail-if-slower", "5%", "--format", "json")
    assert json.loads(r.stdout)["damaged_rows"] == {a: 3} and r.returncode == 4
    r = dlperf_here("compare", a, b, env={"COLUMNS": "400"})
    assert r.returncode == 0 and " ".join(r.stdout.split()).endswith(
        f"3 damaged row(s) of {a} skipped")
    kinds = _gate_points()
    comp = regress.compare_records(*kinds["regressed"], threshold=0.03)
    comp.damaged_rows = {"a.db": 1}
    assert regress.gate_status(comp)[0] == regress.EXIT_REGRESSION
    comp = regress.compare_records(*kinds["same"], threshold=0.03)
    assert regress.gate_status(comp) == (0, None)
    comp.damaged_rows = {"a.db": 1, "b.db": 2}
    code, why = regress.gate_status(comp)
    assert code == 4 and why.startswith("1 damaged row(s) of a.db skipped; 2 damaged row(s) "
                                        "of b.db skipped: the points")


def hardware_runs(seed: int, gpu: str, cpu: str = "cpu", median: float = 0.010,
                  torch: str | None = None) -> list[RunRecord]:
    """Three runs of point p1 on a host with GPU model ``gpu`` and CPU model ``cpu`` (and
    PyTorch version ``torch``)."""
    out = []
    for s in range(3):
        d = rec("p1", noisy(median, seed=seed + s), repeat=s).to_dict()
        d["env"]["gpus"] = [{"name": gpu, "driver": "550.54", "uuid": f"GPU-{seed:08d}"}]
        d["env"]["cpu_model"] = cpu
        if torch is not None:
            d["versions"] = {"framework": "torch", "torch": torch}
        out.append(RunRecord.from_dict(d))
    return out


def test_a_base_from_other_hardware_is_not_judged_and_another_version_is():
    """BASE measured on an H100 and NEW on an H200 20% faster: the ratio is the GPUs', so the
    gate does not judge the point (exit 4, naming both GPUs and what would judge it) instead
    of passing it as faster (which would hide a regression of up to 20%); another CPU model
    likewise; another PyTorch version on the same hardware is judged (a dependency's upgrade
    is a change to gate), with a note; without a threshold the hardware is only noted."""
    base = hardware_runs(0, "NVIDIA H100 80GB HBM3")
    comp = regress.compare_records(base, hardware_runs(10, "NVIDIA H200", median=0.008),
                                   threshold=0.05)
    (pc,) = comp.points
    assert pc.judged is False and pc.verdict == "not judged" and pc.ratio == pytest.approx(
        0.8, rel=0.01)
    assert pc.not_judged == ["other hardware: gpu: NVIDIA H100 80GB HBM3 vs NVIDIA H200"]
    assert "dlperf compare --run" in pc.advice
    assert regress.gate_status(comp)[0] == regress.EXIT_NOT_JUDGED
    assert regress.hardware_differences(base, base) == []
    comp = regress.compare_records(hardware_runs(0, "NVIDIA H100", "Xeon 8480"),
                                   hardware_runs(10, "NVIDIA H100", "EPYC 9654"), threshold=0.05)
    assert comp.points[0].not_judged == ["other hardware: cpu_model: Xeon 8480 vs EPYC 9654"]
    assert regress.gate_status(comp)[0] == regress.EXIT_NOT_JUDGED
    # one side's runs on two GPU models: not the other side's hardware either
    mixed = hardware_runs(0, "NVIDIA H100")[:2] + hardware_runs(20, "NVIDIA H200")[2:]
    assert regress.hardware_differences(mixed, hardware_runs(10, "NVIDIA H100")) == [
        "gpu: NVIDIA H100 / NVIDIA H200 vs NVIDIA H100"]
    # too few runs and other hardware: both reasons, both pieces of advice
    comp = regress.compare_records(base[:1], hardware_runs(10, "NVIDIA H200"), threshold=0.05)
    assert comp.points[0].not_judged == ["1 run in BASE, 2 needed",
                                         "other hardware: gpu: NVIDIA H100 80GB HBM3 vs NVIDIA "
                                         "H200"]
    assert "--repeats 3" in comp.points[0].advice and "on one machine" in comp.points[0].advice
    comp = regress.compare_records(hardware_runs(0, "NVIDIA H100", torch="2.4.1"),
                                   hardware_runs(10, "NVIDIA H100", torch="2.5.0"),
                                   threshold=0.05)
    assert comp.points[0].judged and regress.gate_status(comp) == (0, None)
    assert "environment differs: framework: torch 2.4.1 vs torch 2.5.0" in comp.points[0].notes
    # without a threshold comparing two GPUs is the report's question: judged, with a note
    plain = regress.compare_records(base, hardware_runs(10, "NVIDIA H200", median=0.008))
    assert plain.points[0].judged and plain.points[0].verdict == "faster"
    assert "environment differs: gpu: NVIDIA H100 80GB HBM3 vs NVIDIA H200" in plain.points[0].notes


def fisher_greater(kb: int, nb: int, kn: int, nn: int) -> float:
    """P(NEW has kn or more of the kb + kn failures) with both margins fixed: the
    hypergeometric upper tail (Agresti 2002, section 3.5.1), written out to check
    :func:`regress.failure_test`."""
    k, n = kb + kn, nb + nn
    return sum(math.comb(nn, x) * math.comb(nb, k - x)
               for x in range(kn, min(k, nn) + 1)) / math.comb(n, k)


def test_failure_test_is_fishers_one_sided_exact_test():
    for kb, nb, kn, nn in ((1, 10, 6, 10), (1, 4, 1, 4), (0, 6, 4, 7), (2, 5, 0, 5),
                           (3, 3, 3, 3)):
        assert regress.failure_test(kb, nb, kn, nn) == pytest.approx(
            fisher_greater(kb, nb, kn, nn), rel=1e-9)
    assert regress.failure_test(1, 10, 6, 10) == pytest.approx(0.02864, abs=1e-5)
    with pytest.raises(ValueError, match="failed runs must be in"):
        regress.failure_test(4, 3, 0, 3)


def flaky(point: str, ok: int, failed: int, seed: int, batch: int = 8,
          median: float = 0.010, how: str = "oom") -> list[RunRecord]:
    """``ok`` measured runs of ``point`` then ``failed`` runs with status ``how``."""
    return ([rec(point, noisy(median, seed=seed + i), repeat=i, batch=batch) for i in range(ok)]
            + [rec(point, status=how, repeat=ok + i, batch=batch) for i in range(failed)])


def test_failures_in_some_new_runs_are_a_regression_unless_base_failed_as_often():
    """1 OOM in 5 NEW runs where BASE's 5 all measured: a regression (exit 1) though the runs
    that measured are not slower, named with how it failed in the reason, the table, the
    JSON and the summary line; its step time, judged, stays in the mean. With too few NEW
    runs left to judge the step time it is still a regression, its step time only
    described. Where BASE failed too, Fisher's exact test at the gate's level decides: 6 of
    10 against 1 of 10 (p = 0.029) regresses at 95% and, at 99%, is judged on its step time;
    1 of 4 on both sides is judged on its step time, with a note of both counts. Without a
    threshold only the note."""
    base, new = flaky("p1", 5, 0, 0), flaky("p1", 4, 1, 10)
    comp = regress.compare_records(base, new, threshold=0.05)
    (pc,) = comp.points
    text = "failed in 1 of 5 NEW runs (1 run oom), in none of 5 BASE runs"
    assert pc.regression and pc.judged and not pc.significant and pc.ci_from == "runs"
    assert pc.verdict == "failed in some NEW runs" and text in pc.notes
    code, why = regress.gate_status(comp)
    assert code == regress.EXIT_REGRESSION and why.endswith(f"b=8 synthetic ({text})")
    md = regress_text.comparison_markdown(comp)
    assert "| runs | failed in some NEW runs **REGRESSION** |" in md and text in md
    assert "1 point: 1 judged (1 regression)" in md
    line = regress_text.summary_line(comp)
    assert line.startswith("NEW takes 1.0") and "over 1 point" in line
    assert line.endswith("; by point: 1 regressed; the gate fails (exit 1)")
    js = regress_text.comparison_json(comp)
    assert js["regressions"] == ["p1"] and js["summary"]["text"] == line
    assert js["points"][0]["failed_runs"] == {"base": [0, 5], "new": [1, 5], "p": None,
                                              "regression": True, "text": text}
    # one NEW run left that measured: the step time is not judged, the failure is
    comp = regress.compare_records(base, flaky("p1", 1, 1, 10), threshold=0.05)
    (pc,) = comp.points
    assert pc.regression and pc.judged and pc.not_judged == [] and pc.ci is None
    assert any(n.startswith("step time not judged (1 run in NEW, 2 needed): ")
               for n in pc.notes), pc.notes
    assert comp.summary is None and comp.not_judged == [] and regress.gate_status(comp)[0] == 1
    assert regress_text.counts_line(comp) == "1 point: 1 judged (1 regression)"
    # BASE failed too: NEW's failed share judged by Fisher's exact test
    base, new = flaky("p1", 9, 1, 0), flaky("p1", 4, 6, 10)
    comp = regress.compare_records(base, new, threshold=0.05)
    (pc,) = comp.points
    p = fisher_greater(1, 10, 6, 10)
    assert pc.regression and pc.failed_runs["p"] == pytest.approx(p) and p < 0.05
    assert (f"failed in 6 of 10 NEW runs (6 runs oom), more often than in BASE (1 of 10: 1 "
            f"run oom; Fisher's exact test, one-sided p = {p:.2g})") in pc.notes
    assert regress.gate_status(comp)[0] == 1
    at99 = regress.compare_records(base, new, threshold=0.05, level=0.99)
    assert not at99.points[0].regression and regress.gate_status(at99) == (0, None)
    assert at99.points[0].verdict == "no significant change"
    assert "not shown more often than in BASE" in at99.points[0].failed_runs["text"]
    base, new = flaky("p1", 3, 1, 0), flaky("p1", 3, 1, 10, how="crash")
    comp = regress.compare_records(base, new, threshold=0.05)
    (pc,) = comp.points
    assert not pc.regression and pc.judged and regress.gate_status(comp) == (0, None)
    assert pc.failed_runs["text"] == (
        "failed in 1 of 4 NEW runs (1 run crash), not shown more often than in BASE (1 of 4: "
        "1 run oom; Fisher's exact test, one-sided p = 0.79 >= 0.05): the step time is "
        "judged on the runs that measured")
    md = regress_text.comparison_markdown(comp)
    assert "| no significant change |" in md and "not shown more often" in md
    # without a threshold: reported, not a regression
    plain = regress.compare_records(flaky("p1", 5, 0, 0), flaky("p1", 4, 1, 10))
    assert not plain.points[0].regression and regress.gate_status(plain) == (0, None)
    assert plain.points[0].failed_runs["regression"] is False
    assert "in none of 5 BASE runs" in " ".join(plain.points[0].notes)


def test_a_new_point_whose_every_run_failed_is_not_judged():
    """A point only in NEW whose runs all failed fails the gate with exit 4 (nothing shows it
    passes), named in the reason, the table, the not-judged list, the counts, the summary
    line and the JSON; a new point that ran is only noted (exit 0); alone (no point in
    common) the gate exits 3."""
    b1, n1 = flaky("p1", 3, 0, 0), flaky("p1", 3, 0, 10)
    dead, ran = flaky("p2", 0, 3, 0, batch=16), flaky("p3", 2, 0, 20, batch=32)
    comp = regress.compare_records(b1, n1 + dead + ran, threshold=0.05)
    by = {p.key: p for p in comp.points}
    assert by["p2"].outcome == "only in NEW" and by["p2"].judged is False
    assert by["p2"].not_judged == ["new point, every run failed (3 runs oom)"]
    assert by["p3"].outcome == "only in NEW" and by["p3"].judged is None
    assert comp.not_judged == [by["p2"]] and len(comp.judged) == 1
    code, why = regress.gate_status(comp)
    assert code == regress.EXIT_NOT_JUDGED and why.startswith(
        "1 new point(s) not judged, so not shown to pass: m fake/eager cpu fp32 b=16 synthetic "
        "(new point, every run failed (3 runs oom))")
    md = regress_text.comparison_markdown(comp)
    assert "| only in NEW, not judged |" in md and "| only in NEW |" in md
    assert "b=16 synthetic: new point, every run failed (3 runs oom). To judge it:" in md
    assert ("3 points: 1 judged, 1 not judged (new point, every run failed (3 runs oom)), "
            "1 only in NEW") in md
    line = regress_text.summary_line(comp)
    assert line.endswith("; by point: 1 not judged; the gate fails (exit 4)")
    js = regress_text.comparison_json(comp)
    jp = next(p for p in js["points"] if p["point_key"] == "p2")
    assert jp["judged"] is False and js["counts"]["not_judged"] == 1
    assert regress.gate_status(regress.compare_records(b1, n1 + ran, threshold=0.05)) == (0, None)
    alone = regress.compare_records(flaky("p9", 3, 0, 0, batch=64), dead, threshold=0.05)
    assert regress.gate_status(alone)[0] == regress.EXIT_MISSING
    line = regress_text.summary_line(alone)
    assert "by point: 1 missing from NEW, 1 not judged" in line and "run on both" not in line


def test_a_run_read_twice_into_one_side_is_counted_once(tmp_path):
    """BASE's first run read twice (the same record, or an identical row stored twice in the
    file): counted once, with a note; the interval is the one of the runs without the copy,
    which counted twice would narrow it."""
    base, new = flaky("p1", 3, 0, 0), flaky("p1", 3, 0, 10)
    once = regress.compare_records(base, new, threshold=0.05).points[0]
    copy = RunRecord.from_dict(base[0].to_dict())
    twice = regress.compare_records(base + [copy], new, threshold=0.05).points[0]
    assert twice.ci == once.ci and twice.ratio == once.ratio and len(twice.base_used) == 3
    assert ("BASE: 1 run(s) read twice (an identical stored row: the same run key, time and "
            "result) counted once") in twice.notes
    m = [regress.run_median_s(r) for r in base + [copy]]
    naive = regress.ratio_from_runs(m, [regress.run_median_s(r) for r in new])
    assert naive[2] - naive[1] < once.ci[1] - once.ci[0]  # what counting it twice would do
    assert len(twice.base) == 3
    # an identical row stored twice in a results file: two row ids, one run
    a = str(tmp_path / "a.db")
    with ResultStore(a) as store:
        for r in base + [base[0]]:
            store.add(r)
    with ResultStore(a, read_only=True) as store:
        recs = store.records(latest=False)
    assert len(recs) == 4 and len({r.stored.id for r in recs}) == 4
    pc = regress.compare_records(recs, new, threshold=0.05).points[0]
    assert pc.ci == pytest.approx(once.ci) and any("read twice" in n for n in pc.notes)
    # two runs differing only in time are two runs, as are two of one run key and time
    # whose results differ
    other = rec("p1", noisy(0.010, seed=0), repeat=0, created="2026-01-02T00:00:00+00:00")
    assert len(regress.compare_records(base + [other], new).points[0].base_used) == 4
    alike = rec("p1", noisy(0.010, seed=77), repeat=0)
    assert regress.run_identity(alike) != regress.run_identity(base[0])
    pc = regress.compare_records(base + [alike], new).points[0]
    assert len(pc.base_used) == 4 and not any("read twice" in n for n in pc.notes)


def test_older_code_left_out_on_both_sides_keeps_both_notes():
    """A ``file:`` model edited and measured again on both sides: each side's runs of older
    code are left out, and the point carries BASE's note and NEW's, each with its count."""
    def coded(code: str, day: int, seeds: range) -> list[RunRecord]:
        out = []
        for i in seeds:
            d = rec("p1", noisy(0.010, seed=i), repeat=i,
                    created=f"2026-01-0{day}T00:00:0{i % 10}+00:00").to_dict()
            d["spec"] = {"code": code}
            out.append(RunRecord.from_dict(d))
        return out

    base = coded("c0", 1, range(1)) + coded("c1", 2, range(1, 4))
    new = coded("c1", 3, range(4, 6)) + coded("c2", 4, range(6, 9))
    p = regress.compare_records(base, new, threshold=0.05).points[0]
    assert "BASE: 1 run(s) of older code of the model left out (its newest runs are of code c1)" \
        in p.notes
    assert "NEW: 2 run(s) of older code of the model left out (its newest runs are of code c2)" \
        in p.notes
    assert len(p.base_used) == 3 and len(p.new_used) == 3


def test_the_counts_line_counts_the_reasons_it_does_not_name():
    """Six points not judged, each for its own reason: the counts line names the first
    ``MAX_REASONS`` (4) and says ``+2 more``; the report's Not judged list names all six.
    At four reasons, all are named and nothing is counted."""
    def comp_of(n: int) -> regress.Comparison:
        pts = [regress.PointComparison(f"p{i}", f"m{i} b=8", [], [], judged=False,
                                       not_judged=[f"reason {i}"]) for i in range(n)]
        return regress.Comparison(pts, "BASE", "NEW", threshold=0.05)

    line = regress_text.counts_line(comp_of(6))
    assert regress_text.MAX_REASONS == 4
    assert line == ("6 points: 0 judged, 6 not judged (reason 0; reason 1; reason 2; reason 3; "
                    "+2 more (see the Not judged list))"), line
    md = regress_text.comparison_markdown(comp_of(6))
    assert all(f"- m{i} b=8: reason {i}." in md for i in range(6)), md
    four = regress_text.counts_line(comp_of(4))
    assert four.endswith("(reason 0; reason 1; reason 2; reason 3)") and "more" not in four


def test_another_machine_of_the_same_models_is_judged_with_its_note_everywhere():
    """BASE and NEW on two machines with the same GPU and CPU models: judged (exit 0), the
    machines named in the notes of the table and of the JSON."""
    comp = regress.compare_records(hardware_runs(0, "NVIDIA H100"),
                                   hardware_runs(10, "NVIDIA H100"), threshold=0.05)
    (pc,) = comp.points
    note = "environment differs: machine: GPU-00000000 vs GPU-00000010"
    assert pc.judged and regress.gate_status(comp) == (0, None) and note in pc.notes
    assert f"b=8 synthetic: {note}" in regress_text.comparison_markdown(comp)
    assert note in regress_text.comparison_json(comp)["points"][0]["notes"]


def test_the_cli_exits_1_on_an_oom_in_one_new_round_and_says_so(tmp_path):
    """Through ``dlperf compare``: BASE's 5 runs measured, NEW's 4 of 5 (one OOM, the
    others as fast): exit 1, the failure named on stderr and in the JSON."""
    import json

    from cli_here import dlperf_here

    a, b = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    for path, runs in ((a, flaky("p1", 5, 0, 0)), (b, flaky("p1", 4, 1, 10))):
        with ResultStore(path) as store:
            for r in runs:
                store.add(r)
    r = dlperf_here("compare", a, b, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == regress.EXIT_REGRESSION, r.stdout + r.stderr
    err = " ".join(r.stderr.split())
    assert "(failed in 1 of 5 NEW runs (1 run oom), in none of 5 BASE runs)" in err
    js = json.loads(r.stdout)
    assert js["regressions"] == ["p1"] and js["points"][0]["failed_runs"]["new"] == [1, 5]
    assert js["summary"]["text"].endswith("by point: 1 regressed; the gate fails (exit 1)")

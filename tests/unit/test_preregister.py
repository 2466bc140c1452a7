"""benchmarks/h200/preregister.py: the registrations' plans match their sweep files and name
no stored point, and the judge reads a measured file (a fake one built from stored rows)
without predicting again."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REG3 = ROOT / "benchmarks/results/h200/registered/registration3.db"
CAL2 = ROOT / "benchmarks/results/h200/calibration2.db"


def _mod():
    spec = importlib.util.spec_from_file_location("preregister",
                                                  ROOT / "benchmarks/h200/preregister.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pr():
    return _mod()


def test_the_module_docstring_counts_and_names_every_plan(pr):
    """The docstring's opening says how many registrations :data:`PLANS` holds and names each
    with its sweep file, so a new plan without its words fails here."""
    count = {4: "Four", 5: "Five", 6: "Six", 7: "Seven", 8: "Eight"}[len(pr.PLANS)]
    opening = pr.__doc__.split("\n\n")[1]
    names = sorted(pr.PLANS)
    assert opening.startswith(f"{count} registrations, ``{names[0]}`` to ``{names[-1]}``"), \
        opening
    for name, plan in pr.PLANS.items():
        assert f"``{name}``" in pr.__doc__, name
        assert Path(plan["sweep"]).name in pr.__doc__, (name, plan["sweep"])


def _again(pr) -> tuple[str, ...]:
    """The files that measure registered points again after their registration
    (``pr.REPEATS``): a repeat of a point, not a file that held it before it was predicted."""
    return tuple(str(f.relative_to(ROOT)) for f in (ROOT / pr.REPEATS).rglob("*.db"))


@pytest.mark.parametrize("name", ["registration4", "registration5", "registration6",
                                  "registration7", "registration8"])
def test_plan_is_its_sweep_and_holds_no_stored_point(pr, name):
    plan = pr.PLANS[name]
    keys = sorted(tuple(p[k] for k in pr.KEY) for p in plan["points"])
    assert keys == sorted(pr.sweep_points(ROOT / plan["sweep"]))
    assert len(set(keys)) == len(keys)
    held = plan.get("held", pr.SOURCES)
    # once measured, the plan's own file holds its points: every other file must not
    own = (plan["measured"],) if (ROOT / plan.get("measured", "-")).exists() else ()
    assert not pr.stored_points(held, exclude=own + _again(pr)) & set(keys)
    if own:
        assert pr.stored_points([plan["measured"]]) == set(keys)
    else:
        assert not pr.refuse_stored(plan["points"], held)
    sides = {pr.side(p["model"]) for p in plan["points"]}
    assert sides == {"dev", "test"}


def test_stored_points_sees_a_stored_point(pr):
    # the guard above is only worth something if it finds what is stored
    held = pr.stored_points(pr.SOURCES)
    assert ("resnet50", "torch", "eager", "bf16", 96) in held  # registration3's point
    assert ("fcn8", "torch", "graph", "bf16", 1024) in held


def _fake_db(tmp_path, renames):
    """A results file of stored rows renamed to registered points: ``renames`` is a list of
    ``(source file, result id, new identity fields)``; returns its path and the medians."""
    from dlperf.results import timelines
    from dlperf.results.parts import Timeline
    from dlperf.results.store import ResultStore, record_of
    from dlperf.results.view import median_s

    out = tmp_path / "fake.db"
    medians = {}
    with ResultStore(out) as dst:
        for i, (src, rid, new) in enumerate(renames):
            with ResultStore(src, read_only=True) as s:
                row = next(r for r in s.rows(latest=False) if r["id"] == rid)
                rec = record_of(row, s.samples(rid))
                tl = timelines.load(s, rid)
            ident = rec.identity.model_copy(update={**new, "run_key": f"fake{i}",
                                                    "point_key": f"fake{i}"})
            rec = rec.model_copy(update={"identity": ident,
                                         "timeline": Timeline.model_validate(tl) if tl else None})
            dst.add(rec)
            medians[tuple(new[k] for k in ("model", "framework", "mode", "precision",
                                           "batch_size"))] = median_s(rec)
    return out, medians


def _reg(points):
    return {"registration": "fake", "made_at_commit": "0" * 40, "made_at_utc": "x",
            "dlperf_version": "0", "points": points}


def test_judge_reads_the_measured_file_and_scores_each_method(pr, tmp_path):
    db, med = _fake_db(tmp_path, [
        (REG3, 1, {"model": "vgg16", "framework": "torch", "mode": "eager",
                   "precision": "bf16", "batch_size": 8}),
        (REG3, 2, {"model": "fcn8", "framework": "torch", "mode": "graph",
                   "precision": "bf16", "batch_size": 2048})])
    m_vgg = med[("vgg16", "torch", "eager", "bf16", 8)]
    m_fcn = med[("fcn8", "torch", "graph", "bf16", 2048)]
    assert m_vgg and m_fcn and m_vgg != m_fcn
    pts = [
        {"model": "vgg16", "framework": "torch", "mode": "eager", "precision": "bf16",
         "batch_size": 8, "category": "extrapolation down", "side": "dev", "predictions": [
             {"method": "a", "category": "x", "predicted_s": m_vgg * 1.10,
              "interval_s": [m_vgg * 0.9, m_vgg * 1.2]},
             {"method": "b", "category": "y", "predicted_s": m_vgg * 0.80,
              "interval_s": [m_vgg * 0.7, m_vgg * 0.95]}]},
        {"model": "fcn8", "framework": "torch", "mode": "graph", "precision": "bf16",
         "batch_size": 2048, "category": "one-point series, 2x", "side": "test",
         "predictions": [{"method": "a", "category": "x", "predicted_s": m_fcn * 1.30,
                          "interval_s": [m_fcn * 0.5, m_fcn * 1.5]}]},
        # measured in no file: kept, marked not measured
        {"model": "lstm", "framework": "torch", "mode": "graph", "precision": "fp32",
         "batch_size": 32, "category": "eager -> graph", "side": "dev",
         "predictions": [{"method": "a", "category": "x", "predicted_s": 1.0,
                          "interval_s": [0.5, 2.0]}]},
        # a refused prediction: no number, no error
        {"model": "vgg16", "framework": "torch", "mode": "eager", "precision": "bf16",
         "batch_size": 8, "category": "extrapolation down", "side": "dev",
         "predictions": [{"method": "c", "refused": ["no"]}]},
    ]
    rows = pr.judge(_reg(pts), str(db))
    assert len(rows) == 5
    a, b, c_fcn, lstm, refused = rows
    assert a["measured_s"] == pytest.approx(m_vgg)
    assert a["error_pct"] == pytest.approx(10.0)
    assert a["inside"] is True
    assert b["error_pct"] == pytest.approx(-20.0)
    assert b["inside"] is False
    assert c_fcn["measured_s"] == pytest.approx(m_fcn)
    assert c_fcn["error_pct"] == pytest.approx(30.0)
    assert lstm["measured_s"] is None and lstm["error_pct"] is None and lstm["inside"] is None
    assert refused["predicted_s"] is None and refused["error_pct"] is None
    assert [r["primary"] for r in rows] == [True, False, True, True, True]
    summ = "\n".join(pr.summary(rows))
    # one row per category, method and side; the goal judged for the registered method only
    assert "| extrapolation down | a | yes | dev | 1 | 10.0% | 10.0% | 1/1 | <= 5%: not met |" \
        in summ
    assert "| one-point series, 2x | a | yes | test | 1 | 30.0% | 30.0% | 1/1 | <= 8%: not met |" \
        in summ
    assert "| extrapolation down | b | baseline | dev | 1 | 20.0% | 20.0% | 0/1 | - |" in summ
    assert "| all |" not in summ  # no category holds both sides here
    tab = "\n".join(pr.table(rows))
    assert "not measured" in tab and "refused" in tab


def test_judge_adds_each_traced_points_own_replay(pr, tmp_path):
    from dlperf.perfmodel import replay

    with __import__("sqlite3").connect(CAL2) as con:
        rid = con.execute("SELECT r.id FROM results r JOIN timelines t ON t.result_id = r.id "
                          "WHERE r.model = 'lstm' AND r.mode = 'eager' AND r.precision = "
                          "'fp32' AND r.batch_size = 64 AND r.status = 'ok'").fetchone()[0]
    db, med = _fake_db(tmp_path, [(CAL2, rid, {"model": "lstm", "framework": "torch",
                                               "mode": "eager", "precision": "fp32",
                                               "batch_size": 96})])
    reg = _reg([{"model": "lstm", "framework": "torch", "mode": "eager", "precision": "fp32",
                 "batch_size": 96, "category": "batch, one trace", "side": "dev",
                 "predictions": [{"method": "a", "predicted_s": 0.01,
                                  "interval_s": [0.005, 0.02]}]}])
    rows = pr.own_trace_rows(reg, str(db))
    assert len(rows) == 1 and rows[0]["registered"] is False
    (pt, st), = replay.load_traces(str(db))
    assert rows[0]["predicted_s"] == pytest.approx(replay.replay_own(pt, st).step_s)
    assert rows[0]["measured_s"] == pytest.approx(med[("lstm", "torch", "eager", "fp32", 96)])
    # a point the registration does not hold gives no row
    assert pr.own_trace_rows(_reg([]), str(db)) == []


def test_registering_twice_is_refused(pr, tmp_path):
    out = tmp_path / "r.json"
    out.write_text(json.dumps({}))
    with pytest.raises(SystemExit, match="registered once"):
        pr.register("registration4", out)


def test_one_trace_methods_pool_by_direction(pr):
    p = {"batch_size": 48}
    assert pr.method_group(p, {"method": "replay, one trace (b=32)"}) == \
        "replay, one trace from below"
    assert pr.method_group(p, {"method": "replay, one trace (b=64)"}) == \
        "replay, one trace from above"
    assert pr.method_group(p, {"method": "dlperf predict (series)"}) == "dlperf predict (series)"
    rows = [{"category": "batch, one trace", "side": s, "method": m, "group": g,
             "primary": True, "error_pct": e, "inside": True}
            for s, m, g, e in [("dev", "x", "replay, one trace from below", 4.0),
                               ("dev", "y", "replay, one trace from above", -10.0),
                               ("test", "z", "replay, one trace from below", 2.0)]]
    summ = "\n".join(pr.summary(rows))
    assert "| replay, one trace (both directions) | yes | all | 3 | 4.0% | 10.0% | 3/3 |" \
        " <= 6%: met |" in summ
    assert "| replay, one trace from above | yes | dev | 1 | 10.0% | 10.0% | 1/1 |" \
        " <= 6%: not met |" in summ


def test_graph_signs_count_against_the_stored_eager_step(pr, tmp_path):
    eager, med = _fake_db(tmp_path, [
        (REG3, 1, {"model": "lstm", "framework": "torch", "mode": "eager",
                   "precision": "fp32", "batch_size": 32}),
        (REG3, 2, {"model": "fcn5", "framework": "torch", "mode": "eager",
                   "precision": "bf16", "batch_size": 256})])
    e1 = med[("lstm", "torch", "eager", "fp32", 32)]
    e2 = med[("fcn5", "torch", "eager", "bf16", 256)]
    a = pr.eager_anchor({"model": "lstm", "framework": "torch", "precision": "fp32",
                         "batch_size": 32}, [str(eager)])
    assert a is not None and a[0] == pytest.approx(e1)
    assert pr.eager_anchor({"model": "lstm", "framework": "torch", "precision": "bf16",
                            "batch_size": 32}, [str(eager)]) is None

    def row(model, prec, b, measured, group, pred):
        return {"model": model, "framework": "torch", "mode": "graph", "precision": prec,
                "batch_size": b, "category": "eager -> graph", "group": group,
                "measured_s": measured, "measured_ci_rel": 0.0, "predicted_s": pred}

    rows = [row("lstm", "fp32", 32, e1 * 0.8, "A", e1 * 0.9),   # faster; A right
            row("lstm", "fp32", 32, e1 * 0.8, "B", e1 * 1.1),   # B wrong
            row("fcn5", "bf16", 256, e2 * 1.01, "A", e2 * 0.5),  # within noise: not counted
            row("fcn5", "bf16", 256, e2 * 1.01, "B", e2 * 1.2)]
    out = pr.graph_signs(rows, [str(eager)])
    assert out[-1] == ('Signs right beyond the noise, of 1: A 1, B 0; the rule "compiled is '
                       'always faster" 1')
    assert any("| fcn5 |" in ln and "no (noise)" in ln for ln in out)


def test_a_failed_point_is_said_failed_not_missing(pr, tmp_path):
    from dlperf.results.store import ResultStore, record_of

    with ResultStore(REG3, read_only=True) as s:
        row = next(r for r in s.rows(latest=False) if r["id"] == 1)
        rec = record_of(row, None)
    ident = rec.identity.model_copy(update={
        "model": "fcn5", "mode": "graph", "batch_size": 256, "run_key": "bad",
        "point_key": "bad", "status": "error", "error": "RuntimeError: out of memory\nmore"})
    db = tmp_path / "failed.db"
    with ResultStore(db) as dst:
        dst.add(rec.model_copy(update={"identity": ident}))
    reg = _reg([{"model": "fcn5", "framework": "torch", "mode": "graph", "precision": "bf16",
                 "batch_size": 256, "category": "eager -> graph", "side": "dev",
                 "predictions": [{"method": "a", "predicted_s": 0.002,
                                  "interval_s": [0.001, 0.003]}]}])
    (r,) = pr.judge(reg, str(db))
    assert r["measured_s"] is None and r["error_pct"] is None
    assert "out of memory" in r["failed"]
    assert "| failed: RuntimeError: out of memory |" in "\n".join(pr.table([r]))


H100 = ["benchmarks/results/h100/suite.db", "benchmarks/results/h100/suite_extra.db",
        "benchmarks/results/h100/suite_jax.db"]


def test_registration6_refuses_a_point_the_h100_files_hold(pr, monkeypatch, tmp_path):
    # suite_extra.db holds resnet50 torch eager bf16 b=32 (measured on the H100)
    held = pr._pt("resnet50", "torch", "eager", "bf16", 32, "x", [], "")
    free = pr._pt("resnet50", "torch", "eager", "bf16", 48, "x", [], "")
    assert pr.refuse_stored([held, free], H100) == {("resnet50", "torch", "eager", "bf16",
                                                     32)}
    assert pr.refuse_stored([free], H100) == set()
    monkeypatch.setitem(pr.PLANS, "fake6", {"sweep": "x.yaml", "held": H100,
                                            "points": [held, free]})
    monkeypatch.setattr(pr, "sweep_points", lambda _: [tuple(p[k] for k in pr.KEY)
                                                       for p in (held, free)])
    with pytest.raises(SystemExit, match="already stored in benchmarks/results/h100/suite"):
        pr.register("fake6", tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()


def test_registration6_writes_to_the_h100_results(pr):
    plan = pr.PLANS["registration6"]
    assert plan["out"] == "benchmarks/results/h100/registration6.json"
    assert plan["gpu"] == "h100" and plan["device"] == "H100"
    cats = {p["category"] for p in plan["points"]}
    assert all(c.endswith("H200 -> H100") and c in pr.GOALS for c in cats)
    # every point carries the user's --gpu h100 answer and both baselines
    for p in plan["points"]:
        names = [m["name"] for m in p["methods"]]
        assert pr.GPU_H100["name"] in names and pr.STEP_H100["name"] in names
        assert pr.NAIVE_H200["name"] in names


def test_judge_refuses_a_point_measured_on_another_gpu(pr, tmp_path):
    db, med = _fake_db(tmp_path, [
        (REG3, 1, {"model": "resnet50", "framework": "torch", "mode": "eager",
                   "precision": "bf16", "batch_size": 48})])  # measured on an H200
    m = med[("resnet50", "torch", "eager", "bf16", 48)]
    pt = {"model": "resnet50", "framework": "torch", "mode": "eager", "precision": "bf16",
          "batch_size": 48, "category": "fp32 -> bf16, H200 -> H100", "side": "dev",
          "predictions": [{"method": "a", "predicted_s": m * 1.05,
                           "interval_s": [m * 0.9, m * 1.1]}]}
    (r,) = pr.judge({**_reg([pt]), "device": "H100"}, str(db))
    assert r["measured_s"] is None and r["error_pct"] is None
    assert "not the registered H100" in r["failed"] and "H200" in r["failed"]
    (r,) = pr.judge({**_reg([pt]), "device": "H200"}, str(db))
    assert r["measured_s"] == pytest.approx(m) and r["error_pct"] == pytest.approx(5.0)
    assert r["inside"] is True
    assert pr.on_device("NVIDIA H100 80GB HBM3", "H100")
    assert not pr.on_device("NVIDIA H200", "H100") and pr.on_device(None, None)


def test_precision_signs_of_a_pair_measured_in_both_precisions(pr):
    def row(prec, measured, group, pred, model="resnet50"):
        return {"model": model, "framework": "torch", "mode": "eager", "precision": prec,
                "batch_size": 48, "group": group, "measured_s": measured,
                "measured_ci_rel": 0.0, "predicted_s": pred, "registered": True}

    rep = "replay fp32 -> bf16, H200 -> H100"
    rows = [row("bf16", 0.020, "A", 0.021), row("fp32", 0.050, "A", 0.040),   # A right
            row("bf16", 0.020, "B", 0.060), row("fp32", 0.050, "B", 0.055),   # B wrong
            row("bf16", 0.020, rep, 0.030), row("fp32", 0.050, pr.GPU_H100["name"], 0.040),
            # lstm: within the noise (+1%): shown, not counted
            row("bf16", 0.0101, "A", 0.005, "lstm"), row("fp32", 0.0100, "A", 0.010, "lstm"),
            # a bf16 point without its fp32 pair gives no row
            row("bf16", 0.03, "A", 0.03, "fcn8")]
    out = pr.precision_signs(rows)
    assert any("| resnet50 |" in ln and "-60.0%" in ln and "-47.5% (right)" in ln
               and "+9.1% (wrong)" in ln and "-25.0% (right)" in ln for ln in out)
    assert any("| lstm |" in ln and "no (noise)" in ln for ln in out)
    assert not any("| fcn8 |" in ln for ln in out)
    assert out[-1] == ("fp32 -> bf16 signs right beyond the noise, of 1: A 1, B 0, "
                       "replay fp32 -> bf16, H200 -> H100 / --gpu h100 1; the rule "
                       "\"bf16 is always faster\" 1")
    assert pr.precision_signs([row("bf16", 0.02, "A", 0.02)]) == []


def test_registration7_holds_no_h100_or_h200_point_and_pairs_its_precisions(pr):
    plan = pr.PLANS["registration7"]
    assert plan["out"] == "benchmarks/results/h100/registration7.json"
    assert plan["gpu"] == "h100" and plan["device"] == "H100"
    # no committed H100 file, registration6's measured one included, holds a point either
    keys = {tuple(p[k] for k in pr.KEY) for p in plan["points"]}
    own = (plan["measured"],) if (ROOT / plan["measured"]).exists() else ()
    assert not pr.stored_points([*plan["held"], *pr.H100_OWN], exclude=own + _again(pr)) & keys
    assert {p["category"] for p in plan["points"]} <= set(pr.GOALS)
    fp32 = {k for k in keys if k[3] == "fp32"}
    # every fp32 point is measured beside its bf16 pair at the same batch
    assert fp32 and all((*k[:3], "bf16", k[4]) in keys for k in fp32)
    for p in plan["points"]:
        names = [m["name"] for m in p["methods"]]
        assert pr.GPU_H100["name"] in names and pr.NAIVE_H200["name"] in names
        assert pr.STEP_H100_OWN["name"] in names
        # the first method is the category's: an H100-trace path where the category says so
        first = p["methods"][0]
        assert first.get("lib") == (pr.H100_OWN if p["category"].endswith("H100 traces")
                                    else None)


def test_registration8_measures_every_point_beside_its_pair_fp32_first(pr):
    plan = pr.PLANS["registration8"]
    assert plan["out"] == "benchmarks/results/h100/registration8.json"
    assert plan["measured"] == "benchmarks/results/h100/registered/registration8.db"
    assert plan["gpu"] == "h100" and plan["device"] == "H100"
    # the sign check takes the fp32 step of the same call only, never a stored one
    assert plan.get("sign_anchors") is None
    order = pr.sweep_points(ROOT / plan["sweep"])
    assert len(order) % 2 == 0
    for f, b in zip(order[::2], order[1::2]):  # a cut-short sweep keeps whole pairs
        assert f[3] == "fp32" and b[3] == "bf16" and f[:3] == b[:3] and f[4] == b[4]
    keys = set(order)
    own = (plan["measured"],) if (ROOT / plan["measured"]).exists() else ()
    assert not pr.stored_points([*plan["held"], *pr.H100_OWN8], exclude=own + _again(pr)) & keys
    test = [p for p in plan["points"] if pr.side(p["model"]) == "test"]
    assert 2 * len(test) >= len(plan["points"])
    for p in plan["points"]:
        first = p["methods"][0]
        assert first.get("lib") == pr.H100_OWN8 and first.get("primary") is True
        # registration7's names, so the judge's own-trace sign column finds them
        assert first["name"] in (pr.TO_BF16_OWN["name"], "replay, one trace (b="
                                 f"{first.get('from')}), H100 traces")
        names = [m["name"] for m in p["methods"]]
        assert {pr.GPU_H100["name"], pr.STEP_H100_OWN["name"], pr.NAIVE_H200["name"]} \
            <= set(names)
        if p["precision"] == "bf16":
            assert first is pr.TO_BF16_OWN8 and p["category"] == "fp32 -> bf16, H100 traces"
        else:
            ones = [m for m in p["methods"] if m.get("lib") and m["withhold"] == "batch"]
            assert ones and all(m["from"] != p["batch_size"] for m in ones)
            assert pr.EVERY_OWN8 in p["methods"]


def test_registration8_h100_library_holds_registration7_traces(pr):
    # deepspeech2's pair is predicted from registration7's H100 fp32 trace at b=48
    from dlperf.perfmodel import retarget

    lib = retarget.TraceLibrary(pr.H100_OWN8)
    fp32 = {p.batch_size for p in lib.points("deepspeech2", "torch", "eager")
            if p.precision == "fp32"}
    assert 48 in fp32
    for p in pr.PLANS["registration8"]["points"]:
        have = {q.batch_size for q in lib.points(p["model"], "torch", "eager")
                if q.precision == "fp32"}
        # no fp32 trace at the pair's batch: the bf16 side is moved there, the fp32 side
        # comes from a neighbour that is traced
        assert p["batch_size"] not in have
        for m in p["methods"]:
            if m.get("lib") and m["withhold"] == "batch":
                assert m["from"] in have


def test_registration7_replays_the_h100_traces_on_the_h100(pr):
    from dlperf.perfmodel import retarget

    lib = retarget.TraceLibrary(pr.H100_OWN)
    pt = next(p for p in pr.PLANS["registration7"]["points"]
              if p["model"] == "bert_base" and p["precision"] == "fp32")
    one = [pr.run_replay(lib, pt, m, "h100", pr.H100_OWN) for m in pt["methods"]
           if m.get("lib") and m["withhold"] == "batch"]
    every = pr.run_replay(lib, pt, pr.EVERY_OWN, "h100", pr.H100_OWN)
    assert len(one) == 2 and all(r["predicted_s"] > 0 for r in [*one, every])
    assert "<0 traces: none>" in every["command"]
    # bert_base fp32 is traced at 16, 32 and 64 on the H100: one trace keeps one of three
    assert all("<2 traces: batch>" in r["command"] for r in one)
    assert one[0]["predicted_s"] != one[1]["predicted_s"]


def test_suffixed_one_trace_methods_pool_apart_and_keep_their_primary_flag(pr):
    p = {"batch_size": 48}
    assert pr.method_group(p, {"method": "replay, one trace (b=32), H100 traces"}) == \
        "replay, one trace from below, H100 traces"
    rows = [{"category": "batch, one trace, H100 traces", "side": "test", "method": m,
             "group": g, "primary": pm, "error_pct": e, "inside": True}
            for m, g, pm, e in [("x", "replay, one trace from below, H100 traces", True, 4.0),
                                ("y", "replay, one trace from above", False, 20.0)]]
    summ = "\n".join(pr.summary(rows))
    assert "| replay, one trace (both directions), H100 traces | yes | test | 1 | 4.0% |" \
        in summ
    assert "| replay, one trace (both directions) | baseline | test | 1 | 20.0% |" in summ
    db = None  # the judge keeps a registered prediction's primary flag
    reg = _reg([{"model": "m", "framework": "torch", "mode": "eager", "precision": "fp32",
                 "batch_size": 48, "category": "c", "side": "dev", "predictions": [
                     {"method": "replay, one trace (b=32)", "primary": False},
                     {"method": "a", "primary": True}]}])
    pr_measured = pr.measured
    try:
        pr.measured = lambda _db: {}
        rows = pr.judge(reg, db)
    finally:
        pr.measured = pr_measured
    assert [r["primary"] for r in rows] == [False, True]


def test_precision_signs_h100_trace_column_and_a_stored_fp32_side(pr):
    def row(prec, measured, group, pred, model="bert_base", b=48):
        return {"model": model, "framework": "torch", "mode": "eager", "precision": prec,
                "batch_size": b, "group": group, "measured_s": measured,
                "measured_ci_rel": 0.0, "predicted_s": pred, "registered": True}

    own_b, own_f = pr.TO_BF16_OWN["name"], pr.EVERY_OWN["name"]
    rows = [row("bf16", 0.030, own_b, 0.034), row("fp32", 0.090, own_f, 0.080),
            # alexnet bf16 b=48 alone: its fp32 side is registration6's measured 6.045 ms
            row("bf16", 0.0040, own_b, 0.0070, "alexnet")]
    reg6 = str(ROOT / "benchmarks/results/h100/registered/registration6.db")
    out = pr.precision_signs(rows, [reg6])
    assert any("| bert_base |" in ln and "-66.7%" in ln and "-57.5% (right)" in ln
               for ln in out)
    stored = pr.stored_step({"model": "alexnet", "framework": "torch", "mode": "eager",
                             "precision": "fp32", "batch_size": 48}, [reg6])
    assert stored is not None and 0.005 < stored[0] < 0.007
    line = next(ln for ln in out if "| alexnet |" in ln)
    assert "(stored)" in line and f"{(0.0070 / stored[0] - 1) * 100:+.1f}% (wrong)" in line
    assert "of 2:" in out[-3] and f"{own_b} / {own_f} 1;" in out[-3]
    # without the stored files the single bf16 point gives no row
    assert not any("| alexnet |" in ln for ln in pr.precision_signs(rows))


def test_no_method_reads_the_repeats(pr):
    """A second measurement of a registered point (:data:`REPEATS`) is never a source of a
    prediction: no method names the folder or a file in it."""
    for name, plan in pr.PLANS.items():
        for method in (m for p in plan["points"] for m in p["methods"]):
            for src in method.get("sources", pr.SOURCES):
                assert not str(src).startswith(pr.REPEATS), (name, method.get("name"), src)

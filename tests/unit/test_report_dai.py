"""Dai et al.'s table (dlperf.report.dai, ``dlperf predict --dai-table``): the split of a
step from known stored parts, the seed study's findings checked, and the CLI on the committed
H200 results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.report import dai
from dlperf.results.schema import RunRecord

H200 = Path(__file__).resolve().parents[2] / "benchmarks/results/h200"


def _rec(framework="torch", mode="eager", step=0.010, busy=0.007, classes=None,
         compile_s=None, first_s=None, breakdown=True, status="ok") -> RunRecord:
    d = {"run_key": f"m-{framework}-{mode}", "status": status, "model": "m",
         "framework": framework, "mode": mode, "device": "cuda", "precision": "bf16",
         "batch_size": 64, "data": "synthetic", "summary": {"median": step},
         "op_classes": {"per_iter_s": classes if classes is not None
                        else {"matmul": 0.006, "elementwise": 0.001, "loss": 0.0},
                        "busy_s": busy},
         "trace": {"available": True, "busy_s": busy}}
    if breakdown:
        d["breakdown"] = {"available": True,
                          "phases": {"t_io": {"median": 1e-4}, "t_h2d": {"median": 2e-4}},
                          "host": {"t_io": {"median": 3e-4}},
                          "dispatch_s": {"median": 0.009}}
    if compile_s is not None:
        d["compile"] = {"compile_time_s": compile_s}
    if first_s is not None:
        d["first_iter_s"] = first_s
    return RunRecord.from_dict(d)


def test_split_of_a_host_exposed_eager_step():
    r = dai.dai_row(_rec(), "a/x.db")
    assert r is not None
    assert r.io_s == pytest.approx(3e-4)  # the host clock's t_io, not the phase timer's
    assert r.h2d_s == pytest.approx(2e-4)
    # exposed host: step - busy - I/O - copy = 10 - 7 - 0.3 - 0.2 ms
    assert r.host_s == pytest.approx(2.5e-3)
    assert r.share(r.host_s) == pytest.approx(0.25)
    assert r.device_by_class_s == pytest.approx({"matmul": 0.006, "elementwise": 0.001})
    assert r.share(r.device_s) == pytest.approx(0.7)
    total = r.share(r.io_s) + r.share(r.h2d_s) + r.share(r.host_s) + r.share(r.device_s)
    assert total == pytest.approx(1.0)
    assert r.dispatch_s == pytest.approx(0.009)
    assert r.sched_io_copy_share == pytest.approx(0.30)
    assert not r.graph_mode and r.graph_opt_share == 0.0 and r.graph_opt_iters_to_max is None
    lines = dai.findings([r])
    assert "30.0% (host 25.0, I/O 3.0, copy 2.0) -> false" in lines[0]
    assert "graph optimisation <= 2.5%: n/a (eager mode)" in lines[0]
    assert "[x.db]" in lines[0]


def test_device_bound_step_and_profiler_cost():
    r = dai.dai_row(_rec(busy=0.0125, classes={"convolution": 0.01, "pooling": 0.0025}))
    assert r is not None
    assert r.host_s == 0.0  # the device covers the step
    assert r.share(r.device_s) == pytest.approx(1.0)  # traced 12.5 ms scaled to the 10 ms step
    assert r.device_by_class_s["convolution"] == pytest.approx(0.008)
    assert any("profiler cost" in n for n in r.notes)
    assert r.sched_io_copy_share == pytest.approx(0.05)  # I/O + copy only


def test_graph_optimisation_amortised():
    r = dai.dai_row(_rec("jax", "xla", compile_s=5.0))
    assert r is not None and r.graph_mode and r.graph_opt_from == "stored compile time"
    assert r.graph_opt_share == pytest.approx(5.0 / (5.0 + dai.AMORTISE_ITERS * 0.010))
    # G (1 - s) / (s T): 5 x 0.975 / (0.025 x 0.01)
    assert r.graph_opt_iters_to_max == pytest.approx(19_500)
    assert dai.dai_row(_rec("jax", "xla", compile_s=5.0), amortise_iters=19_500
                       ).graph_opt_share == pytest.approx(dai.GRAPH_OPT_MAX)
    assert "-> false" in dai.findings([r])[0].split("graph optimisation")[1]
    long = dai.dai_row(_rec("jax", "xla", compile_s=5.0), amortise_iters=100_000)
    assert "-> true" in dai.findings([long])[0].split("graph optimisation")[1]
    # no compile time stored: the first step's excess over the median
    g = dai.dai_row(_rec("torch", "graph", first_s=2.01))
    assert g.graph_opt_s == pytest.approx(2.0) and g.graph_opt_from.startswith("first-step")
    none = dai.dai_row(_rec("torch", "graph"))
    assert none.graph_opt_share is None and "n/a" in dai.findings([none])[0]
    with pytest.raises(ValueError, match="amortise_iters"):
        dai.dai_row(_rec(), amortise_iters=0)


def test_rows_only_where_the_step_was_split():
    assert dai.dai_row(_rec(status="oom")) is None
    plain = RunRecord.from_dict({"run_key": "p", "status": "ok", "model": "m",
                                 "framework": "torch", "mode": "eager", "device": "cuda",
                                 "precision": "bf16", "batch_size": 8,
                                 "summary": {"median": 0.01}})
    assert dai.dai_row(plain) is None
    # a breakdown without a trace: I/O and copy, no host share
    r = dai.dai_row(_rec(classes={}, busy=None))
    assert r is not None and r.host_s is None and r.sched_io_copy_share is None
    assert "n/a (no traced device busy time)" in dai.findings([r])[0]
    md = dai.dai_markdown([])
    assert md.startswith("No result with a breakdown")


def test_markdown_and_json():
    rows = dai.dai_rows({"x.db": [_rec(), _rec("jax", "xla", compile_s=5.0)]})
    compiled = dai.compile_shares({"x.db": [_rec("jax", "xla", compile_s=5.0)]})
    assert len(compiled) == 1 and compiled[0][1] == 5.0
    md = dai.dai_markdown(rows, compiled)
    head = md.splitlines()[0]
    for col in ("I/O %", "copy (h2d) %", "host %", "matmul %", "elementwise %", "device %",
                "graph opt %"):
        assert col in head
    assert "loss %" not in head  # classes with no time in any row are not columns
    assert "<= 2.5% in 0 of 1 -> false" in md
    js = dai.dai_json(rows, compiled)
    assert [r["framework"] for r in js["rows"]] == ["jax", "torch"]
    t = js["rows"][1]
    assert t["shares"]["host"] == pytest.approx(0.25)
    assert t["finding_sched_io_copy_lt_3pct"] is False
    assert t["finding_graph_opt_le_2_5pct"] is None
    assert js["rows"][0]["finding_graph_opt_le_2_5pct"] is False
    json.dumps(js)


def test_cli_on_committed_h200_files(tmp_path):
    from dlperf.cli import app

    r = CliRunner().invoke(app, ["predict", "--dai-table", "--db", str(H200),
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    js = json.loads(r.output)
    split = [x for x in js["rows"] if x["device_by_class_s"]]
    # the traced rows: bf16 at batch 64 (and transformer at 128 in probe.db), and since
    # calibration2.db's torch eager series, fp32 and bf16 at 16-4096 (timelines)
    assert len(split) >= 90 and {x["precision"] for x in split} == {"bf16", "fp32"}
    old = [x for x in split if not x["source"].endswith("calibration2.db")]
    assert len(old) >= 20 and {x["precision"] for x in old} == {"bf16"}
    assert all(x["batch_size"] in (64, 128) for x in old)
    for x in split:
        s = x["shares"]
        total = (s["io"] or 0) + (s["h2d"] or 0) + s["host"] + s["device"]
        assert total == pytest.approx(1.0, abs=0.02), x["model"]
    # torch eager resnet50 bf16 b=64 in breakdown.db: host-exposed well over 3%
    rn = next(x for x in split if x["model"] == "resnet50" and x["framework"] == "torch"
              and x["source"].endswith("breakdown.db"))
    assert rn["finding_sched_io_copy_lt_3pct"] is False and rn["shares"]["host"] > 0.2
    assert js["compile_shares"] and js["amortise_iters"] == 10_000
    r = CliRunner().invoke(app, ["predict", "--dai-table", "--db", str(H200 / "probe.db")])
    assert r.exit_code == 0 and "Dai et al.'s findings, per row:" in r.output
    r = CliRunner().invoke(app, ["predict", "--dai-table", "--db", str(H200),
                                 "--amortise-iters", "0"])
    assert r.exit_code == 2 and "--amortise-iters must be at least 1" in r.output
    r = CliRunner().invoke(app, ["predict", "--dai-table", "--db", str(tmp_path / "no.db")])
    assert r.exit_code == 2 and "does not exist" in r.output

"""Comparisons flag two results whose optimizer implementation differs (issue 23 item 5):
``--optimizer-impl auto`` ran PyTorch's ``foreach`` on CUDA before issue 23 and ``fused``
since (4-5% apart on the H200), under one run key; the record says what ran
(``flags.optimizer.impl``), and ``dlperf compare``, ``results --compare`` and the report's
regress and gaps sections read it."""

from __future__ import annotations

import json

from dlperf.env import environment_differences, optimizer_ran
from dlperf.report.breakdown import gap_attribution, gap_markdown
from dlperf.report.compare import framework_ratios, markdown, mode_speedups
from dlperf.report.matrix import framework_matrix, matrix_markdown
from dlperf.report.regress import compare_point
from dlperf.report.tables import row_cells
from dlperf.results.view import as_records

OLD_AUTO = {"name": "sgd", "foreach": "default"}  # stored before --optimizer-impl
AUTO_FOREACH = {"name": "sgd", "foreach": "default", "impl_asked": "auto", "impl": "foreach"}
AUTO_FUSED = {"name": "sgd", "foreach": "default", "impl_asked": "auto", "impl": "fused"}
FUSED = {"name": "sgd", "foreach": False, "impl_asked": "fused", "impl": "fused"}
FOREACH = {"name": "sgd", "foreach": True, "impl_asked": "foreach", "impl": "foreach"}
OPTAX = {"name": "sgd", "impl": "optax"}
ENV = {"platform": "Linux-6.18", "cpu_model": "Xeon", "cpu_affinity": 16, "python": "3.12.3",
       "gpus": [{"name": "NVIDIA H200", "driver": "580", "uuid": "GPU-af969e90-1"}]}


def _res(opt, fw="torch", asked="auto"):
    return {"env": ENV, "versions": {"framework": fw, fw: "2.13.0"},
            "flags": {"optimizer": opt}, "config": {"optimizer_impl": asked}}


def _row(i, opt, fw="torch", mode="eager", asked="auto", **extra):
    return dict(id=i, framework=fw, mode=mode, status="ok", model="fcn5", device="cuda",
                precision="fp32", batch_size=512, data="synthetic", threads=None,
                step_time_median_s=0.008, result_json=json.dumps({**_res(opt, fw, asked),
                                                                  **extra}))


def test_what_ran_is_read_from_the_record():
    assert optimizer_ran(_res(AUTO_FUSED)) == "fused"
    assert optimizer_ran(_res(OLD_AUTO)) == "default"  # PyTorch's own pick, before the option
    assert optimizer_ran(_res(OPTAX, fw="jax")) == "optax"
    assert optimizer_ran({"flags": {}}) is None and optimizer_ran({}) is None


def test_environment_differences_name_the_optimizer_implementation():
    assert environment_differences(_res(AUTO_FOREACH), _res(AUTO_FUSED)) == [
        "optimizer implementation: foreach vs fused"]
    assert environment_differences(_res(OLD_AUTO), _res(AUTO_FUSED)) == [
        "optimizer implementation: default vs fused"]
    assert environment_differences(_res(AUTO_FUSED), _res(FUSED)) == []  # the same ran
    assert environment_differences(_res(AUTO_FUSED), {"env": ENV}) == []  # unrecorded
    # across frameworks each runs its own by design
    assert environment_differences(_res(AUTO_FUSED), _res(OPTAX, fw="jax"),
                                   same_framework=False) == []


def test_dlperf_compare_flags_an_auto_point_that_ran_another_implementation():
    """BASE: auto before issue 23 (foreach); NEW: auto now (fused): one run key, so the
    regress comparison pairs them, and says that the implementations differ."""
    samples = [0.0081, 0.0082, 0.0080, 0.0081, 0.0082, 0.0081, 0.0080, 0.0082]
    base = as_records([_row(1, AUTO_FOREACH, measured_s=samples)])
    new = as_records([_row(2, AUTO_FUSED, measured_s=[x * 0.955 for x in samples])])
    pc = compare_point("k", base, new)
    assert "environment differs: optimizer implementation: foreach vs fused" in pc.notes
    same = compare_point("k", base, as_records([_row(3, AUTO_FOREACH)]))
    assert not any("optimizer" in n for n in same.notes)


def test_results_compare_modes_frameworks_and_matrix_flag_it():
    rows = [_row(1, AUTO_FOREACH, mode="eager"), _row(2, AUTO_FUSED, mode="graph"),
            _row(3, OPTAX, fw="jax", mode="xla")]
    samples = {1: [0.008] * 8, 2: [0.0076] * 8, 3: [0.0079] * 8}
    (mode,) = mode_speedups(as_records(rows), samples.__getitem__)
    (fw,) = framework_ratios(as_records(rows), samples.__getitem__)
    assert mode["env_differs"] == ["optimizer implementation: foreach vs fused"]
    assert fw["env_differs"] == []  # torch against jax: Optax is JAX's by design
    md = markdown([mode, fw])
    marked = [ln for ln in md.splitlines() if ln.startswith("|") and "†" in ln]
    assert len(marked) == 1 and "torch/graph" in marked[0]
    assert "optimizer implementation: foreach vs fused" in md
    (pt,) = framework_matrix(as_records(rows))
    assert pt["env_differs"] == ["optimizer implementation: torch/eager foreach, "
                                 "torch/graph fused"]
    assert "optimizer implementation" in matrix_markdown([pt])


def test_the_matrix_does_not_flag_columns_that_asked_for_different_implementations():
    """``--optimizer-impl auto,foreach,fused`` makes a column each (``opt=foreach``,
    ``opt=fused``): their implementations differ by request, and the labels say so."""
    rows = [_row(1, AUTO_FUSED), _row(2, FOREACH, asked="foreach"), _row(3, FUSED, asked="fused")]
    (pt,) = framework_matrix(as_records(rows))
    assert sorted(pt["columns"]) == ["torch/eager", "torch/eager opt=foreach",
                                     "torch/eager opt=fused"]
    assert pt["env_differs"] == []


def test_the_reports_gap_section_flags_it():
    oc = {"op_classes": {"per_iter_s": {"optimizer": 0.001}}, "trace": {"idle_s": 0.0}}
    rows = [_row(1, AUTO_FOREACH, **oc), _row(2, OPTAX, fw="jax", mode="xla", **oc),
            _row(3, AUTO_FUSED, mode="graph", **oc)]
    gaps = gap_attribution(as_records(rows))
    flagged = [g for g in gaps if g["env_differs"]]
    assert flagged and all(g["env_differs"] == ["optimizer implementation: foreach vs fused"]
                           for g in flagged)
    assert all({g["a"], g["b"]} == {"torch/eager", "torch/graph"} for g in flagged)
    assert "optimizer implementation: foreach vs fused" in gap_markdown(flagged)


AUTO_DEFAULT = {"name": "sgd", "foreach": "default", "impl_asked": "auto", "fused": False,
                "impl": "foreach"}  # auto where no fused kernel serves: PyTorch's own pick


def test_the_results_table_labels_what_auto_ran_when_not_the_framework_default():
    """The table says ``opt=fused`` for an explicit ask and ``opt=fused (auto)`` for ``auto``
    that ran fused; nothing where ``auto`` ran PyTorch's default, for results stored before
    the option, or for other frameworks."""
    def cell(opt, asked="auto", fw="torch", mode="eager"):
        return row_cells(as_records([_row(1, opt, fw=fw, mode=mode, asked=asked)])[0])[1]

    assert cell({**AUTO_FUSED, "fused": True}) == "torch/eager opt=fused (auto)"
    assert cell(FUSED, asked="fused") == "torch/eager opt=fused"
    assert cell(FOREACH, asked="foreach") == "torch/eager opt=foreach"
    assert cell(AUTO_DEFAULT) == "torch/eager"
    assert cell(OLD_AUTO) == "torch/eager"
    assert cell(OPTAX, fw="jax", mode="xla") == "jax/xla"


def test_the_matrix_says_when_auto_and_an_explicit_ask_ran_the_same_implementation():
    rows = [_row(1, AUTO_FUSED), _row(2, FOREACH, asked="foreach"), _row(3, FUSED, asked="fused"),
            _row(4, AUTO_FUSED, mode="graph")]  # another mode: not the same measurement
    (pt,) = framework_matrix(as_records(rows))
    assert pt["same_optimizer"] == ["torch/eager and torch/eager opt=fused ran the same "
                                    "optimizer implementation (fused)"]
    assert pt["env_differs"] == []
    md = matrix_markdown([pt])
    assert "asked for different optimizer implementations but ran the same one" in md
    assert "torch/eager and torch/eager opt=fused ran the same optimizer implementation" in md
    (other,) = framework_matrix(as_records([_row(1, AUTO_DEFAULT), _row(3, FUSED, asked="fused")]))
    assert other["same_optimizer"] == []


def test_the_csv_export_tells_optimizer_implementations_apart():
    """The CSV has an optimizer column, so auto/foreach/fused rows of one configuration tell
    apart there as in the table and the JSON."""
    import csv
    import io

    from dlperf.results.export import to_csv

    rows = [_row(1, {**AUTO_FUSED, "fused": True}), _row(2, FOREACH, asked="foreach"),
            _row(3, OPTAX, fw="jax", mode="xla")]
    got = [(r["optimizer_impl"], r["optimizer_ran"])
           for r in csv.DictReader(io.StringIO(to_csv(rows)))]
    assert got == [("auto", "fused"), ("foreach", "foreach"), ("auto", "optax")]

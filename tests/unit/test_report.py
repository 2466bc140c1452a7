"""Tests for dlperf.report: tables (rich + Markdown), PNG plots and report.md, on synthetic rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from dlperf.report.markdown import write_report
from dlperf.report.plots import plot_filename, plot_step_time_vs_batch
from dlperf.report.tables import COLUMNS, fmt_sig, markdown_table, results_table, short_error
from dlperf.results.schema import RunRecord
from dlperf.results.view import as_record, as_records

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GIB = 1024**3


def _row(model="resnet50", precision="fp32", batch=32, median_s=0.0123456, status="ok", **kw):
    r = {
        "run_key": f"{model}-{precision}-{batch}-{status}",
        "status": status,
        "error": None,
        "model": model,
        "framework": "torch",
        "mode": "eager",
        "device": "cuda",
        "device_name": "NVIDIA H200",
        "precision": precision,
        "batch_size": batch,
        "data": "synthetic",
        "threads": None,
        "step_time_median_s": median_s,
        "step_time_mean_s": median_s,
        "step_time_ci_low_s": median_s * 0.99,
        "step_time_ci_high_s": median_s * 1.01,
        "step_time_p5_s": median_s * 0.95,
        "step_time_p95_s": median_s * 1.05,
        "step_time_iqr_s": median_s * 0.02,
        "n_measured": 100,
        "samples_per_s": batch / median_s,
        "tokens_per_s": None,
        "first_iter_s": 1.5,
        "warmup_iters": 10,
        "steady_state": True,
        "peak_allocated_bytes": 2 * GIB,
        "peak_reserved_bytes": 3 * GIB,
        "nvml_used_bytes": int(3.5 * GIB),
        "peak_rss_bytes": GIB,
        "created_at": "2025-01-01T00:00:00+00:00",
    }
    if status != "ok":
        for k in list(r):
            if k.startswith("step_time") or k in ("samples_per_s", "tokens_per_s", "n_measured", "steady_state"):
                r[k] = None
    r.update(kw)
    return r


@pytest.fixture
def rows():
    rs = []
    # two precisions x three batch sizes, times halve with bf16
    for prec, scale in (("fp32", 1.0), ("bf16", 0.5)):
        for b in (32, 64, 128):
            rs.append(_row(precision=prec, batch=b, median_s=0.010 * scale * b / 32))
    # bf16 256 runs out of memory
    rs.append(
        _row(
            precision="bf16",
            batch=256,
            status="oom",
            error="CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 139.80 GiB total capacity; "
            "120.00 GiB already allocated) [rank0] | see docs\nTraceback (most recent call last): ...",
            peak_allocated_bytes=None,
            peak_reserved_bytes=None,
            nvml_used_bytes=None,
        )
    )
    # a second model, a sequence model with tokens/s, on CPU
    rs.append(
        _row(
            model="lstm",
            device="cpu",
            device_name="AMD EPYC",
            batch=16,
            median_s=0.05,
            threads=8,
            tokens_per_s=16 / 0.05 * 35,
            peak_allocated_bytes=None,
            peak_reserved_bytes=None,
            nvml_used_bytes=None,
            peak_rss_bytes=512 * 1024**2,
        )
    )
    return rs[::-1]  # reversed, so sorting is exercised


def _table_lines(md: str) -> list[str]:
    return [ln for ln in md.splitlines() if ln.startswith("|")]


def _cells(line: str) -> list[str]:
    # split on pipes that are not escaped
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_fmt_sig():
    assert fmt_sig(12.3456) == "12.35"
    assert fmt_sig(0.0523412) == "0.05234"
    assert fmt_sig(123456.7) == "123457"
    assert fmt_sig(9.99996) == "10.00"
    assert fmt_sig(0) == "0"
    assert fmt_sig(None) == "–"
    assert fmt_sig(float("nan")) == "–"


def test_short_error():
    assert short_error("line one\nline two") == "line one"
    long = "x" * 100
    s = short_error(long, max_chars=20)
    assert len(s) == 20 and s.endswith("…")
    assert short_error(None) == ""


def test_markdown_table_rows_and_values(rows):
    md = markdown_table(as_records(rows))
    lines = _table_lines(md)
    assert len(lines) == 2 + len(rows)  # header + alignment + one per row
    header = _cells(lines[0])
    assert header == list(COLUMNS)
    assert len(_cells(lines[1])) == len(COLUMNS)
    body = [_cells(ln) for ln in lines[2:]]
    assert all(len(c) == len(COLUMNS) for c in body)
    col = {name: i for i, name in enumerate(COLUMNS)}

    # sorted by model, framework, precision (bf16 < fp32), batch
    keys = [(c[col["model"]], c[col["precision"]], int(c[col["batch"]])) for c in body]
    assert keys == [
        ("lstm", "fp32", 16),
        ("resnet50", "bf16", 32),
        ("resnet50", "bf16", 64),
        ("resnet50", "bf16", 128),
        ("resnet50", "bf16", 256),
        ("resnet50", "fp32", 32),
        ("resnet50", "fp32", 64),
        ("resnet50", "fp32", 128),
    ]

    fp32_32 = body[5]
    assert fp32_32[col["framework/mode"]] == "torch/eager"
    assert fp32_32[col["device"]] == "cuda (NVIDIA H200)"
    assert fp32_32[col["status"]] == "ok"
    # 0.010 s -> 10.00 ms; CI 0.99x / 1.01x -> 9.900 / 10.10 ms
    assert fp32_32[col["median ms [CI]"]] == "10.00 [9.900, 10.10]"
    assert fp32_32[col["samples/s (mean)"]] == "3200"  # 32 / 0.010
    assert fp32_32[col["tokens/s (mean)"]] == "–"
    assert fp32_32[col["peak mem (alloc / resv / NVML)"]] == "2.00 / 3.00 / 3.50 GiB"

    bf16_32 = body[1]
    assert bf16_32[col["median ms [CI]"]] == "5.000 [4.950, 5.050]"
    assert bf16_32[col["samples/s (mean)"]] == "6400"

    oom = body[4]
    assert oom[col["status"]].startswith("OOM: CUDA out of memory.")
    assert oom[col["status"]].endswith("…")
    assert "Traceback" not in oom[col["status"]]  # only the first line
    assert oom[col["median ms [CI]"]] == "–" and oom[col["samples/s (mean)"]] == "–"
    assert oom[col["peak mem (alloc / resv / NVML)"]] == "RSS 1.00 GiB"

    lstm = body[0]
    assert lstm[col["device"]] == "cpu (AMD EPYC)"
    assert lstm[col["data"]] == "synthetic, 8 thr"
    assert lstm[col["tokens/s (mean)"]] == "11200"  # 16 / 0.05 * 35
    assert lstm[col["peak mem (alloc / resv / NVML)"]] == "RSS 512.00 MiB"


def test_markdown_table_escapes_pipes():
    r = _row(status="crash", error="a | b <c>")
    line = _table_lines(markdown_table(as_records([r])))[2]
    assert "a \\| b &lt;c&gt;" in line
    assert len(_cells(line)) == len(COLUMNS)


def test_markdown_table_not_steady():
    md = markdown_table(as_records([_row(steady_state=False)]))
    assert "ok (not steady)" in md


def test_rich_table_renders(rows):
    console = Console(record=True, width=250)
    console.print(results_table(as_records(rows)))
    text = console.export_text()
    for col in ("model", "framework/mode", "median ms [CI]", "samples/s", "tokens/s"):
        assert col in text
    assert "10.00 [9.900, 10.10]" in text
    assert "OOM: CUDA out of memory" in text
    assert text.index("lstm") < text.index("resnet50")
    assert text.count("resnet50") == 7


def test_rich_table_error_brackets_are_not_markup():
    console = Console(record=True, width=200)
    console.print(results_table(as_records([_row(status="crash", error="[bold]boom[/bold] [/]")])))
    assert "[bold]boom" in console.export_text()


def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 10_000  # non-trivial: axes, lines, text
    # IHDR width/height are sensible (not a 1x1 placeholder)
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert w > 500 and h > 300


def test_plots_exist_and_are_pngs(rows, tmp_path):
    paths = plot_step_time_vs_batch(as_records(rows), tmp_path / "plots")
    assert [p.name for p in paths] == [plot_filename("lstm"), plot_filename("resnet50")]
    for p in paths:
        assert p.exists()
        _assert_png(p)


def test_plots_all_failed_and_empty(tmp_path):
    assert plot_step_time_vs_batch([], tmp_path) == []
    paths = plot_step_time_vs_batch(as_records([_row(status="oom", batch=64), _row(status="crash", batch=128)]), tmp_path)
    assert len(paths) == 1
    _assert_png(paths[0])


def test_plot_filename_is_safe():
    assert plot_filename("gpt2 small/v1") == "step_time_vs_batch_gpt2_small_v1.png"


def test_plots_do_not_use_pyplot():
    # Figure + Agg canvas only: no global backend switch, no figure registry, no display
    from dlperf.report import plots

    assert "pyplot" not in plots.__dict__
    assert "import matplotlib.pyplot" not in Path(plots.__file__).read_text(encoding="utf-8")


def test_write_report(rows, tmp_path):
    out = tmp_path / "nested" / "report"
    env = {"torch": "2.11.0", "cuda": {"runtime": "13.0", "cudnn": "9.10"}, "missing": None}
    path = write_report(as_records(rows), out, title="H200 sweep", env=env)
    assert path == out / "report.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# H200 sweep\n")
    assert "8 result(s): 7 ok, 1 OOM." in text
    assert "## Environment" in text
    assert "- devices: cpu (AMD EPYC); cuda (NVIDIA H200)" in text
    assert "- torch: 2.11.0" in text and "- cuda.runtime: 13.0" in text and "- cuda.cudnn: 9.10" in text
    assert "missing" not in text
    assert markdown_table(as_records(rows)).strip() in text
    assert "## Failures" in text and "**OOM** resnet50 torch eager cuda bf16 synthetic, batch 256" in text

    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links == [plot_filename("lstm"), plot_filename("resnet50")]
    for link in links:
        assert not link.startswith("/")  # relative
        _assert_png(out / link)


def test_write_report_is_deterministic(rows, tmp_path):
    a = write_report(as_records(rows), tmp_path / "a", env={"b": 1, "a": 2}).read_text()
    b = write_report(as_records(list(reversed(rows))), tmp_path / "b", env={"a": 2, "b": 1}).read_text()
    assert a == b
    assert a.index("- a: 2") < a.index("- b: 1")


def test_write_report_empty(tmp_path):
    path = write_report([], tmp_path / "empty")
    text = path.read_text()
    assert "No results." in text and "![" not in text


def test_ratio_of_medians_ci_and_mode_comparison():
    from dlperf.report.compare import framework_ratios, markdown, mode_speedups
    from dlperf.stats import ratio_of_medians_ci

    base = [0.020, 0.021, 0.019, 0.020, 0.022, 0.020]  # median 0.020
    fast = [0.010, 0.011, 0.009, 0.010, 0.010, 0.012]  # median 0.010
    r, lo, hi = ratio_of_medians_ci(base, fast)
    assert r == pytest.approx(2.0) and lo <= r <= hi and lo > 1.5
    samples = {1: base, 2: fast, 3: fast}
    common = dict(status="ok", model="m", device="cpu", precision="fp32", batch_size=8,
                  data="synthetic", threads=None)
    rows = [dict(id=1, framework="torch", mode="eager", **common),
            dict(id=2, framework="torch", mode="graph", **common),
            dict(id=3, framework="jax", mode="xla", **common)]
    modes = mode_speedups(as_records(rows), samples.__getitem__)
    assert [(c["baseline"], c["other"]) for c in modes] == [("torch/eager", "torch/graph")]
    assert modes[0]["speedup"] == pytest.approx(2.0)
    fw = framework_ratios(as_records(rows), samples.__getitem__)
    assert {c["other"] for c in fw} == {"jax/xla"}
    assert "2.000 [" in markdown(fw)


def test_comparisons_pair_only_runs_with_the_same_loader_workers_and_devices():
    """--loader-workers and --nproc change what is measured: torch with batches prepared
    before timing was compared against jax with 2 loader workers (every torch run against
    every jax run of the model: 6 identical-looking rows from 3 + 2 runs)."""
    from dlperf.report.compare import framework_ratios, markdown, mode_speedups

    samples = {i: [0.010 + 0.001 * i] * 6 for i in range(1, 9)}
    common = dict(status="ok", model="m", device="cpu", precision="fp32", batch_size=8,
                  data="mnist", threads=1)
    rows = [dict(id=1, framework="torch", mode="eager", loader_workers=None, **common),
            dict(id=2, framework="torch", mode="eager", loader_workers=0, **common),
            dict(id=3, framework="torch", mode="eager", loader_workers=2, **common),
            dict(id=4, framework="jax", mode="xla", loader_workers=0, **common),
            dict(id=5, framework="jax", mode="xla", loader_workers=2, **common),
            dict(id=6, framework="torch", mode="graph", loader_workers=2, **common),
            # two devices against one; a row from before data parallelism (NULL) is one device
            dict(id=7, framework="jax", mode="xla", loader_workers=None, world_size=2, **common),
            dict(id=8, framework="jax", mode="xla", loader_workers=None, world_size=None,
                 **common)]
    fw = framework_ratios(as_records(rows), samples.__getitem__)
    got = {(c["loader_workers"], c["other"]): c["speedup"] for c in fw}
    assert got == {(0, "jax/xla"): pytest.approx(12 / 14), (2, "jax/xla"): pytest.approx(13 / 15),
                   (None, "jax/xla"): pytest.approx(11 / 18)}
    (mode,) = mode_speedups(as_records(rows), samples.__getitem__)
    assert mode["loader_workers"] == 2 and mode["speedup"] == pytest.approx(13 / 16)
    md = markdown(fw)
    assert "| mnist, 0 wkr |" in md and "| mnist, 2 wkr |" in md and "| mnist |" in md


def test_comparisons_pair_runs_of_the_same_layout_setting():
    """A torch CNN stored with --layout nchw and again with auto (channels_last) was compared
    with every graph run and every JAX run: 2 x 2 mode rows, two of them NCHW against NHWC."""
    import json as _json

    from dlperf.report.compare import framework_ratios, markdown, mode_speedups

    samples = {i: [0.010 * i] * 6 for i in range(1, 6)}
    common = dict(status="ok", model="resnet50", device="cuda", precision="bf16", batch_size=8,
                  data="synthetic", threads=None)

    def row(i, fw, mode, layout):
        cfg = {} if layout is None else {"layout": layout}
        return dict(id=i, framework=fw, mode=mode, result_json=_json.dumps({"config": cfg}),
                    **common)

    rows = [row(1, "torch", "eager", "nchw"), row(2, "torch", "graph", "nchw"),
            row(3, "torch", "eager", "auto"), row(4, "torch", "graph", "auto"),
            row(5, "jax", "xla", None)]  # stored before --layout: auto
    modes = mode_speedups(as_records(rows), samples.__getitem__)
    assert sorted((c["baseline"], c["other"], c["speedup"]) for c in modes) == [
        ("torch/eager", "torch/graph", pytest.approx(3 / 4)),
        ("torch/eager (nchw)", "torch/graph (nchw)", pytest.approx(1 / 2))]
    (fw,) = framework_ratios(as_records(rows), samples.__getitem__)
    assert (fw["baseline"], fw["other"], fw["speedup"]) == ("torch/eager", "jax/xla",
                                                            pytest.approx(3 / 5))
    assert "torch/eager (nchw) | torch/graph (nchw)" in markdown(modes)


def test_torch_rows_show_the_applied_layout():
    """Rows that differ only in layout (NCHW vs channels_last) tell apart in tables."""
    import json

    from dlperf.report.tables import row_cells

    base = {"model": "resnet50", "framework": "torch", "mode": "eager", "batch_size": 8}
    cl = row_cells(as_record({**base, "result_json": json.dumps({"flags": {"layout": "NHWC"}})}))
    assert cl[1] == "torch/eager NHWC"
    assert row_cells(as_record({**base, "result_json": json.dumps({"flags": {"layout": None}})}))[1] == \
        "torch/eager"
    assert row_cells(as_record({**base, "framework": "jax", "mode": "xla",
                      "result_json": json.dumps({"flags": {"layout": "NHWC"}})}))[1] == "jax/xla"


def test_real_data_is_set_against_the_synthetic_run_of_the_same_devices_and_accumulation():
    """A real-data run on one device was set against whichever synthetic run of the model came
    last, e.g. one on two devices or with --grad-accum 2 (and modes/frameworks compared runs of
    different accumulation)."""
    from dlperf.report.compare import data_gaps, framework_ratios, markdown

    samples = {1: [0.010] * 6, 2: [0.030] * 6, 3: [0.020] * 6, 4: [0.040] * 6,
               5: [0.012] * 6}
    common = dict(status="ok", model="m", framework="torch", mode="eager", device="cpu",
                  precision="fp32", batch_size=8, threads=1, samples_per_s=1.0)
    rows = [dict(id=1, data="synthetic", world_size=None, grad_accum=1, **common),
            dict(id=2, data="synthetic", world_size=2, grad_accum=1, **common),
            dict(id=4, data="synthetic", world_size=1, grad_accum=2, **common),
            dict(id=3, data="mnist", world_size=1, grad_accum=1, loader_workers=0, **common)]
    (g,) = data_gaps(as_records(rows), samples.__getitem__)
    assert g["relative_throughput"] == pytest.approx(0.5)      # 10 ms synthetic / 20 ms real
    jax = dict(common, framework="jax", mode="xla")
    fw = framework_ratios(as_records(rows + [dict(id=5, data="synthetic", world_size=1, grad_accum=2,
                                       **jax)]), samples.__getitem__)
    assert [(c["grad_accum"], c["speedup"]) for c in fw] == [(2, pytest.approx(40 / 12))]
    assert "| 8 (2 accum) |" in markdown(fw)


def test_rows_show_gradient_accumulation_and_breakdown_or_trace():
    """A plain run, a --trace run and a --grad-accum 2 --breakdown run of one model and batch
    are three points, but their rows read the same in every identity cell."""
    import json

    from dlperf.report.breakdown import breakdown_cells
    from dlperf.report.tables import row_cells

    base = {"model": "fcn5_tiny", "framework": "torch", "mode": "eager", "batch_size": 16,
            "grad_accum": 1, "status": "ok"}
    plain = row_cells(as_record({**base, "result_json": json.dumps({"config": {}})}))
    traced = row_cells(as_record({**base, "result_json": json.dumps({"config": {"trace_dir": "/t"}})}))
    accum = {**base, "grad_accum": 2,
             "result_json": json.dumps({"config": {"breakdown": True, "grad_accum": 2}})}
    cells = row_cells(as_record(accum))
    assert plain[1] == "torch/eager" and plain[5] == "16"
    assert traced[1] == "torch/eager +trace"
    assert cells[1] == "torch/eager +breakdown" and cells[5] == "16 (2 accum)"
    assert breakdown_cells(as_record(accum))[4] == "16 (2 accum)"
    # the line printed as each point finishes says it too (RunConfig.label() does)
    from dlperf.sweep import result_line

    r = {**base, "device": "cpu", "precision": "fp32", "data": "synthetic", "status": "error",
         "error": "x", "config": {"breakdown": True, "trace_dir": "/t"}}
    assert "b=16 synthetic +breakdown +trace" in result_line(RunRecord.from_dict(r))
    assert "+breakdown" not in result_line(RunRecord.from_dict({**r, "config": {}}))
    ro = {**r, "mode": "graph", "config": {"compile_mode": "reduce-overhead"}}
    assert "torch/graph \\[reduce-overhead] cpu" in result_line(RunRecord.from_dict(ro))  # escaped: printed as is


def test_ddp_rows_name_their_non_default_options():
    """Two DDP runs differing only in a DDP option tell apart in tables and result lines."""
    import json

    from dlperf.config import DDPOptions
    from dlperf.report.tables import row_cells
    from dlperf.sweep import result_line

    off = {**DDPOptions().model_dump(), "broadcast_buffers": False}
    base = {"model": "resnet56", "framework": "torch", "mode": "eager", "batch_size": 16,
            "world_size": 2, "per_device_batch": 8}
    cell = row_cells(as_record({**base, "result_json": json.dumps({"config": {"ddp": off}})}))[1]
    assert cell == "torch/eager ddp(broadcast_buffers=False)"
    dflt = json.dumps({"config": {"ddp": DDPOptions().model_dump()}})
    assert row_cells(as_record({**base, "result_json": dflt}))[1] == "torch/eager"
    assert row_cells(as_record({**base, "world_size": 1, "result_json": json.dumps(
        {"config": {"ddp": off}})}))[1] == "torch/eager"  # one process: DDP is not used
    r = {**base, "device": "cpu", "precision": "fp32", "data": "synthetic", "nproc": 2,
         "status": "error", "error": "x", "config": {"ddp": {**off, "bucket_cap_mb": 50.0}}}
    assert "ddp(bucket_cap_mb=50.0, broadcast_buffers=False)" in result_line(RunRecord.from_dict(r))
    # TensorFlow/JAX: one process per device (not the default) is named, the default is not
    tf = {**base, "framework": "tensorflow", "mode": "graph"}
    assert row_cells(as_record({**tf, "result_json": json.dumps({"config": {"dp_layout": "per_device"}})})
                     )[1] == "tensorflow/graph per_device"
    assert row_cells(as_record({**tf, "result_json": json.dumps({"config": {"dp_layout": "per_node"}})})
                     )[1] == "tensorflow/graph"
    assert " x2 fp32 b=16 (2x8) synthetic per_device" in result_line(RunRecord.from_dict(
        {**r, **tf, "config": {"dp_layout": "per_device"}}))
    from dlperf.config import RunConfig

    cfg = RunConfig(model="fcn5_tiny", framework="tensorflow", mode="graph", device="cpu",
                    batch_size=8, nproc=2, dp_layout="per_device")
    assert cfg.label().endswith("synthetic per_device")
    assert "per_" not in cfg.with_(dp_layout="per_node").label()


def test_real_against_synthetic_is_a_ratio_of_throughputs():
    """A loader that stalls one iteration in four keeps the median iteration of the synthetic
    run but costs throughput: the comparison must show the cost (ratio of means)."""
    import json as _json

    from dlperf.report.compare import data_gaps
    from dlperf.stats import ratio_ci

    syn = [0.030] * 16
    real = [0.330, 0.030, 0.030, 0.030] * 4  # median 0.030, mean 0.105
    common = dict(status="ok", model="resnet50", framework="torch", mode="eager", device="cuda",
                  precision="bf16", batch_size=128, threads=None)
    rows = [dict(id=1, data="synthetic", samples_per_s=128 / 0.030, **common),
            dict(id=2, data="imagefolder", loader_workers=4, samples_per_s=128 / 0.105,
                 data_wait_share=0.71, input_bound=True,
                 result_json=_json.dumps({"data_wait": {"median_share": 0.0, "mean_s": 0.075}}),
                 **common)]
    (g,) = data_gaps(as_records(rows), {1: syn, 2: real}.__getitem__)
    assert g["relative_throughput"] == pytest.approx(0.030 / 0.105)
    assert g["ci_low"] <= g["relative_throughput"] <= g["ci_high"] < 0.7  # far from 1
    assert g["median_wait_share"] == 0.0 and g["input_bound"] is True
    assert g["busy_vs_synthetic"] == pytest.approx(1.0)  # the step itself was not slower
    assert ratio_ci(syn, real)[0] == pytest.approx(1.0)  # the median alone sees no cost
    # an ImageFolder read with the default 0 workers is a pipeline, not prepared batches
    from dlperf.report.compare import data_markdown

    rows[1].update(loader_workers=None, result_json=_json.dumps(
        {"data_wait": {"mean_s": 0.075}, "data_info": {"placement": "pipeline"}}))
    (g0,) = data_gaps(as_records(rows), {1: syn, 2: real}.__getitem__)
    assert g0["pipeline"] is True and "| imagefolder | 0 |" in data_markdown([g0])
    rows[1].update(result_json=_json.dumps({"data_info": {"placement": "host"}}))
    assert "| prepared |" in data_markdown(data_gaps(as_records(rows), {1: syn, 2: real}.__getitem__))
    with pytest.raises(ValueError, match="statistic"):
        ratio_ci(syn, real, statistic="mode")
    # JAX: Grain worker processes or host threads (results stored before the field: threads)
    jax_rows = [{**r, "framework": "jax", "mode": "xla"} for r in rows]
    for pipe, shown in [({"workers_kind": "processes", "num_workers": 4}, "| 4 processes |"),
                        ({"impl": "dlperf HostPipeline (threads + device_put feeder)",
                          "num_workers": 4}, "| 4 threads |")]:
        jax_rows[1].update(loader_workers=4, result_json=_json.dumps(
            {"data_info": {"placement": "pipeline", "pipeline": pipe}}))
        (gj,) = data_gaps(as_records(jax_rows), {1: syn, 2: real}.__getitem__)
        assert shown in data_markdown([gj])
        # the results table tells the two kinds apart too
        from dlperf.report.tables import row_cells

        kind = shown.split()[2]
        assert any(c.endswith(f", 4 wkr ({kind})") for c in row_cells(as_record(jax_rows[1])))
    rows[1].update(loader_workers=4, result_json=_json.dumps(  # torch: no kind shown
        {"data_info": {"placement": "pipeline", "pipeline": {"num_workers": 4}}}))
    (gt,) = data_gaps(as_records(rows), {1: syn, 2: real}.__getitem__)
    assert gt["workers_kind"] is None and "| 4 |" in data_markdown([gt])
    from dlperf.report.tables import row_cells

    assert any(c.endswith(", 4 wkr") for c in row_cells(as_record(rows[1])))


def test_comparisons_across_environments_are_marked():
    """Two H200 sessions ran on VM builds fc-v657 and fc-v973: host-bound steps differed up to
    1.8x, so a ratio across them must say so."""
    import json as _json

    from dlperf.env import environment_differences, environment_of
    from dlperf.report.breakdown import gap_attribution, gap_markdown
    from dlperf.report.compare import framework_ratios, markdown, mode_speedups

    def res(platform, fw="torch", version="2.11.0", cpus=16):
        return {"env": {"platform": platform, "cpu_model": "Xeon", "cpu_affinity": cpus,
                        "python": "3.12.3", "gpus": [{"name": "NVIDIA H200", "driver": "580"}]},
                "versions": {"framework": fw, fw: version, "cuda": "13.0"}}

    old, new = "Linux-6.18.44-fc-v657-gpu", "Linux-6.18.44-fc-v973-gpu"
    assert environment_of(res(old))["framework"] == "torch 2.11.0 (13.0)"
    assert environment_differences(res(old), res(old)) == []
    assert environment_differences(res(old), res(new)) == [f"platform: {old} vs {new}"]
    assert environment_differences(res(old), res(old, fw="jax", version="0.11"),
                                   same_framework=False) == []
    assert len(environment_differences(res(old), res(new, version="2.12", cpus=8))) == 3
    assert environment_differences(res(old), {"env": {}}) == []  # unrecorded: not a difference

    samples = {1: [0.02] * 8, 2: [0.01] * 8, 3: [0.015] * 8}
    common = dict(status="ok", model="m", device="cuda", precision="bf16", batch_size=64,
                  data="synthetic", threads=None)
    rows = [dict(id=1, framework="torch", mode="eager", result_json=_json.dumps(res(old)),
                 **common),
            dict(id=2, framework="torch", mode="graph", result_json=_json.dumps(res(old)),
                 **common),
            dict(id=3, framework="jax", mode="xla",
                 result_json=_json.dumps(res(new, fw="jax", version="0.11")), **common)]
    (mode,) = mode_speedups(as_records(rows), samples.__getitem__)
    (fw,) = framework_ratios(as_records(rows), samples.__getitem__)
    assert mode["env_differs"] == [] and fw["env_differs"] == [f"platform: {old} vs {new}"]
    md = markdown([mode, fw])
    assert md.count("†") == 2 and "different environments" in md and "v973" in md

    # a breakdown gap whose two sides ran on the two VM builds
    oc = {"op_classes": {"per_iter_s": {"matmul": 0.004}}, "trace": {"idle_s": 0.001}}
    bd = [dict(r, step_time_median_s=samples[r["id"]][0],
               result_json=_json.dumps({**_json.loads(r["result_json"]), **oc}))
          for r in rows if r["mode"] != "graph"]
    (gap,) = gap_attribution(as_records(bd))
    assert gap["env_differs"] == [f"platform: {old} vs {new}"]
    assert "different environments" in gap_markdown([gap])


def test_machines_of_one_kind_differ_by_gpu_and_host_speed():
    """Same VM build, GPU model and software, yet host-bound steps 1.4x apart: the GPUs' uuids
    and the host's single-thread speed tell the machines apart."""
    from dlperf.env import (
        HOST_SPEED_TOLERANCE,
        collect_env,
        cpu_identity,
        environment_differences,
        environment_of,
        host_speed,
    )

    def res(uuid, ns, model="143"):
        return {"env": {"platform": "Linux-6.18.44-fc-v657-gpu", "cpu_model": "Xeon",
                        "cpu_id": {"family": "6", "model": model, "stepping": "8"},
                        "cpu_affinity": 16, "python": "3.12.3",
                        "gpus": [{"name": "NVIDIA H200", "driver": "580", "uuid": uuid + "-0a0c"}],
                        "host_speed": {"python_loop_ns": ns}},
                "versions": {"framework": "torch", "torch": "2.11.0"}}

    a = res("GPU-39397f91", 40.0)
    assert environment_of(a)["machine"] == "GPU-39397f91"
    assert environment_of(a)["cpu"] == "family 6 model 143 stepping 8"
    assert environment_differences(a, res("GPU-39397f91", 40.0 * HOST_SPEED_TOLERANCE * 0.99)) == []
    # one machine: the probe is bimodal there (72-97 or 132-203 ns on one H200), not flagged
    assert environment_differences(a, res("GPU-39397f91", 80.0)) == []
    # no machine id (a CPU host): host speed tells the hosts apart
    cpu_a, cpu_b = res("GPU-x", 40.0), res("GPU-x", 56.0)
    for r in (cpu_a, cpu_b):
        r["env"]["gpus"] = []
    (d,) = environment_differences(cpu_a, cpu_b)
    assert d.startswith("host speed: 40.0 vs 56.0") and "(1.40x)" in d
    cpu_c = res("GPU-x", 41.0)
    cpu_c["env"]["gpus"] = []
    assert environment_differences(cpu_a, cpu_c) == []
    diffs = environment_differences(a, res("GPU-cb57bf9e", 41.0, model="207"))
    assert diffs == ["cpu: family 6 model 143 stepping 8 vs family 6 model 207 stepping 8",
                     "machine: GPU-39397f91 vs GPU-cb57bf9e"]
    # the faster of the probes before and after the measurement counts: one slowed probe
    # (81 against 161 ns in two workers a minute apart on one H200) is not a second machine
    slowed = res("GPU-39397f91", 80.0)
    slowed["env"]["host_speed_after"] = {"python_loop_ns": 41.0}
    assert environment_of(slowed)["host speed"] == 41.0
    assert environment_differences(a, slowed) == []
    # results stored before these fields existed compare as before
    old = {"env": {"platform": "Linux-6.18.44-fc-v657-gpu", "gpus": [{"name": "NVIDIA H200"}]}}
    assert environment_differences(a, old) == []

    ticks = iter(range(0, 10**9, 1000))  # a fake clock: every round takes 1000 ns
    hs = host_speed(rounds=3, n=10, clock=lambda: next(ticks))
    assert hs["python_loop_ns"] == 100.0 and hs["rounds"] == 3
    real = host_speed(rounds=3, n=2000)["python_loop_ns"]
    assert 1.0 < real < 10_000.0
    cpuinfo = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
               "model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 8\ncpu MHz\t\t: 2100.000\n"
               "cache size\t: 107520 KB\n\nprocessor\t: 1\nmodel\t\t: 999\n")
    assert cpu_identity(cpuinfo) == {"vendor": "GenuineIntel", "family": "6", "model": "143",
                                     "stepping": "8", "mhz": 2100.0, "cache": "107520 KB"}
    assert cpu_identity("") is None
    assert collect_env()["host_speed"] is None and collect_env(speed=True)["host_speed"]


def test_real_data_is_set_against_the_synthetic_run_measured_the_same_way():
    """A plain real-data run against the plain synthetic run, not the +breakdown one stored
    after it (whose step carries the breakdown's extra work); a +trace real run against the
    +trace synthetic one; without a twin measured the same way, the plain one."""
    import json as _json

    from dlperf.report.compare import data_gaps

    common = dict(status="ok", model="resnet50", framework="torch", mode="eager", device="cuda",
                  precision="bf16", batch_size=128, threads=None)

    def row(i, data, **cfg):
        return dict(id=i, data=data, loader_workers=4 if data != "synthetic" else None,
                    result_json=_json.dumps({"config": cfg}), **common)

    t = {1: [0.030] * 8, 2: [0.045] * 8, 3: [0.060] * 8, 4: [0.060] * 8, 5: [0.090] * 8}
    rows = [row(1, "synthetic"), row(2, "synthetic", breakdown=True),
            row(3, "imagefolder"), row(4, "imagefolder", trace_dir="tr"),
            row(5, "imagefolder", breakdown=True)]
    rows.append(row(6, "synthetic", trace_dir="tr"))
    t[6] = [0.040] * 8
    rel = [g["relative_throughput"] for g in data_gaps(as_records(rows), t.__getitem__)]
    # plain 0.030 / 0.060, +trace 0.040 / 0.060, +breakdown 0.045 / 0.090 (the newest plain
    # synthetic run would have given 0.030 / 0.090 to the +breakdown one)
    assert sorted(rel) == pytest.approx(sorted([0.030 / 0.060, 0.040 / 0.060, 0.045 / 0.090]))
    # no +trace synthetic run: the +trace real run falls back to the plain one
    rel = [g["relative_throughput"] for g in data_gaps(as_records(rows[:5]), t.__getitem__)]
    assert sorted(rel) == pytest.approx(sorted([0.030 / 0.060, 0.030 / 0.060, 0.045 / 0.090]))


def test_framework_matrix_shows_newest_run_range_and_machines():
    import json as _json

    from dlperf.report.compare import framework_matrix, matrix_flat, matrix_markdown

    def row(i, fw, mode, ms, when, gpu="GPU-aaaaaaaa-1", layout=None, model="m", cfg=None,
            **kw):
        res = {"config": {**({} if layout is None else {"layout": layout}), **(cfg or {})},
               "env": {"gpus": [{"uuid": gpu, "name": "H200"}]}}
        return dict(id=i, status="ok", model=model, device="cuda", precision="bf16",
                    batch_size=8, data="synthetic", threads=None, framework=fw, mode=mode,
                    step_time_median_s=ms / 1e3, created_at=when, result_json=_json.dumps(res),
                    **kw)

    rows = [row(1, "jax", "xla", 5.0, "2026-12-01T10"), row(2, "jax", "xla", 4.0, "2026-12-01T09"),
            row(3, "torch", "eager", 10.0, "2026-12-01T10"),
            row(4, "torch", "eager", 30.0, "2026-12-01T10", layout="nchw", gpu="GPU-cccccccc"),
            row(5, "torch", "graph", 8.0, "2026-12-01T10", steady_state=False),
            # a --breakdown run is its own column, not a second run of the plain one
            row(8, "jax", "xla", 6.0, "2026-12-01T11", cfg={"breakdown": True}),
            row(6, "torch", "eager", 1.0, "2026-12-01T10", model="z"),
            dict(id=7, status="crash", model="m", framework="torch", mode="graph")]
    m, z = framework_matrix(as_records(rows))
    assert list(m["columns"]) == ["torch/eager", "torch/eager (nchw)", "torch/graph",
                                  "jax/xla", "jax/xla +breakdown"]
    # jax's newest run (row 1, 5 ms) is shown, not the faster older one
    assert m["columns"]["jax/xla"]["median_s"] == pytest.approx(5e-3)
    assert m["columns"]["jax/xla"]["runs"] == pytest.approx([4e-3, 5e-3])
    # the forced NCHW column stays out of fastest / slowest, not out of the environments
    assert m["fastest"] == "jax/xla" and m["spread"] == pytest.approx(2.0)
    assert any("machine" in d for d in m["env_differs"])
    assert z["spread"] is None and z["env_differs"] == []
    md = matrix_markdown([m, z])
    assert "**5** (2 runs: 4–5)" in md and "2.00x †" in md and "8 (not steady)" in md
    assert md.count("\n| z |") == 1 and "| 1 | – | – | – | – | – |" in md
    assert "- m bf16 b=8: machine:" in md
    flat = matrix_flat([m, z])
    assert flat[0]["jax/xla median_s"] == pytest.approx(5e-3) and flat[0]["jax/xla runs"] == 2
    assert flat[1]["jax/xla median_s"] is None and flat[1]["jax/xla runs"] == 0


def test_framework_matrix_marks_cpu_runs_of_two_hosts_and_ranges_show_their_difference():
    import json as _json

    from dlperf.report.compare import framework_matrix, matrix_markdown

    def row(i, fw, ms, platform):
        return dict(id=i, status="ok", model="m", device="cpu", precision="fp32", batch_size=8,
                    data="synthetic", threads=1, framework=fw, mode="eager" if fw == "torch"
                    else "xla", step_time_median_s=ms / 1e3, created_at=f"T{i}",
                    result_json=_json.dumps({"env": {"platform": platform}}))

    (p,) = framework_matrix(as_records([row(1, "torch", 13.751, "vm-a"), row(2, "torch", 13.749, "vm-b"),
                             row(3, "jax", 20.0, "vm-a")]))
    assert p["env_differs"] == ["platform: torch/eager vm-b, jax/xla vm-a"]
    md = matrix_markdown([p])
    assert "(2 runs: 13.749–13.751)" in md and "†" in md


def test_framework_matrix_host_speed_marks_two_hosts_not_one_machine():
    """The host-speed probe is bimodal on one H200 (72-97 or 132-203 ns): two runs of one
    machine are not marked as two environments for it; two GPU-less hosts are."""
    import json as _json

    from dlperf.report.compare import framework_matrix

    def row(i, fw, ns, gpu):
        env = {"host_speed": {"python_loop_ns": ns}, "gpus": [{"uuid": gpu}] if gpu else []}
        return dict(id=i, status="ok", model="m", device="cuda", precision="bf16", batch_size=8,
                    data="synthetic", threads=None, framework=fw, mode="eager" if fw == "torch"
                    else "xla", step_time_median_s=0.01, created_at=f"T{i}",
                    result_json=_json.dumps({"env": env}))

    (one,) = framework_matrix(as_records([row(1, "torch", 72.0, "GPU-af969e90-1"),
                               row(2, "jax", 172.0, "GPU-af969e90-1")]))
    assert one["env_differs"] == []
    (two,) = framework_matrix(as_records([row(1, "torch", 72.0, None), row(2, "jax", 172.0, None)]))
    assert two["env_differs"] == ["host speed: torch/eager 72.0 ns, jax/xla 172.0 ns"]


def test_a_torch_compile_mode_other_than_default_labels_rows_and_columns():
    import json as _json

    from dlperf.report.compare import framework_matrix, mode_speedups
    from dlperf.report.tables import row_cells

    common = dict(status="ok", model="m", device="cuda", precision="bf16", batch_size=8,
                  data="synthetic", threads=None, framework="torch", step_time_median_s=0.01)
    rows = [dict(id=1, mode="eager", result_json=_json.dumps({"config": {}}), **common),
            dict(id=2, mode="graph", result_json=_json.dumps(
                {"config": {"compile_mode": "reduce-overhead"}}), **common),
            dict(id=3, mode="graph", result_json=_json.dumps(
                {"config": {"compile_mode": "default"}}), **common)]
    assert "torch/graph [reduce-overhead]" in row_cells(as_record(rows[1]))
    assert "[" not in row_cells(as_record(rows[2]))[1]
    (m,) = framework_matrix(as_records(rows))
    assert list(m["columns"]) == ["torch/eager", "torch/graph", "torch/graph [reduce-overhead]"]
    others = sorted(c["other"] for c in mode_speedups(as_records(rows), lambda i: [0.01] * 4))
    assert others == ["torch/graph", "torch/graph [reduce-overhead]"]


def _stored(run_key, framework, mode, times, **kw):
    """A result dict as the worker writes it, with its raw measured samples."""
    import statistics

    med = statistics.median(times)
    r = {"run_key": run_key, "status": "ok", "model": "fcn5", "framework": framework,
         "mode": mode, "device": "cpu", "precision": "fp32", "batch_size": 16,
         "data": "synthetic", "threads": 1,
         "summary": {"median": med, "mean": statistics.fmean(times), "ci_low": med * 0.99,
                     "ci_high": med * 1.01},
         "throughput": {"samples": 16 * len(times), "samples_per_s": 16 / med},
         "steady_state": True, "samples": {"measure": list(times)}}
    r.update(kw)
    return r


def test_mxnet_eager_and_graph_runs_are_compared():
    """--compare modes keyed the eager baseline on a table that named torch and TensorFlow
    only: MXNet's eager/graph pairs (Gluon imperative against hybridized) were never formed.
    The baseline is the registry's eager_mode, which MXNet has and JAX has not."""
    from dlperf.registry import FRAMEWORKS
    from dlperf.report.compare import markdown, mode_speedups

    assert FRAMEWORKS["mxnet"].eager_mode == "eager" and FRAMEWORKS["jax"].eager_mode is None
    samples = {1: [0.020] * 6, 2: [0.010] * 6, 3: [0.030] * 6, 4: [0.040] * 6}
    common = dict(status="ok", model="alexnet_cifar", device="cpu", precision="fp32",
                  batch_size=16, data="synthetic", threads=2)
    rows = [dict(id=1, framework="mxnet", mode="eager", **common),
            dict(id=2, framework="mxnet", mode="graph", **common),
            dict(id=3, framework="jax", mode="xla", **common),
            dict(id=4, framework="tensorflow", mode="graph", **common)]
    (pair,) = mode_speedups(as_records(rows), samples.__getitem__)
    assert (pair["baseline"], pair["other"]) == ("mxnet/eager", "mxnet/graph")
    assert pair["speedup"] == pytest.approx(2.0) and pair["threads"] == 2
    assert "| mxnet/eager | mxnet/graph | 2.000 [" in markdown([pair])


def test_layout_and_worker_kind_cells_follow_the_registry():
    """The applied layout is named for a framework that runs several (PyTorch: NCHW or
    channels_last), not for one of one layout (MXNet: NCHW; Keras, Flax: NHWC); the kind of
    loader workers for a framework that offers several kinds (JAX)."""
    import json

    from dlperf.registry import FRAMEWORKS
    from dlperf.report.tables import row_cells

    assert FRAMEWORKS["mxnet"].layouts == ("NCHW",) and len(FRAMEWORKS["torch"].layouts) == 2
    base = {"model": "alexnet_cifar", "batch_size": 8, "status": "ok"}
    flags = json.dumps({"flags": {"layout": "NCHW"}})
    assert row_cells(as_record({**base, "framework": "torch", "mode": "graph",
                      "result_json": flags}))[1] == "torch/graph NCHW"
    assert row_cells(as_record({**base, "framework": "mxnet", "mode": "graph",
                      "result_json": flags}))[1] == "mxnet/graph"
    pipe = json.dumps({"data_info": {"placement": "pipeline",
                                     "pipeline": {"workers_kind": "processes"}}})
    cells = {fw: row_cells(as_record({**base, "framework": fw, "mode": "x", "data": "mnist",
                            "loader_workers": 2, "result_json": pipe}))[6]
             for fw in ("jax", "tensorflow", "mxnet")}
    assert cells == {"jax": "mnist, 2 wkr (processes)", "tensorflow": "mnist, 2 wkr",
                     "mxnet": "mnist, 2 wkr"}


def test_a_row_reads_as_its_record_with_its_columns_written_back(tmp_path):
    """The report reads records: a store row's result_json, with the columns made from it
    written back (a row of columns only reads the same; a column wins where both say)."""
    import json

    from dlperf.results.store import ResultStore
    from dlperf.results.view import median_s, record_of_row, setting

    with ResultStore(tmp_path / "r.db") as s:
        rid = s.add(_stored("k1", "torch", "eager", [0.010, 0.012, 0.011],
                            warnings=["a; wide CI", "busy host"],
                            config={"layout": "nchw", "loader_workers": None},
                            data_wait={"share": 0.2, "mean_s": 0.001}))
        (row,) = s.rows()
        (stored,) = s.records(samples=False)
    rec = record_of_row(row)
    assert rec.stored.id == rid and rec.identity.framework == "torch"
    assert rec.summary.median == pytest.approx(0.011) == stored.summary.median
    assert rec.timing.steady_state is True and rec.data_wait.mean_s == 0.001
    assert rec.warnings == ["a; wide CI", "busy host"] == stored.warnings
    assert setting(rec, "layout") == "nchw"
    # a column wins over the JSON (e.g. a NaN the column stores as NULL)
    over = record_of_row({**row, "step_time_median_s": None, "steady_state": 0})
    assert median_s(over) is None and over.timing.steady_state is False
    # columns only: the parts every measured row has columns for are made from them; a part
    # the record did not measure (power, MFU, data wait) is not
    bare = record_of_row({"id": 7, "model": "m", "status": "ok", "step_time_median_s": 0.5,
                          "samples_per_s": 32.0, "peak_rss_bytes": 1024, "loader_workers": 2,
                          "mean_power_w": 300.0, "data_wait_share": 0.1})
    assert (bare.summary.median, bare.throughput.samples_per_s) == (0.5, 32.0)
    assert bare.memory.peak_rss_bytes == 1024 and setting(bare, "loader_workers") == 2
    assert bare.power is None and bare.data_wait is None and bare.stored.id == 7
    # a record that has the part takes the column into it
    res = json.dumps({"power": {"available": True}})
    assert record_of_row({"mean_power_w": 300.0, "result_json": res}).power.mean_power_w == 300


def test_the_report_reads_records_and_rows_alike(tmp_path):
    """ResultStore.records() and ResultStore.rows() read once as records (as_records) give the
    same tables and comparisons."""
    from dlperf.report import sections as S
    from dlperf.report.compare import framework_ratios, mode_speedups
    from dlperf.report.matrix import framework_matrix
    from dlperf.report.tables import markdown_table
    from dlperf.results.store import ResultStore

    with ResultStore(tmp_path / "r.db") as s:
        s.add(_stored("k1", "torch", "eager", [0.020, 0.021, 0.019, 0.020]))
        s.add(_stored("k2", "torch", "graph", [0.010, 0.011, 0.010, 0.012],
                      config={"compile_mode": "reduce-overhead"}))
        s.add(_stored("k3", "mxnet", "eager", [0.030, 0.031, 0.029, 0.030]))
        s.add(_stored("k4", "mxnet", "graph", [0.015, 0.016, 0.015, 0.014]))
        s.add({**_stored("k5", "jax", "xla", [0.1]), "status": "crash", "summary": None,
               "error": "boom"})
        rows, recs = s.rows(), s.records()
        measured = S.measured(s)
        assert markdown_table(recs) == markdown_table(as_records(rows))
        assert "| fcn5 | jax/xla |" in markdown_table(recs)
        for fn in (mode_speedups, framework_ratios):
            assert fn(recs, measured) == fn(as_records(rows), measured)
        modes = mode_speedups(recs, measured)
        assert [(c["baseline"], c["other"]) for c in modes] == [
            ("mxnet/eager", "mxnet/graph"), ("torch/eager", "torch/graph [reduce-overhead]")]
        assert framework_matrix(recs) == framework_matrix(as_records(rows))
        # the matrix's columns follow the registry: torch, jax, tensorflow, mxnet
        (point,) = framework_matrix(recs)
        assert list(point["columns"]) == ["torch/eager", "torch/graph [reduce-overhead]",
                                          "mxnet/eager", "mxnet/graph"]
        inp = S.Inputs(s, rows)
        assert [r.stored.id for r in inp.records] == [r["id"] for r in rows]
        for name in ("modes", "matrix", "repeats"):
            assert S.compare(name, inp, "json") == S.compare(name, S.Inputs(s, rows), "json")


def test_scaling_comparison_writes_csv():
    """`dlperf results --compare scaling -f csv` failed on every file with a data-parallel
    result: the one-device entries that start a series lacked the env_differs of the others
    (csv's header comes from the first entry)."""
    import csv
    import io

    from dlperf.perfmodel.scaling import scaling_points
    from dlperf.report.sections import csv_text

    def row(i, world, batch, median):
        return {"id": i, "status": "ok", "model": "m", "framework": "torch", "mode": "eager",
                "device": "cuda", "precision": "fp32", "data": "synthetic", "world_size": world,
                "batch_size": batch, "per_device_batch": batch // world,
                "step_time_median_s": median, "samples_per_s": batch / median}

    pts = scaling_points(as_records([row(1, 1, 64, 0.100), row(2, 2, 128, 0.125)]))
    assert {len(p) for p in pts} == {len(pts[0])} and all("env_differs" in p for p in pts)
    got = list(csv.DictReader(io.StringIO(csv_text(pts))))
    assert [(r["scaling"], r["devices"]) for r in got] == [("weak", "1"), ("weak", "2")]
    assert float(got[1]["efficiency"]) == pytest.approx(0.8)


def test_throughput_and_mfu_headers_say_they_come_from_the_mean():
    """samples/s is DLBench's total samples / total measured time (global batch / the mean
    iteration time); beside the median of a long-tailed run it must not read as batch / median
    (the fresh-user trial: 0.600 ms median at b=8 beside 6,259 samples/s)."""
    assert {"samples/s (mean)", "tokens/s (mean)", "MFU (mean)"} <= set(COLUMNS)
    assert not {"samples/s", "tokens/s", "MFU"} & set(COLUMNS)
    # median 0.6 ms, mean 1.278 ms: 8 / mean = 6,259 samples/s
    r = _row(batch=8, median_s=0.0006, step_time_mean_s=0.0012782, samples_per_s=8 / 0.0012782)
    header, _, line = _table_lines(markdown_table(as_records([r])))[:3]
    cells = dict(zip(_cells(header), _cells(line), strict=True))
    assert cells["samples/s (mean)"] == "6259" and cells["median ms [CI]"].startswith("0.6000")
    md = Path(__file__).resolve().parents[2] / "docs" / "measurement.md"
    text = " ".join(md.read_text().split())
    assert "**Throughput**: global batch / *mean* step time" in text
    assert "global batch / step time" not in text  # the old line 10, which read as the median


def _fw_db(path, fws, gpu, **cfg):
    """A results file with an ok fcn5_tiny b=8 result per framework/mode of ``fws`` (run
    settings ``cfg``), its environment naming one GPU ``gpu``."""
    from dlperf.config import make_run_config
    from dlperf.results.schema import new_record
    from dlperf.results.store import ResultStore
    from dlperf.stats import summarize, throughput

    with ResultStore(path) as s:
        for i, fm in enumerate(fws):
            fw, mode = fm.split("/")
            r = new_record(make_run_config(model="fcn5_tiny", framework=fw, mode=mode,
                                           batch_size=8, **cfg), "ok").to_dict()
            times = [0.01 + 0.001 * i, 0.011 + 0.001 * i, 0.0105 + 0.001 * i]
            r.update(summary=summarize(times).to_dict(),
                     throughput=throughput(len(times), 8, sum(times)),
                     samples={"measure": times}, n_measured=len(times), steady_state=True,
                     env={"hostname": "vm", "gpus": [{"name": "H200", "uuid": gpu}]})
            s.add(r)
    return path


def test_rows_of_several_files_or_machines_say_where_they_come_from(tmp_path):
    """``--compare frameworks`` of a folder paired each file's torch/eager run with each jax
    run: rows that differed only in a footnote. A *from* column names the files (and the
    machines where files alone do not tell rows apart), and only when rows read alike."""
    from typer.testing import CliRunner

    from dlperf.cli import app
    from dlperf.report.compare import origin_cells

    _fw_db(tmp_path / "day1.db", ["torch/eager", "jax/xla"], "GPU-aaaaaaaa-1")
    # another run of the same point (+breakdown: another run key, the newest of neither)
    _fw_db(tmp_path / "day2.db", ["torch/eager"], "GPU-bbbbbbbb-2", breakdown=True)
    r = CliRunner().invoke(app, ["results", "--db", str(tmp_path), "--compare", "frameworks"])
    rows = [ln for ln in r.output.splitlines() if ln.startswith("| fcn5_tiny")]
    assert r.exit_code == 0 and len(rows) == 2, r.output
    assert "| from |" in r.output
    assert {ln.split(" | ")[8] for ln in rows} == {"day1", "day2 vs day1"}
    r1 = CliRunner().invoke(app, ["results", "--db", str(tmp_path / "day1.db"),
                                  "--compare", "frameworks"])
    assert r1.exit_code == 0 and "| from |" not in r1.output  # one row: nothing to tell apart
    js = CliRunner().invoke(app, ["results", "--db", str(tmp_path), "--compare", "frameworks",
                                  "-f", "json"])
    import json as _json

    got = {(c["baseline_file"], c["other_file"], c["baseline_machine"])
           for c in _json.loads(js.output)}
    assert got == {("day1", "day1", "GPU-aaaaaaaa"), ("day2", "day1", "GPU-bbbbbbbb")}

    # one file, two machines: the machines tell the rows apart
    same = [{"baseline_file": "f", "other_file": "f", "baseline_machine": m,
             "other_machine": "GPU-c"} for m in ("GPU-a", "GPU-b")]
    assert origin_cells(same, ["| x |", "| x |"]) == ["GPU-a vs GPU-c", "GPU-b vs GPU-c"]
    assert origin_cells(same, ["| x |", "| y |"]) is None


def test_one_cpu_host_is_one_environment_whatever_its_probe_reads():
    """The eager and graph points of one ``dlperf run`` on a busy 2-core host read host-speed
    probes 1.5x apart: same host, CPU and software are one environment (no †); another host of
    the same kind, or the same name on another CPU, is compared by the probe as before."""
    import json as _json

    from dlperf.env import environment_differences, environment_of
    from dlperf.report.compare import markdown, mode_speedups

    def res(ns, host="ci-box", cpu="Xeon", python="3.11.9"):
        return {"env": {"hostname": host, "platform": "Linux-6.8", "cpu_model": cpu,
                        "cpu_affinity": 2, "python": python, "gpus": [],
                        "host_speed": {"python_loop_ns": ns}},
                "versions": {"framework": "torch", "torch": "2.5.1"}}

    eager, graph = res(40.0), res(60.0)
    assert environment_of(eager)["host"] == "ci-box"
    assert environment_differences(eager, graph) == []
    (d,) = environment_differences(eager, res(60.0, host="other-box"))
    assert d.startswith("host speed: 40.0 vs 60.0")  # the name alone is never a difference
    assert environment_differences(eager, res(40.0, host="other-box")) == []
    assert any(x.startswith("host speed") for x in
               environment_differences(eager, res(60.0, cpu="Epyc")))
    assert any(x.startswith("python") for x in environment_differences(eager, res(60.0, python="3.12.1")))

    samples = {1: [0.02] * 8, 2: [0.01] * 8}
    common = dict(status="ok", model="m", framework="torch", device="cpu", precision="fp32",
                  batch_size=8, data="synthetic", threads=1)
    rows = [dict(id=1, mode="eager", result_json=_json.dumps(eager), **common),
            dict(id=2, mode="graph", result_json=_json.dumps(graph), **common)]
    (mode,) = mode_speedups(as_records(rows), samples.__getitem__)
    assert mode["env_differs"] == []
    assert "†" not in markdown([mode]) and "different environments" not in markdown([mode])
    rows[1]["result_json"] = _json.dumps(res(60.0, host="other-box"))
    (mode,) = mode_speedups(as_records(rows), samples.__getitem__)
    assert mode["env_differs"] and "†" in markdown([mode])

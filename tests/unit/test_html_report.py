"""The HTML report (dlperf.report.html): escaping, failures as failures, the environment on top,
self-containment, and a real headless Chromium that renders it without console errors.

The browser tests skip where no Chromium is installed, except where ``CI`` or
``DLPERF_REQUIRE_BROWSER`` is set (scripts/ci_browser.sh): there they fail. With
``DLPERF_SCREENSHOT_DIR`` set, the screenshot is kept there (a CI artefact).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dlperf.errors import ConfigError
from dlperf.report import html as rhtml
from dlperf.report.html_plots import batch_figure, overview_figure, points_of
from dlperf.results.schema import RunRecord
from dlperf.results.store import ResultStore

EVIL = '<script>alert("x")</script>|pipe\nnewline'
EVIL_WARN = "<b>bold</b> | a pipe\nand a newline <script>alert(2)</script>"
EVIL_ERR = "<img src=x onerror=alert(3)> out of memory | line1\nline2"


def rec(model: str = "m", batch: int = 8, *, status: str = "ok", step_s: float = 0.01,
        repeat: int = 0, framework: str = "torch", mode: str = "eager", tag: str | None = None,
        created: str = "2026-01-01T00:00:00+00:00", warnings=None, error=None,
        flags=None) -> RunRecord:
    """A synthetic result record (measured samples around ``step_s`` seconds)."""
    point = f"{model}/{framework}/{mode}/{batch}"
    env = {"hostname": "host<1>", "cpu_model": "Xeon <Gold>", "cpu_logical": 2,
           "cpu_physical": 2, "cpu_affinity": 2, "load_average_1_5_15": [3.5, 3.0, 2.0],
           "platform": "Linux", "python": "3.11", "memory_total_bytes": 8 * 1024 ** 3,
           "git": {"sha": "c0ffee" + "0" * 34, "dirty": False}, "dlperf_version": "0.1.0"}
    if flags is not None:
        env["cpu_flags"] = flags
    d = {"run_key": f"{point}#{repeat}", "point_key": point, "repeat": repeat, "status": status,
         "model": model, "framework": framework, "mode": mode, "device": "cpu",
         "precision": "fp32", "batch_size": batch, "data": "synthetic", "created_at": created,
         "error": error, "config": {"iterations": {"min_iters": 10, "min_time_s": 0.5}},
         "env": env, "versions": {"framework": framework, framework: "2.13.0+cpu"},
         "device_name": "Xeon <Gold>", "warnings": warnings}
    if status == "ok":
        xs = list(step_s * (1 + 0.01 * np.random.default_rng(repeat).standard_normal(20)))
        d.update(samples={"measure": xs},
                 summary={"median": float(np.median(xs)), "ci_low": float(min(xs)),
                          "ci_high": float(max(xs))},
                 throughput={"samples_per_s": batch / float(np.mean(xs))},
                 timing={"n_measured": 20})
    if tag:
        d["tag"] = tag
    d = {k: v for k, v in d.items() if v is not None}
    timing = d.pop("timing", {})
    return RunRecord.from_dict({**d, **timing})


def store_of(path: Path, records) -> str:
    with ResultStore(path) as s:
        for r in records:
            s.add(r)
    return str(path)


def evil_records():
    """Everything the page must survive: a hostile model name, warnings and error text, a
    failure, a batch sweep, a single-batch model, two tags."""
    out = [rec(EVIL, 8, warnings=[EVIL_WARN], tag="v1"),
           rec(EVIL, 16, tag="v1"), rec(EVIL, 32, status="oom", error=EVIL_ERR, tag="v1"),
           rec("resnet", 16, framework="jax", mode="xla", tag="v1"),
           rec("lstm", 16, status="crash", error="worker died\nexit code 9", tag="v1")]
    out += [rec(EVIL, 8, step_s=0.011, tag="v2", created="2026-02-01T00:00:00+00:00",
                warnings=[EVIL_WARN]),
            rec(EVIL, 16, step_s=0.0105, tag="v2", created="2026-02-01T00:00:00+00:00")]
    return out


@pytest.fixture
def evil_report(tmp_path) -> Path:
    db = store_of(tmp_path / "r.db", evil_records())
    return rhtml.write_html_report(db, tmp_path / "out", title="t <i>")


def test_names_warnings_and_errors_are_escaped(evil_report):
    page = evil_report.read_text()
    n_plots = page.count("class='plot'")
    assert n_plots >= 3  # overview, batch plot, trend
    # plotly.js and its stand-in in the head, one script per plot, the tables' script at the
    # end: nothing from the results
    assert page.count("<script") == 3 + n_plots
    assert "<img src=x" not in page and "<b>bold</b>" not in page
    assert "<title>t &lt;i&gt;</title>" in page and "<h1>t &lt;i&gt;</h1>" in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;|pipe" in page  # the table cell
    assert "&lt;img src=x onerror=alert(3)&gt;" in page  # the failure's error
    assert "&lt;b&gt;bold&lt;/b&gt; | a pipe" in page  # the warning
    assert "Xeon &lt;Gold&gt;" in page
    # the plots' scripts: hover text HTML-escaped (plotly shows it as text), brackets of the
    # JSON as unicode escapes, so nothing in it can end the script element
    scripts = "".join(re.findall(r"<script[^>]*>.*?</script>", page[page.index("<main>"):], re.S))
    assert scripts.count("Plotly.newPlot") == n_plots
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;\\u002fscript&gt;|pipe newline" in scripts
    assert "<script>alert" not in scripts


def test_environment_comes_first_with_what_a_reader_needs(tmp_path):
    recs = [rec("m", 8, flags="fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_tile aes"),
            rec("m", 16, flags="fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_tile aes")]
    page = rhtml.render_html("t", recs, recs)
    body = page[page.index("<main>"):]
    assert body.index("id='environment'") < body.index("id='plots'") < body.index("id='results'")
    env = body[body.index("id='environment'"):body.index("id='plots'")]
    for text in ("torch 2.13.0+cpu", "Xeon &lt;Gold&gt;", "3.50 on 2 usable CPUs", "busy host",
                 '<code class="flag">avx512f</code>', '<code class="flag">amx_tile</code>',
                 "c0ffee0000", "8.0 GiB"):
        assert text in env, text
    assert '<code class="flag">aes</code>' not in env  # not an ISA flag of interest; in details
    assert "all 9 flags" in env
    no_flags = rhtml.render_html("t", [rec()], [rec()])
    assert "not recorded with these results" in no_flags


def test_several_environments_are_a_table_with_differences_marked():
    a, b = rec("m", 8), rec("m", 16)
    b.env.cpu_model = "Epyc"
    page = rhtml.render_html("t", [a, b], [a, b])
    assert "come from 2 environments" in page
    row = re.search(r"<tr class='differs'><th>CPU</th>.*?</tr>", page)
    assert row and "Epyc" in row.group(0) and "Xeon" in row.group(0)


def test_failures_are_marked_not_drawn_as_data():
    pts = points_of([rec("m", 8), rec("m", 16), rec("m", 32, status="oom", error="no memory")])
    fig = batch_figure("m", pts)
    xs = {x for t in fig.data for x in (t.x or ())}
    assert 32 not in xs and {8, 16} <= xs
    marks = [a for a in fig.layout.annotations if "✗" in (a.text or "")]
    assert len(marks) == 2 and all("OOM" in a.text for a in marks)  # one per panel
    assert all("no memory" in a.hovertext for a in marks)
    ov = overview_figure(points_of([rec("a", 16), rec("b", 16, status="crash", error="died")]))
    bars = [t for t in ov.data if t.type == "bar"]
    assert len(bars) == 1 and list(bars[0].x) == [pytest.approx(16 / 0.01, rel=0.05)]
    crash = [a for a in ov.layout.annotations if "✗" in (a.text or "")]
    assert len(crash) == 1 and "crash" in crash[0].text and "died" in crash[0].hovertext


def test_warnings_are_marked_on_their_points():
    pts = points_of([rec("m", 8, warnings=["host busy"]), rec("m", 16)])
    fig = batch_figure("m", pts)
    rings = [t for t in fig.data if t.legendgroup == "warn"]
    assert rings and all(list(t.x) == [8] for t in rings)
    assert all("⚠ host busy" in t.hovertext[0] for t in rings)


def test_overview_for_one_batch_size_plots_against_batch_otherwise():
    one = [rec("a", 16), rec("b", 16, framework="jax", mode="xla")]
    page = rhtml.render_html("t", one, one)
    assert "id=\"plot-overview\"" in page and "plot-batch-" not in page
    sweep = [rec("a", 8), rec("a", 16)]
    page = rhtml.render_html("t", sweep, sweep)
    assert "id=\"plot-batch-0\"" in page and "plot-overview" not in page


def test_trend_across_tags_is_relative_to_the_first():
    from dlperf.report.html_plots import trend_figure, trend_points

    recs = [rec("m", 8, tag="v1"), rec("m", 8, step_s=0.012, tag="v2",
                                       created="2026-02-01T00:00:00+00:00")]
    trends = trend_points(recs)
    assert [rev for rev, _ in next(iter(trends.values()))] == ["v1", "v2"]
    fig = trend_figure("m", list(trends.items()))
    line = fig.data[0]
    assert list(line.x) == ["v1", "v2"]
    assert line.y[0] == pytest.approx(1.0) and line.y[1] == pytest.approx(1.2, rel=0.02)
    assert "id=\"plot-trend-0\"" in rhtml.render_html("t", recs[1:], recs)
    assert "plot-trend" not in rhtml.render_html("t", recs[:1], recs[:1])
    failing = [rec("f", 8, status="oom", tag="v1"),
               rec("f", 8, status="oom", tag="v2", created="2026-02-01T00:00:00+00:00")]
    assert trend_points(failing) == {}  # failed at every revision: no trend to draw
    half = trend_points([rec("f", 8, tag="v1"), failing[1]])  # ok once, then failed
    assert [rev for rev, _ in next(iter(half.values()))] == ["v1", "v2"]


def test_offline_plotly_once_per_folder_and_deterministic(tmp_path, evil_report):
    page = evil_report.read_text()
    assert re.search(r"""<(script|img|link)[^>]+(src|href)=["']?(https?:|//)""", page) is None
    assert "<link" not in page
    # plotly.js is a file beside the page, loaded by a relative path; the page itself is small
    js = evil_report.parent / rhtml.PLOTLY_JS
    assert f'<script src="{rhtml.PLOTLY_JS}"></script>' in page
    assert js.stat().st_size > 3_000_000 and len(page) < 300_000 and "Plotly.newPlot" in page
    assert "Plotly.newPlot" not in page[:page.index("<main>")]  # not inlined in the head
    # written once per folder: a second report into the folder leaves it untouched
    os.utime(js, ns=(1_000_000_000, 1_000_000_000))
    again = rhtml.write_html_report(str(tmp_path / "r.db"), evil_report.parent, title="t <i>")
    assert again.read_text() == page and js.stat().st_mtime_ns == 1_000_000_000
    other = rhtml.write_html_report(str(tmp_path / "r.db"), tmp_path / "out2", title="t <i>")
    assert other.read_text() == page  # the same file gives the same page
    # a file of that name that dlperf did not write is not overwritten
    (tmp_path / "out3").mkdir()
    (tmp_path / "out3" / rhtml.PLOTLY_JS).write_text("mine")
    with pytest.raises(ConfigError, match="is not the plotly.js dlperf writes"):
        rhtml.write_html_report(str(tmp_path / "r.db"), tmp_path / "out3")
    assert (tmp_path / "out3" / rhtml.PLOTLY_JS).read_text() == "mine"


def test_a_page_without_its_plotly_file_says_so(tmp_path, evil_report):
    page = tmp_path / "alone.html"
    page.write_text(evil_report.read_text())  # copied without plotly.js
    dom, console = open_in_chromium(page, tmp_path / "alone.png")
    assert "noplotly" in dom.split("<head>")[0]  # the page knows
    assert f"needs {rhtml.PLOTLY_JS} beside this page" in dom
    assert [ln for ln in console if "Uncaught" in ln] == []


def test_report_command_formats(tmp_path):
    from dlperf.cli import app

    db = store_of(tmp_path / "r.db", [rec("m", 8), rec("m", 16)])
    runner = CliRunner()
    r = runner.invoke(app, ["report", "--db", db, "-o", str(tmp_path / "both")])
    assert r.exit_code == 0, r.output
    assert {p.name for p in (tmp_path / "both").iterdir()} >= {"report.md", "report.html"}
    r = runner.invoke(app, ["report", "--db", db, "-o", str(tmp_path / "h"), "-f", "html"])
    assert r.exit_code == 0 and sorted(p.name for p in (tmp_path / "h").iterdir()) == [
        rhtml.PLOTLY_JS, "report.html"]
    r = runner.invoke(app, ["report", "--db", db, "-o", str(tmp_path / "x"), "-f", "pdf"])
    assert r.exit_code == 2 and "unknown report format 'pdf'" in r.output


# --- a real browser ---------------------------------------------------------------------------

def chromium() -> str:
    """The Chromium binary; skips (fails in CI) where there is none."""
    for name in (os.environ.get("DLPERF_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome", "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    why = ("no Chromium found (chromium, chromium-browser, google-chrome; or set "
           "DLPERF_CHROMIUM); install it, e.g. apt-get install -y chromium")
    if os.environ.get("CI") or os.environ.get("DLPERF_REQUIRE_BROWSER"):
        pytest.fail(why + " (required here: CI or DLPERF_REQUIRE_BROWSER is set)")
    pytest.skip(why)


def open_in_chromium(page: Path, shot: Path) -> tuple[str, list[str]]:
    """Load ``page`` headless: save a 1400x2000 screenshot to ``shot``; return (the DOM after
    the scripts ran, the page's console lines)."""
    exe = chromium()
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000",
            "--window-size=1400,2000"]
    url = page.resolve().as_uri()
    a = subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True,
                       timeout=180, check=False)
    b = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=180,
                       check=False)
    console = [ln for ln in (a.stderr + b.stderr).splitlines() if ":CONSOLE" in ln]
    return b.stdout, console


def screenshot_path(tmp_path: Path, name: str) -> Path:
    keep = os.environ.get("DLPERF_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(keep) / name
    return tmp_path / name


def test_console_check_catches_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><p>x</p><script>throw new Error('boom-1234')</script>"
                   "</body></html>")
    _, console = open_in_chromium(bad, tmp_path / "bad.png")
    assert any("Uncaught Error: boom-1234" in ln for ln in console), console


def test_report_renders_in_chromium_without_console_errors(tmp_path, evil_report):
    from PIL import Image

    shot = screenshot_path(tmp_path, "report.png")
    dom, console = open_in_chromium(evil_report, shot)
    assert console == [], console  # the page logs nothing: no error, no warning
    n_plots = evil_report.read_text().count("class='plot'")
    # plotly filled every plot div (an svg canvas per plot), nothing from the results ran
    assert dom.count('class="plot-container plotly"') == n_plots
    assert "alert(" not in re.sub(r"&lt;script&gt;alert|\\u003cscript\\u003ealert", "", dom
                                  ).split("Plotly.newPlot")[0].split("</script>")[-1]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1400, 2000)
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200  # not blank: text, plots, badges
    # the header band is dark, the page below it light
    assert sum(img.getpixel((700, 20))) < 150 and sum(img.getpixel((10, 1000))) > 600


# --- what the page shows: one line per configuration, distributions, sections with data ------

def test_points_that_differ_only_by_layout_are_two_lines():
    from dlperf.report.html_plots import batch_figure

    def lay(r, layout):
        r.identity.config = {**(r.identity.config or {}), "layout": layout}
        r.flags = {"layout": layout.upper()}
        return r

    recs = [lay(rec("resnet", b), lay_) for b in (8, 16) for lay_ in ("nchw", "nhwc")]
    for r, layout in zip(recs, ["nchw", "nhwc"] * 2):  # distinct points, as the run key says
        r.identity.point_key = r.identity.run_key = f"resnet/{r.identity.batch_size}/{layout}"
    pts = points_of(recs)
    assert len({p.series for p in pts}) == 2
    names = ["torch/eager cpu fp32 synthetic layout=nchw",
             "torch/eager cpu fp32 synthetic layout=nhwc"]  # the points' labels, less b= N
    assert sorted({p.series_label for p in pts}) == names
    fig = batch_figure("resnet", pts)
    lines = [t for t in fig.data if t.mode == "lines+markers" and t.showlegend]
    assert sorted(t.name for t in lines) == names
    assert all(list(t.x) == [8, 16] for t in lines)
    # a setting the label does not show still sets the series apart, and is named
    seeded = [rec("m", b) for b in (8, 16)] + [rec("m", b) for b in (8, 16)]
    for r in seeded[2:]:
        r.identity.config = {**r.identity.config, "seed": 1}
        r.identity.point_key = r.identity.run_key = f"m/{r.identity.batch_size}/seed1"
    labels = sorted({p.series_label for p in points_of(seeded)})
    assert labels == ["torch/eager cpu fp32 synthetic", "torch/eager cpu fp32 synthetic (seed=1)"]


def test_box_stats_are_exact_quartiles_and_tukey_fences():
    from dlperf.report.distribution import MAX_OUTLIERS, box_stats

    xs = [10.0] * 20 + [11.0, 12.0, 13.0, 14.0] + [40.0, 2.0]
    st = box_stats(xs)
    q1, med, q3 = np.percentile(xs, [25, 50, 75])
    assert (st["q1"], st["median"], st["q3"]) == (q1, med, q3)
    iqr = q3 - q1
    assert st["lowerfence"] == min(x for x in xs if x >= q1 - 1.5 * iqr)
    assert st["upperfence"] == max(x for x in xs if x <= q3 + 1.5 * iqr)
    beyond = [x for x in xs if x < st["lowerfence"] or x > st["upperfence"]]
    assert sorted(st["outliers"]) == sorted(beyond) and 40.0 in beyond and 2.0 in beyond
    assert st["n"] == len(xs) and st["mean"] == pytest.approx(np.mean(xs))
    many = box_stats(list(range(100)) + [1e6 + k for k in range(100)])  # two far clusters
    assert many["n_outliers"] <= 100 and len(many["outliers"]) <= MAX_OUTLIERS
    with pytest.raises(ValueError):
        box_stats([])


def test_each_point_has_a_distribution_box_from_its_raw_samples():
    from dlperf.report.distribution import distribution_figure, point_samples_s

    recs = [rec("m", 8), rec("m", 16), rec("m", 16, repeat=1), rec("m", 32, status="oom")]
    for r in recs[1:3]:
        r.identity.point_key = "m/torch/eager/16"
    pts = points_of(recs)
    assert [len(point_samples_s(p)) for p in pts] == [20, 40, 0]  # repeats pooled
    fig = distribution_figure("m", pts)
    (box,) = [t for t in fig.data if t.type == "box"]
    assert len(box.q1) == 2  # one box per point with samples; the OOM point has none
    med16 = np.median(point_samples_s(pts[1])) * 1e3
    assert med16 in [pytest.approx(m) for m in box.median]
    page = rhtml.render_html("t", recs, recs)
    assert "id='distribution'" in page and 'id="plot-dist-0"' in page
    assert distribution_figure("m", points_of([rec("m", 8, status="oom")])) is None


def test_convergence_section_only_with_a_target_loss(tmp_path):
    from dlperf.report.sections import Inputs, report_sections

    def real(target):
        r = rec("fcn_mnist", 32)
        r.identity.data = "mnist"
        r.identity.config = {**r.identity.config, "target_loss": target}
        r.losses = {"measure": list(np.linspace(2.0, 0.5, 20))}
        return r

    for target, shown in ((None, False), (1.0, True)):
        db = store_of(tmp_path / f"c{target}.db", [real(target)])
        with ResultStore(db, read_only=True) as store:
            titles = [t for t, _ in report_sections(Inputs(store, store.rows(),
                                                           output=tmp_path))]
            given = [t for t, _ in report_sections(Inputs(store, store.rows(), target_loss=1.5,
                                                          output=tmp_path))]
        assert ("Convergence" in titles) is shown, titles
        assert "Convergence" in given  # --target-loss gives it one


def test_sections_without_a_report_folder_leave_their_plots_out(tmp_path):
    """Inputs.output None (no report folder: no plots, as Inputs says) still gives a plotted
    section, its table without an image, instead of failing on Path(None)."""
    from dlperf.report.sections import Inputs, report_sections

    r = rec("fcn_mnist", 32)
    r.identity.data = "mnist"
    r.losses = {"measure": list(np.linspace(2.0, 0.5, 20))}
    db = store_of(tmp_path / "c.db", [r])
    with ResultStore(db, read_only=True) as store:
        sections = dict(report_sections(Inputs(store, store.rows(), target_loss=1.5)))
    assert "Convergence" in sections, list(sections)
    assert "](" not in sections["Convergence"]  # no image link
    assert not list(tmp_path.glob("*.png"))


def test_tables_sort_and_filter_in_a_real_browser(tmp_path):
    """The page's own script, driven in Chromium: a click on a column name sorts by it
    (numbers as numbers, ascending then descending, a dash last), and the filter box keeps
    the rows that hold every word typed."""
    recs = [rec(f"m{k}", 8, step_s=s) for k, s in enumerate((0.02, 0.003, 0.1, 0.0105))]
    recs += [rec("zz", 8, status="oom", error="no memory")]
    recs += [rec(f"f{k}", 8, step_s=0.01, framework="jax", mode="xla") for k in range(5)]
    page = tmp_path / "out" / "report.html"
    rhtml.write_html_report(store_of(tmp_path / "r.db", recs), page.parent)
    drive = """<script>
    window.addEventListener("load", function () {
      var t = document.querySelector("#results table"), out = [];
      function models() {
        return Array.prototype.filter.call(t.tBodies[0].rows, function (r) {
          return !r.classList.contains("hidden"); }).map(function (r) {
          return r.cells[0].textContent; }).join(",");
      }
      var step = Array.prototype.filter.call(t.tHead.rows[0].cells, function (c) {
        return c.textContent.indexOf("step ms") === 0; })[0];
      step.click(); out.push("asc=" + models());
      step.click(); out.push("desc=" + models());
      var box = document.querySelector("#results .tfilter input");
      box.value = "jax  F3"; box.dispatchEvent(new Event("input"));
      out.push("filter=" + models());
      out.push("count=" + document.querySelector("#results .tfilter .count").textContent);
      var pre = document.createElement("pre"); pre.id = "drive";
      pre.textContent = out.join(";"); document.body.appendChild(pre);
    });
    </script></body>"""
    driven = page.with_name("driven.html")
    driven.write_text(page.read_text().replace("</body>", drive))
    dom, console = open_in_chromium(driven, tmp_path / "driven.png")
    assert console == [], console
    got = dict(kv.split("=", 1) for kv in
               re.search(r'<pre id="drive">([^<]*)</pre>', dom).group(1).split(";"))
    fs = ",".join(f"f{k}" for k in range(5))
    assert got["asc"] == f"m1,{fs},m3,m0,m2,zz"  # 3, 10 (x5, order kept), 10.5, 20, 100 ms
    assert got["desc"] == f"m2,m0,m3,{fs},m1,zz"  # the OOM row's dash stays last
    assert got["filter"] == "f3" and got["count"] == "1 of 10 rows"


def layout_probe(page: Path, tmp_path: Path, width: int) -> dict[str, str]:
    """Open ``page`` in Chromium ``width`` px wide; return ``{"page": scroll width, "view":
    viewport width, "over": the sections whose boxes scroll sideways}``."""
    probe = """<script>
    window.addEventListener("load", function () { setTimeout(function () {
      var over = [];
      document.querySelectorAll(".scroll").forEach(function (e) {
        if (e.scrollWidth > e.clientWidth + 1) { over.push(e.closest("section").id); } });
      var nav = document.querySelector("nav.toc");
      var pre = document.createElement("pre"); pre.id = "probe";
      pre.textContent = "page=" + document.documentElement.scrollWidth + ";view=" +
        window.innerWidth + ";over=" + over.join(",") + ";nav=" +
        (nav.scrollWidth > nav.clientWidth + 1 ? "overflows" : "fits");
      document.body.appendChild(pre); }, 300); });
    </script></body>"""
    probed = page.with_name(f"probe{width}.html")
    probed.write_text(page.read_text().replace("</body>", probe))
    exe = chromium()
    r = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--virtual-time-budget=15000", f"--window-size={width},1200",
                        "--dump-dom", probed.resolve().as_uri()],
                       capture_output=True, text=True, timeout=180, check=False)
    text = re.search(r'<pre id="probe">([^<]*)</pre>', r.stdout).group(1)
    return dict(kv.split("=", 1) for kv in text.split(";"))


def test_the_page_fits_1400_px_and_a_narrow_screen(tmp_path):
    """A report with long names, warnings, many sections' tables: at 1400 px nothing scrolls
    sideways, not even the results table, and the navigation wraps; at 500 px (Chromium's
    narrowest window) the page itself is no wider than the screen (wide tables scroll in
    their own box)."""
    recs = [rec(m, b, step_s=0.001 * b, warnings=["wide CI of the median (64% of it): a long "
                                                   "warning that has to wrap in its cell"]
                if b == 16 else None, framework=fw, mode=mode)
            for m in ("gpt2_small_tiny", "resnet56_tiny", "lstm_tiny")
            for b in (8, 16, 32) for fw, mode in (("torch", "eager"), ("jax", "xla"))]
    page = rhtml.write_html_report(store_of(tmp_path / "r.db", recs), tmp_path / "out")
    wide = layout_probe(page, tmp_path, 1400)
    assert wide["page"] == wide["view"] == "1400" and wide["over"] == "", wide
    assert wide["nav"] == "fits"
    narrow = layout_probe(page, tmp_path, 500)
    assert int(narrow["page"]) <= int(narrow["view"]), narrow
    assert narrow["nav"] == "fits"

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
    # only plotly.js in the head and one script per plot: nothing from the results
    assert page.count("<script") == 1 + n_plots
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


def test_self_contained_and_deterministic(tmp_path, evil_report):
    page = evil_report.read_text()
    assert re.search(r"""<(script|img|link)[^>]+(src|href)=["']?https?:""", page) is None
    assert "<link" not in page
    assert len(page) > 3_000_000 and "Plotly.newPlot" in page  # plotly.js inlined
    again = rhtml.write_html_report(str(tmp_path / "r.db"), tmp_path / "out2", title="t <i>")
    assert again.read_text() == page


def test_report_command_formats(tmp_path):
    from dlperf.cli import app

    db = store_of(tmp_path / "r.db", [rec("m", 8), rec("m", 16)])
    runner = CliRunner()
    r = runner.invoke(app, ["report", "--db", db, "-o", str(tmp_path / "both")])
    assert r.exit_code == 0, r.output
    assert {p.name for p in (tmp_path / "both").iterdir()} >= {"report.md", "report.html"}
    r = runner.invoke(app, ["report", "--db", db, "-o", str(tmp_path / "h"), "-f", "html"])
    assert r.exit_code == 0 and [p.name for p in (tmp_path / "h").iterdir()] == ["report.html"]
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

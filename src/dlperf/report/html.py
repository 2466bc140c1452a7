"""The HTML report: ``report.html`` with the environment on top, interactive plots
(:mod:`dlperf.report.html_plots`), each point's per-iteration distribution
(:mod:`dlperf.report.distribution`), the results table with warnings and failures marked, the
report's sections (:data:`dlperf.report.sections.SECTIONS`, their Markdown rendered, their
PNGs inlined) and the trend of each point across tags and commits. Every table sorts and
filters (:data:`dlperf.report.html_assets.TABLE_JS`).

The page opens without a network: plotly.js is a file beside it (:data:`PLOTLY_JS`, written
once per report folder by :func:`write_plotly_js`: 4.8 MB that used to be inlined in every
page), everything else is in the page.

Records are read with :meth:`dlperf.results.store.ResultStore.records`. Every text that comes
from a result (names, errors, warnings, environment values) is HTML-escaped. The page is a
pure function of the results file (no clock, no host lookups, fixed element ids): the same file
gives the same page.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlperf.errors import ConfigError
from dlperf.outputs import atomic_write
from dlperf.report.html_assets import CSS, PAGE, PLOTLY_MISSING_JS, TABLE_JS
from dlperf.report.html_plots import (
    PointView,
    batch_figure,
    esc,
    figure_title,
    overview_figure,
    points_of,
    series_colors,
    trend_figure,
    trend_points,
)
from dlperf.report.tables import fmt_bytes_triple, fmt_sig
from dlperf.results.history import sha_of, tag_of
from dlperf.results.schema import RunRecord

__all__ = ["HTML_NAME", "PLOTLY_JS", "render_html", "write_html_report", "write_plotly_js",
           "check_plotly_js", "environments", "ISA_FLAGS"]

HTML_NAME = "report.html"


def _plotly_js_name() -> str:
    from plotly.offline import get_plotlyjs_version

    return f"plotly-{get_plotlyjs_version()}.min.js"


#: The file beside report.html that holds plotly.js (the version of the plotly package's
#: bundle in its name, so reports of two plotly versions in one folder do not clash).
PLOTLY_JS = _plotly_js_name()
#: Instruction-set flags worth showing for deep-learning kernels (vector widths, FMA, the
#: bf16/int8 dot-product and matrix extensions); the full list is behind a "details" toggle.
ISA_FLAGS = re.compile(r"^(sse4_2|avx|avx2|fma|f16c|avx512\w*|avx_vnni\w*|amx\w*|vnni\w*|"
                       r"bf16|sve\w*|sme\w*|asimd\w*|neon|i8mm)$")


def _e(text: Any) -> str:
    return html.escape(str(text))


def _versions(rec: RunRecord) -> str | None:
    """``torch 2.13.0+cpu (13.0, 91900)``: the framework, its version and its CUDA/cuDNN, as
    :func:`dlperf.env.environment_of` states them."""
    from dlperf.env import environment_of

    return environment_of({"versions": rec.versions or {}}).get("framework")


def _flags(env: dict[str, Any]) -> list[str]:
    """The CPU's instruction-set flags where the environment recorded them (``cpu_flags``,
    or ``cpu_id.flags``; a list or a space-separated string)."""
    raw = env.get("cpu_flags") or (env.get("cpu_id") or {}).get("flags") or []
    flags = raw.split() if isinstance(raw, str) else [str(f) for f in raw]
    return sorted(set(flags))


def environments(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """The distinct environments the records ran in (by host, CPU, platform and GPUs), each
    ``{"n", "host", "platform", "python", "cpu", "cpus", "flags", "memory_bytes", "load",
    "gpus", "devices", "frameworks", "dlperf", "commits", "tags", "created"}``: what a reader
    needs to judge the numbers (load: the 1-minute load average at the start of the runs,
    lowest and highest)."""
    groups: dict[tuple, list[RunRecord]] = {}
    for r in records:
        e = r.env.model_dump() if r.env is not None else {}
        gpus = tuple(str(g.get("name")) for g in e.get("gpus") or [] if isinstance(g, dict))
        groups.setdefault((e.get("hostname"), e.get("cpu_model"), e.get("platform"), gpus),
                          []).append(r)
    out = []
    for (host, cpu, platform, _gpus), recs in groups.items():
        e = recs[-1].env.model_dump() if recs[-1].env is not None else {}
        loads = [float(r.env.load_average_1_5_15[0]) for r in recs
                 if r.env and r.env.load_average_1_5_15]
        cid = e.get("cpu_id") or {}
        gl = [g for g in e.get("gpus") or [] if isinstance(g, dict)]
        stamps = sorted(str(r.identity.created_at) for r in recs if r.identity.created_at)
        git = e.get("git") or {}
        out.append({
            "n": len(recs), "host": host, "platform": platform, "python": e.get("python"),
            "cpu": cpu, "cpu_id": (f"{cid.get('vendor', '')} family {cid.get('family')} model "
                                   f"{cid.get('model')} stepping {cid.get('stepping')}"
                                   if cid.get("model") is not None else None),
            "cpus": (e.get("cpu_logical"), e.get("cpu_physical"), e.get("cpu_affinity")),
            "flags": _flags(e), "memory_bytes": e.get("memory_total_bytes"),
            "load": (min(loads), max(loads)) if loads else None,
            "gpus": [f"{g.get('name')}" + (f", driver {g.get('driver')}" if g.get("driver")
                                           else "") for g in gl],
            "devices": sorted({f"{r.identity.device}: {r.device_name}" if r.device_name
                               else str(r.identity.device) for r in recs}),
            "frameworks": sorted({v for r in recs if (v := _versions(r))}),
            "dlperf": e.get("dlperf_version"),
            "commits": sorted({s[:10] + ("+dirty" if git.get("dirty") else "")
                               for r in recs if (s := sha_of(r))}),
            "tags": sorted({t for r in recs if (t := tag_of(r))}),
            "created": (stamps[0], stamps[-1]) if stamps else None})
    return out


def _env_rows(e: dict[str, Any]) -> list[tuple[str, str]]:
    """``(name, value HTML)`` of one environment (:func:`environments`), in reading order."""
    rows = [("device", "<br>".join(_e(d) for d in e["devices"]) or "–"),
            ("frameworks", "<br>".join(_e(f) for f in e["frameworks"]) or "–")]
    logical, physical, usable = e["cpus"]
    cpu = _e(e["cpu"] or "–") + (f"<br><span class='note'>{_e(e['cpu_id'])}</span>"
                                 if e["cpu_id"] else "")
    cpu += (f"<br><span class='note'>{_e(logical)} logical / {_e(physical)} physical cores, "
            f"{_e(usable)} usable</span>" if logical else "")
    rows.append(("CPU", cpu))
    isa = [f for f in e["flags"] if ISA_FLAGS.match(f)]
    if e["flags"]:
        flags = (" ".join(f'<code class="flag">{_e(f)}</code>' for f in isa) or "–")
        flags += (f"<details><summary>all {len(e['flags'])} flags</summary>"
                  f"<span class='note'>{_e(' '.join(e['flags']))}</span></details>")
    else:
        flags = "<span class='note'>not recorded with these results</span>"
    rows.append(("CPU instruction sets", flags))
    if e["load"] is not None:
        lo, hi = e["load"]
        text = (f"{lo:.2f}" if lo == hi else f"{lo:.2f}–{hi:.2f}") + (
            f" on {usable} usable CPUs" if usable else "")
        busy = bool(usable) and hi > usable  # more runnable tasks than usable CPUs
        rows.append(("load average (1 min, at the start of the runs)",
                     _e(text) + (' <span class="badge warn">busy host</span>' if busy else "")))
    if e["gpus"]:
        rows.append(("GPUs", "<br>".join(_e(g) for g in e["gpus"])))
    if e["memory_bytes"]:
        rows.append(("memory", _e(f"{e['memory_bytes'] / 1024 ** 3:.1f} GiB")))
    rows.append(("host", _e(f"{e['host'] or '?'} · {e['platform'] or '?'} · "
                            f"Python {e['python'] or '?'}")))
    rev = ", ".join(e["commits"]) or "not recorded"
    rows.append(("dlperf, commit, tags", _e(f"dlperf {e['dlperf'] or '?'} · {rev}")
                 + (f" · tags {_e(', '.join(e['tags']))}" if e["tags"] else "")))
    if e["created"]:
        a, b = e["created"]
        rows.append(("measured (UTC)", _e(a if a == b else f"{a} to {b}")))
    return rows


def _env_html(envs: Sequence[dict[str, Any]]) -> str:
    """One environment as a grid; several as a table, one column each, the rows in which they
    differ marked."""
    if not envs:
        return "<p>No environment recorded.</p>"
    if len(envs) == 1:
        return '<div class="env">' + "".join(
            f'<div class="item"><div class="k">{_e(k)}</div><div class="v">{v}</div></div>'
            for k, v in _env_rows(envs[0])) + "</div>"
    cols = [dict(_env_rows(e)) for e in envs]
    keys = list(dict.fromkeys(k for c in cols for k in c))
    head = "".join(f"<th>environment {n + 1} ({e['n']} runs)</th>" for n, e in enumerate(envs))
    body = []
    for k in keys:
        vals = [c.get(k, "–") for c in cols]
        differs = k != "measured (UTC)" and len(set(vals)) > 1
        body.append(f"<tr class='{'differs' if differs else ''}'><th>{_e(k)}</th>"
                    + "".join(f"<td>{v}</td>" for v in vals) + "</tr>")
    return (f"<p class='note'>These results come from {len(envs)} environments; rows where "
            "they differ are marked.</p><div class='scroll'><table class='envt'><thead><tr>"
            f"<th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def _mfu(pv: PointView) -> str:
    vals = [r.mfu.mfu for r in pv.ok if r.mfu is not None and r.mfu.mfu is not None]
    return f"{100 * sum(vals) / len(vals):.1f}%" if vals else "–"


def _v(x: float | int | None) -> str:
    """The ``data-v`` attribute a column sorts by (:data:`~dlperf.report.html_assets.
    TABLE_JS`): a number, empty (sorted last) for none."""
    return f" data-v='{float(x)!r}'" if isinstance(x, (int, float)) and x == x else " data-v=''"


def _mem_bytes(rec: RunRecord) -> float | None:
    """The number a memory cell sorts by: the largest device number, else the peak RSS."""
    m = rec.memory
    if m is None:
        return None
    dev = [v for v in (m.peak_allocated_bytes, m.peak_reserved_bytes, m.nvml_used_bytes)
           if isinstance(v, (int, float))]
    return float(max(dev)) if dev else m.peak_rss_bytes


def _results_table(pts: Sequence[PointView]) -> str:
    head = ("<tr><th>model</th><th>configuration</th>"
            "<th class='num'>batch</th><th class='num'>runs</th><th>status</th>"
            "<th class='num'>step ms [95% CI]</th><th class='num' title='global batch / mean "
            "iteration time (total samples / total measured time)'>samples/s (mean)</th>"
            "<th class='num'>MFU (mean)</th><th>peak memory</th><th>warnings</th></tr>")
    rows = []
    for p in pts:
        cls = "failed" if not p.ok else ("warned" if p.warnings else "")
        st = (f"<span class='st-ok'>{_e(p.status)}</span>" if p.ok
              else f"<span class='st-fail'>✗ {_e(p.status)}</span>")
        step = "–" if p.step_s is None else fmt_sig(p.step_s * 1e3) + (
            f" [{fmt_sig(p.ci_s[0] * 1e3)}, {fmt_sig(p.ci_s[1] * 1e3)}]" if p.ci_s else "")
        rec = (p.ok or p.runs)[-1]
        mem = fmt_bytes_triple(rec)
        warn = (f"<details class='w'><summary>⚠ {len(p.warnings)} warning"
                f"{'s' if len(p.warnings) > 1 else ''}: {_e(p.warnings[0][:70])}…</summary>"
                "<ul class='warn'>" + "".join(f"<li>{_e(w)}</li>" for w in p.warnings)
                + "</ul></details>") if p.warnings else ""
        rows.append(f"<tr class='{cls}'><td>{_e(p.model)}</td><td>{_e(p.series_label)}</td>"
                    f"<td class='num'>{p.batch}</td><td class='num'>{len(p.runs)}</td>"
                    f"<td class='nw'>{st}</td>"
                    f"<td class='num' title='{_e(p.ci_text)}'{_v(p.step_s)}>{_e(step)}</td>"
                    f"<td class='num'{_v(p.samples_per_s)}>{_e(fmt_sig(p.samples_per_s))}</td>"
                    f"<td class='num'>{_mfu(p)}</td><td{_v(_mem_bytes(rec))}>{_e(mem)}</td>"
                    f"<td{_v(len(p.warnings))}>{warn}</td></tr>")
    note = ("<p class='note'>One row per point (click a column's name to sort by it); "
            "<i>configuration</i>: framework/mode with layout and other settings, device, "
            "precision, data; <i>runs</i>: its repeated runs (all used). "
            "Step time: the median of one run with the 95% bootstrap CI of the median, or the "
            "mean of several runs' medians with the 95% t interval. Failed and unavailable "
            "points are marked ✗ and drawn on the plots' axes, not as data; an amber edge "
            "marks points with warnings.</p>")
    return (f"<div class='scroll'><table><thead>{head}</thead><tbody>{''.join(rows)}</tbody>"
            f"</table></div>{note}")


def _failures(pts: Sequence[PointView]) -> str:
    out = []
    for p in pts:
        for r in p.runs:
            if r.identity.status != "ok":
                out.append(f"<h3><span class='st-fail'>✗ {_e(p.status)}</span> {_e(p.label)}"
                           f"{' #' + str(r.identity.repeat) if r.identity.repeat else ''}</h3>"
                           f"<pre class='err'>{_e(r.identity.error or '(no message)')}</pre>")
    return "".join(out)


def _markdown_html(md_text: str, img_dir: Path | None,
                   figures: Mapping[str, Any] | None = None, fig_id: str = "plot-section") -> str:
    """Markdown of a report section as HTML (raw HTML in it escaped), its PNG images inlined
    from ``img_dir`` as data URIs; a paragraph that is one image named in ``figures`` becomes
    that interactive figure (ids ``fig_id-N``)."""
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(md_text)
    if figures:
        out: list[Token] = []
        i = 0
        while i < len(tokens):
            t = tokens[i]
            kids = t.children or []
            if (t.type == "inline" and len(kids) == 1 and kids[0].type == "image"
                    and out and out[-1].type == "paragraph_open"
                    and (fig := figures.get(Path(str(kids[0].attrGet("src") or "")).name))
                    is not None):
                out.pop()  # the paragraph becomes the figure's block
                block = Token("html_block", "", 0)
                block.content = _figure_div(fig, f"{fig_id}-{sum(x.type == 'html_block' for x in out)}")
                out.append(block)
                i += 2  # the paragraph_close
                continue
            out.append(t)
            i += 1
        tokens = out
    for t in tokens:
        for child in t.children or []:
            if child.type == "image" and img_dir is not None:
                src = str(child.attrGet("src") or "")
                f = img_dir / Path(src).name
                if src.endswith(".png") and f.is_file():
                    data = base64.b64encode(f.read_bytes()).decode("ascii")
                    child.attrSet("src", f"data:image/png;base64,{data}")
    return f"<div class='md scroll'>{md.renderer.render(tokens, md.options, {})}</div>"


def _figure_div(fig: Any, div_id: str) -> str:
    """A figure as a titled block (plotly.js is loaded once, in the page's head; without it
    the block says which file is missing)."""
    cfg = {"displaylogo": False, "responsive": True,
           "toImageButtonOptions": {"format": "svg", "filename": div_id}}
    missing = (f"This plot needs {PLOTLY_JS} beside this page (dlperf report writes it "
               "there); copy the report's folder, not the page alone.")
    return (f"<div class='plot' data-missing='{_e(missing)}'>"
            f"<div class='ptitle'>{_e(figure_title(fig))}</div>"
            + fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=cfg)
            + "</div>")


def _plots(pts: Sequence[PointView]) -> tuple[str, str]:
    """(the batch plots and overview, the legend note) of the latest points."""
    by_series: dict[tuple, set[int]] = {}
    for p in pts:
        by_series.setdefault((p.model, p.series), set()).add(p.batch)
    multi = [p for p in pts if len(by_series[(p.model, p.series)]) >= 2]
    single = [p for p in pts if len(by_series[(p.model, p.series)]) < 2]
    divs = []
    colors = series_colors(pts)
    if single:
        divs.append(_figure_div(overview_figure(single, colors), "plot-overview"))
    for n, model in enumerate(dict.fromkeys(p.model for p in multi)):
        divs.append(_figure_div(batch_figure(model, [p for p in multi if p.model == model],
                                             colors), f"plot-batch-{n}"))
    note = ("<p class='note'>Hover a point for its settings, interval, runs and warnings; drag "
            "to zoom, double-click to reset, click a legend entry to hide a series. Error bars: "
            "95% intervals (throughput's scaled from the step time's). ✗: failed or "
            "unavailable, not measured.</p>")
    return "".join(divs), note


def _distributions(pts: Sequence[PointView]) -> str:
    """Per model, a box plot of each point's per-iteration step times (one figure per model,
    :func:`dlperf.report.distribution.distribution_figure`); empty when no point has samples."""
    from dlperf.report.distribution import distribution_figure

    colors = series_colors(pts)
    divs: list[str] = []
    for model in dict.fromkeys(p.model for p in pts):
        fig = distribution_figure(model, [p for p in pts if p.model == model], colors)
        if fig is not None:
            divs.append(_figure_div(fig, f"plot-dist-{len(divs)}"))
    if not divs:
        return ""
    return "".join(divs) + (
        "<p class='note'>Each box: one point's measured iterations (every ok run pooled): "
        "the box spans the quartiles, the solid line is the median and the dashed one the "
        "mean, whiskers reach the last iteration within 1.5 IQR of the box (Tukey) and "
        "circles are the iterations beyond (the most extreme 40 of a point). A wide box or "
        "many circles: a noisy machine, a step that varies, or two modes.</p>")


def _trends(all_records: Sequence[RunRecord]) -> str:
    trends = trend_points(all_records)
    if not trends:
        return ""
    by_model: dict[str, list[tuple[str, Any]]] = {}
    for key, revs in trends.items():
        by_model.setdefault(str(revs[0][1][0].identity.model), []).append((key, revs))
    return "".join(_figure_div(trend_figure(m, tr), f"plot-trend-{n}")
                   for n, (m, tr) in enumerate(sorted(by_model.items())))


def render_html(title: str, records: Sequence[RunRecord], all_records: Sequence[RunRecord],
                sections: Sequence[tuple[str, str]] = (), source: str = "",
                img_dir: Path | None = None, figures: Mapping[str, Any] | None = None,
                plotly_src: str | None = None) -> str:
    """The report page.

    Args:
        title: the page title.
        records: the results to show (the newest run per run key: every repeat of a point).
        all_records: every stored run (older re-runs, other tags and commits) for the trends.
        sections: ``(title, Markdown body)`` of the report's sections
            (:func:`dlperf.report.sections.report_sections`).
        source: where the results come from (shown under the title).
        img_dir: the folder the sections' PNG plots were written to, to inline them (a page
            on its own); None: the page links them by name (they are beside it).
        figures: interactive (plotly) figures of the sections, by the name of the image their
            Markdown links (:attr:`dlperf.report.sections.Inputs.figures`).
        plotly_src: where the page loads plotly.js from (default :data:`PLOTLY_JS`, the file
            :func:`write_plotly_js` puts beside the page).
    """
    pts = points_of(records)
    n_ok = sum(bool(p.ok) for p in pts)
    n_warn = sum(bool(p.warnings) for p in pts)
    badges = (f"<span class='badge'>{len(pts)} points, {len(records)} runs</span>"
              f"<span class='badge ok'>{n_ok} ok</span>"
              + (f"<span class='badge fail'>{len(pts) - n_ok} failed or unavailable</span>"
                 if len(pts) > n_ok else "")
              + (f"<span class='badge warn'>⚠ {n_warn} with warnings</span>" if n_warn else ""))
    blocks = [("environment", "Environment", _env_html(environments(records)))]
    plots, note = _plots(pts)
    if plots:
        blocks.append(("plots", "Step time and throughput", plots + note))
    blocks.append(("results", "Results", _results_table(pts) if pts else
                   "<p>No training results here (only what the sections below show).</p>"))
    dists = _distributions(pts)
    if dists:
        blocks.append(("distribution", "Per-iteration step time", dists))
    fails = _failures(pts)
    if fails:
        blocks.append(("failures", "Failures (results, not data)", fails))
    trends = _trends(all_records)
    if trends:
        blocks.append(("trends", "Across revisions (tags and commits)", trends
                       + "<p class='note'>Each line is one point; markers: the step time at "
                         "a revision with its 95% interval, small dots: single runs.</p>"))
    for n, (head, body) in enumerate(sections):
        blocks.append((f"section-{n}", head, _markdown_html(body, img_dir, figures,
                                                            f"plot-section-{n}")))
    body = "\n".join(f"<section class='card' id='{bid}'><h2>{_e(h)}</h2>{content}</section>"
                     for bid, h, content in blocks)
    toc = "".join(f"<a href='#{bid}'>{_e(h)}</a>" for bid, h, _ in blocks)
    return PAGE.format(title=_e(title), css=CSS, plotly_src=_e(plotly_src or PLOTLY_JS),
                       plotly_missing=PLOTLY_MISSING_JS, table_js=TABLE_JS,
                       subtitle=esc(source), badges=badges, toc=toc, body=body)


def _source_text(db: str | Path) -> str:
    """``results file NAME``, or ``results folder NAME (N files: a.db, b.db, ...)``."""
    from dlperf.results.dbfile import results_files

    p = Path(db)
    if not p.is_dir():
        return f"results file {p.name}"
    names = [Path(f).name for f in results_files(p)]
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return f"results folder {p.name or str(p)} ({len(names)} files: {shown})"


def write_html_report(db: str, output: Path, title: str = "dlperf report",
                      target_loss: float | None = None) -> Path:
    """Write ``output/report.html`` from the results file ``db`` (or a folder of them, read as
    one: :func:`dlperf.results.merge.open_results`; the output folder is created);
    return its path. The sections' PNG plots (those that are not interactive figures) and
    plotly.js (:func:`write_plotly_js`) are written beside it, and the page links them, so a
    report folder holds each once and the page stays small.

    Raises:
        ConfigError: ``db`` holds no results and no all-reduce runs.
    """
    from dlperf.report.sections import Inputs, report_sections
    from dlperf.results.merge import open_results

    output = Path(output)
    with open_results(db) as store:
        records = store.records()
        if not records and not store.collectives():
            raise ConfigError(f"{db} holds no results yet: store some with "
                              f"`dlperf run ... --db {db}`")
        all_records = store.records(latest=False, samples=False)
        output.mkdir(parents=True, exist_ok=True)
        inp = Inputs(store, store.rows(), target_loss=target_loss, output=output,
                     figures={}, source=db)
        sections = report_sections(inp)
        page = render_html(title, records, all_records, sections, source=_source_text(db),
                           figures=inp.figures)
    write_plotly_js(output)
    path = output / HTML_NAME
    atomic_write(path, page)  # an earlier report or --force: cli check_out_dir
    return path


def check_plotly_js(path: Path) -> None:
    """A file named like :data:`PLOTLY_JS` in a report folder: nothing to say when it is
    another plotly version's or this very plotly.js (a report written again leaves it as it
    is).

    Raises:
        OutputRefused: it is named :data:`PLOTLY_JS` and holds something else (dlperf does not
            replace what it did not write).
    """
    from plotly.offline import get_plotlyjs

    from dlperf.outputs import OutputRefused

    path = Path(path)
    if path.name != PLOTLY_JS or not path.exists():
        return
    js = get_plotlyjs().encode("utf-8")
    if not path.is_file() or path.stat().st_size != len(js) or path.read_bytes() != js:
        raise OutputRefused(f"{str(path)!r} is there and is not the plotly.js dlperf writes "
                            f"({len(js)} bytes); remove it, or give another report folder")


def write_plotly_js(folder: Path) -> Path:
    """``folder/``:data:`PLOTLY_JS`: the plotly package's plotly.js, written once per folder
    (a report written again leaves it as it is; written atomically, so a kill never leaves
    half of it); its path.

    Raises:
        OutputRefused: a file of that name is there and is not this plotly.js
            (:func:`check_plotly_js`).
    """
    from plotly.offline import get_plotlyjs

    path = Path(folder) / PLOTLY_JS
    if path.exists():
        check_plotly_js(path)
        return path
    atomic_write(path, get_plotlyjs().encode("utf-8"))
    return path

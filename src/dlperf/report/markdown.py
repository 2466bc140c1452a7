"""The Markdown report: title, environment, results table, failures, embedded plots.

Output is a pure function of the rows and ``env`` (no clock, no host lookups), so the same
inputs give byte-identical ``report.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlperf.outputs import atomic_write
from dlperf.report.cells import md_safe_body
from dlperf.report.plots import plot_step_time_vs_batch
from dlperf.report.tables import COLUMNS, markdown_table, sort_rows, status_label
from dlperf.results.schema import RunRecord
from dlperf.results.view import is_ok

__all__ = ["write_report", "REPORT_NAME"]

REPORT_NAME = "report.md"
_ERROR_DETAIL_CHARS = 300


def _md(s: Any) -> str:
    """Escape text for Markdown prose: HTML brackets and table pipes, newlines to spaces."""
    s = str(s).replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return " ".join(s.split())


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Nested dict -> sorted ``[("a.b", "value"), ...]``; lists joined with ', '; None skipped."""
    out: list[tuple[str, str]] = []
    for k in sorted(d, key=str):
        v = d[k]
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.extend(_flatten(v, f"{name}."))
        elif v is None:
            continue
        elif isinstance(v, (list, tuple)):
            out.append((name, ", ".join(str(x) for x in v)))
        else:
            out.append((name, str(v)))
    return out


def _environment(recs: Sequence[RunRecord], env: Mapping[str, Any] | None) -> list[str]:
    lines = ["## Environment", ""]
    devices = sorted(
        {
            (str(r.identity.device or ""), str(r.device_name or ""))
            for r in recs
            if r.identity.device or r.device_name
        }
    )
    if devices:
        names = [f"{d} ({n})" if d and n and d != n else (n or d) for d, n in devices]
        lines.append("- devices: " + "; ".join(_md(x) for x in names))
    frameworks = sorted({str(r.identity.framework) for r in recs if r.identity.framework})
    if frameworks:
        lines.append("- frameworks: " + ", ".join(_md(f) for f in frameworks))
    stamps = sorted(str(r.identity.created_at) for r in recs if r.identity.created_at)
    if stamps:
        span = stamps[0] if stamps[0] == stamps[-1] else f"{stamps[0]} to {stamps[-1]}"
        lines.append(f"- results created: {_md(span)}")
    for key, value in _flatten(env or {}):
        lines.append(f"- {_md(key)}: {_md(value)}")
    if len(lines) == 2:
        lines.append("No environment information.")
    return lines + [""]


def _failures(recs: Sequence[RunRecord]) -> list[str]:
    failed = [r for r in sort_rows(recs) if not is_ok(r)]
    if not failed:
        return []
    lines = ["## Failures", "", "Failures are results (MEASUREMENT rule 11); each is listed with its configuration.", ""]
    for r in failed:
        i = r.identity
        cfg = " ".join(
            str(v)
            for v in (i.model, i.framework, i.mode, i.device, i.precision, i.data)
            if v not in (None, "")
        ) + (f" {i.threads} threads" if i.threads else "")
        err = " ".join(str(i.error or "").split())
        if len(err) > _ERROR_DETAIL_CHARS:
            err = err[: _ERROR_DETAIL_CHARS - 1] + "…"
        line = f"- **{_md(status_label(i.status))}** {_md(cfg)}, batch {i.batch_size}"
        if i.run_key:
            line += f" (run `{_md(i.run_key)}`)"
        lines.append(line + (f": {_md(err)}" if err else ""))
    return lines + [""]


def write_report(
    rows: Sequence[RunRecord],
    out_dir: str | Path,
    *,
    title: str = "dlperf report",
    env: dict | None = None,
    sections: Sequence[tuple[str, str]] = (),
) -> Path:
    """Write ``out_dir/report.md`` with the PNG plots next to it; return the path of report.md.

    Sections: title and a count of results by status; environment (devices and frameworks from
    the rows, then every entry of ``env`` flattened as ``key.sub: value``, sorted); the results
    table (:func:`dlperf.report.tables.markdown_table`) with a legend of its columns; failures
    with their (longer) error text; one plot per model
    (:func:`dlperf.report.plots.plot_step_time_vs_batch`) embedded by relative link. Creates
    ``out_dir``; overwrites an existing report.md and plots of the same names. ``sections``
    are extra ``(heading, markdown body)`` pairs placed after the results table (e.g. the
    graph-optimisation and framework comparisons of :mod:`dlperf.report.compare`).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = Counter(str(r.identity.status) for r in rows)
    n_ok = counts.pop("ok", 0)
    summary = f"{len(rows)} result(s): {n_ok} ok"
    if counts:
        summary += ", " + ", ".join(f"{n} {status_label(s)}" for s, n in sorted(counts.items()))

    lines = [f"# {_md(title)}", "", summary + ".", ""]
    lines += _environment(rows, env)
    lines += ["## Results", ""]
    if rows:
        lines.append(markdown_table(rows).rstrip("\n"))
        lines += [
            "",
            f"Columns: *{COLUMNS[COLUMNS.index('median ms [CI]')]}* is the median time per training iteration with the "
            "bootstrap confidence interval of the median; *samples/s (mean)* and *tokens/s "
            "(mean)* count measured steps x global batch over the measured time (global batch "
            "over the *mean* iteration time, so below global batch over the median when "
            "iterations have a long tail); *peak mem* gives the "
            "framework-allocated peak / framework-reserved peak / NVML used (process peak RSS "
            "when no device numbers exist). *ok (not steady)*: the step time never settled. "
            "*MFU (mean)*: analytic model FLOP/s (from that throughput) over the matmul ceiling "
            "measured in the same run at the run's precision. *data wait*: the share of the measured time the iterations "
            "spent waiting for their batches (total wait / total measured time; real data "
            "through an input pipeline; *input-bound* above the run's threshold). *J/iter*: energy per iteration (NVML, "
            "GPU runs). *N wkr*: loader workers of the input pipeline.",
            "",
        ]
    else:
        lines += ["No results.", ""]
    for heading, body in sections:
        lines += [f"## {_md(heading)}", "", md_safe_body(body.rstrip("\n")), ""]
    lines += _failures(rows)

    plots = plot_step_time_vs_batch(rows, out)
    if plots:
        lines += ["## Step time vs batch size", ""]
        # plot_step_time_vs_batch returns one path per model, in sorted model order
        for model, path in zip(sorted({str(r.identity.model) for r in rows}), plots):
            rel = path.relative_to(out).as_posix()
            lines += [f"### {_md(model)}", "", f"![{_md(model)}: step time and throughput vs batch size]({rel})", ""]

    path = out / REPORT_NAME
    atomic_write(path, "\n".join(lines).rstrip("\n") + "\n")  # checked: cli check_out_dir
    return path

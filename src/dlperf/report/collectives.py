"""Stored collective benchmark runs (``dlperf allreduce --db FILE``): one table per run
(``dlperf results --compare allreduce``, the report's "All-reduce" section)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlperf.report.cells import fmt_opt as _f

__all__ = ["collectives_markdown"]


def collectives_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table per stored collective benchmark run (``ResultStore.collectives()``
    rows): message size, time per call (us, the slowest rank's mean), algbw and busbw (GB/s,
    nccl-tests' definitions: algbw = bytes / time, busbw = algbw x 2(n-1)/n for all-reduce),
    rank imbalance and wrong elements."""
    if not rows:
        return "No stored all-reduce runs (dlperf allreduce --db FILE stores one).\n"
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], []).append(r)
    parts = []
    for run_id, rs in runs.items():
        r0 = rs[0]
        parts.append(f"**{r0['benchmark']}** {r0['backend']}, {r0['nranks']} ranks, {r0['dtype']}"
                     f" on {r0['device_name'] or 'cpu'} (run {run_id}, {r0['created_at']})\n")
        lines = ["| size (B) | count | time (us) | algbw (GB/s) | busbw (GB/s) | imbalance | "
                 "wrong |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sorted(rs, key=lambda x: x["size_bytes"]):
            t = r["time_s"]
            lines.append(f"| {r['size_bytes']:,} | {_f(r['count'], ',d')} | "
                         f"{_f(None if t is None else t * 1e6, '.2f')} | "
                         f"{_f(r['algbw_gbps'], '.2f')} | {_f(r['busbw_gbps'], '.2f')} | "
                         f"{_f(r['imbalance'], '.3f')} | {_f(r['wrong'], 'd')} |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)

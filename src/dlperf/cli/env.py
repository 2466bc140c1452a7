"""``dlperf env``: the environment fingerprint recorded with every result, as readable text
(``--format json``: the fingerprint itself)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from dlperf.cli import common
from dlperf.cli.common import guard
from dlperf.errors import unknown_choice

FORMATS = ("text", "json")


def _gib(n: Any) -> str:
    return f"{n / 2**30:.1f} GiB" if isinstance(n, (int, float)) else "?"


def _cpu_lines(e: Mapping[str, Any]) -> list[tuple[str, str]]:
    cid = e.get("cpu_id") or {}
    ident = ", ".join(x for x in (
        cid.get("vendor"),
        (f"family {cid.get('family')} model {cid.get('model')} stepping {cid.get('stepping')}"
         if cid.get("model") is not None else None),
        f"{cid['mhz']:.0f} MHz" if isinstance(cid.get("mhz"), (int, float)) else None,
        f"cache {cid['cache']}" if cid.get("cache") else None) if x)
    rows = [("CPU", f"{e.get('cpu_model') or '?'}" + (f" ({ident})" if ident else "")),
            ("", f"{e.get('cpu_affinity')} usable of {e.get('cpu_logical')} logical CPUs "
                 f"({e.get('cpu_physical')} physical cores)")]
    flags = e.get("cpu_flags")
    if flags is not None:
        rows.append(("", "instruction sets: " + (" ".join(flags) or "none of AVX/AMX/FMA/SVE")))
    return rows


def env_text(e: Mapping[str, Any], frameworks: Mapping[str, tuple[bool, str]] | None = None,
             threads: str | None = None) -> str:
    """The environment ``e`` (:func:`dlperf.env.collect_env`'s dict) as aligned text lines:
    dlperf and its commit, the host, the CPU with its instruction-set flags, memory, load,
    host speed, GPUs, ``frameworks`` (name -> ``(available, version or why not)``), the thread
    policy's choice now (``threads``, :meth:`dlperf.env.ThreadChoice.line`) and the relevant
    environment variables."""
    g = e.get("git") or {}
    rows: list[tuple[str, str]] = [
        ("dlperf", f"{e.get('dlperf_version')}" + (
            f" (git {str(g['sha'])[:12]}{', modified' if g.get('dirty') else ''})"
            if g.get("sha") else "")),
        ("host", f"{e.get('hostname')}: {e.get('platform')}, Python {e.get('python')}"),
        *_cpu_lines(e),
        ("memory", f"{_gib(e.get('memory_total_bytes'))} total, "
                   f"{_gib(e.get('memory_available_bytes'))} available"),
    ]
    load = e.get("load_average_1_5_15")
    if load:
        rows.append(("load", f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min "
                             f"average) on {e.get('cpu_affinity')} usable CPUs"))
    busy = e.get("usable_cpu_busy_percent")
    if busy:
        rows.append(("", "usable CPUs busy: " + ", ".join(f"{b:.0f}%" for b in busy)))
    hs = e.get("host_speed") or {}
    if hs.get("python_loop_ns"):
        rows.append(("host speed", f"{hs['python_loop_ns']:.1f} ns per Python loop iteration "
                                   "(one thread; lower is faster)"))
    if threads:
        rows.append(("threads", threads.removeprefix("threads: ")))
    gpus = [x for x in e.get("gpus") or [] if isinstance(x, Mapping)]
    rows += [("GPU" if i == 0 else "", ", ".join(str(x[k]) for k in ("name", "uuid") if x.get(k))
              + (f", {_gib(x['memory_total_bytes'])}" if x.get("memory_total_bytes") else "")
              + (f", driver {x['driver']}" if x.get("driver") else "")
              + (f", power limit {x['power_limit_w']:.0f} W"
                 if isinstance(x.get("power_limit_w"), (int, float)) else ""))
             for i, x in enumerate(gpus)] or [("GPU", "none (NVML finds no NVIDIA GPU)")]
    for i, (name, (ok, what)) in enumerate((frameworks or {}).items()):
        rows.append(("frameworks" if i == 0 else "",
                     (what if str(what).startswith(name) else f"{name} {what}") if ok
                     else f"{name}: not available ({what})"))
    ev = e.get("env") or {}
    rows += [("variables" if i == 0 else "", f"{k}={v}") for i, (k, v) in enumerate(ev.items())]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n"


def env(fmt: Annotated[str, typer.Option("--format", "-f", help="text (readable) or json (the raw fingerprint stored with results).")] = "text",
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
        framework: Annotated[bool, typer.Option(help="Also import the frameworks for their versions.")] = True,
        threads: Annotated[bool | None, typer.Option("--threads/--no-threads", help="Text: also measure the host's load (0.5 s) and say which threads `dlperf run` would choose now. Default: on.")] = None) -> None:
    """Print the environment recorded with every result: dlperf, host, CPU and its
    instruction sets, memory, load, GPUs, frameworks."""
    def body() -> None:
        from dlperf.env import choose_threads, collect_env
        from dlperf.frameworks import ADAPTERS
        from dlperf.frameworks.common import quiet_native_logs
        from dlperf.frameworks.probe import available_all

        if fmt not in FORMATS:
            raise unknown_choice("format", fmt, FORMATS)
        e = collect_env(speed=not as_json and fmt == "text")
        with quiet_native_logs():  # a framework's C++ start-up lines (TensorFlow's came twice)
            avail = available_all(ADAPTERS) if framework else {}
        if as_json or fmt == "json":
            if framework:
                e["frameworks"] = {n: why for n, (_, why) in avail.items()}
            sys.stdout.write(json.dumps(e, indent=1, default=str) + "\n")
            return
        line = choose_threads().line() if threads is not False else None
        common.out.print(env_text(e, avail, line), markup=False, highlight=False, end="",
                         soft_wrap=True)

    guard(body)

"""JAX runs under ``jax.profiler``: the trace of ``--breakdown``/``--trace`` (:func:`trace_steps`)
and the exposed communication of a data-parallel run (:func:`profile_comm`).

Both run the training step itself (``run.step()``, the fused step of
:class:`dlperf.frameworks.jax.step.JaxStep`) for one warm-up and ``n`` steps annotated
``StepTraceAnnotation("dlperf_step", step_num=i)``, with Python function tracing off (it would
inflate the host times), then parse the XSpace that the profiler writes
(:mod:`dlperf.measure.breakdown.xspace`). ``run`` is anything with ``step()`` (returns the
loss) and ``state`` (the train state, blocked on before and after).

Exposed communication (after the measured segment, a separate, labelled measurement): the
trace's device ops, XLA collectives against the device's other ops
(:func:`dlperf.measure.breakdown.overlap.exposed_from_xspace`).
"""

from __future__ import annotations

import glob
import shutil
import time
from pathlib import Path
from typing import Any

from dlperf.measure.breakdown.overlap import exposed_from_xspace
from dlperf.measure.breakdown.xla import parse_hlo
from dlperf.measure.breakdown.xspace import (
    STEP_NAME,
    jax_trace,
    load_planes,
    steps_of,
    to_chrome_trace,
)
from dlperf.tempdirs import make_owned


def profiler_options(jax: Any) -> dict[str, Any]:
    """Keyword arguments of ``jax.profiler.trace``/``start_trace``: Python tracing off where
    this JAX has ``ProfileOptions`` (empty otherwise)."""
    if not hasattr(jax.profiler, "ProfileOptions"):
        return {}
    opts = jax.profiler.ProfileOptions()
    if hasattr(opts, "python_tracer_level"):
        opts.python_tracer_level = 0  # Python tracing would slow the host
    return {"profiler_options": opts}


def _annotated_steps(jax: Any, run: Any, n: int) -> float:
    """One warm-up step (blocked on: keeps profiler start-up costs out, not annotated), then
    ``n`` annotated steps; returns the wall time of the ``n`` steps (s), state blocked on."""
    jax.block_until_ready(run.step())
    t0 = time.perf_counter()
    loss = None
    for i in range(n):
        with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
            loss = run.step()
    jax.block_until_ready((loss, run.state))
    return time.perf_counter() - t0


def trace_steps(jax: Any, run: Any, hlo_text: str | None, n: int, folder: Any) -> dict[str, Any]:
    """Trace one warm-up and ``n`` steps with ``jax.profiler.trace(folder)``; parse the XSpace
    it writes with ``jax.profiler.ProfileData`` and the compiled step's HLO text (phases and op
    classes of the kernels; None: no HLO metadata).

    Returns ``{"trace": TraceData, "files": {"xplane", "logdir", "chrome_trace"}}`` (the
    profiler's Chrome trace where it wrote one, else one converted from the planes).
    """
    jax.block_until_ready(run.state)
    with jax.profiler.trace(str(folder), **profiler_options(jax)):
        _annotated_steps(jax, run, n)
    planes, xplane = load_planes(folder, prefer="profiledata")
    trace = jax_trace(planes, parse_hlo(hlo_text) if hlo_text else None)
    chrome = sorted(glob.glob(str(Path(folder) / "**" / "*.trace.json.gz"), recursive=True))
    files: dict[str, Any] = {"xplane": xplane, "logdir": folder}
    files["chrome_trace"] = Path(chrome[0]) if chrome else to_chrome_trace(
        planes, Path(folder) / "trace.json.gz")
    return {"trace": trace, "files": files}


def _comm_record(k: int) -> dict[str, Any]:
    """The exposed-communication record before anything is known (``exposed`` None)."""
    return {"comm": None, "compute": None, "overlapped": None, "exposed": None,
            "hidden_share": None, "profiled_iters": k, "rule": None,
            "profiled_wall_s_per_iter": None, "exposed_share_of_step": None, "n_comm_spans": 0,
            "note": "separate profiled iterations after the measured segment", "reason": None}


def _start(jax: Any, folder: str, out: dict[str, Any]) -> bool:
    """Start ``jax.profiler`` into ``folder``; False (and the reason in ``out``) if it fails."""
    try:
        jax.profiler.start_trace(folder, **profiler_options(jax))
        return True
    except Exception as e:  # noqa: BLE001 - recorded; the steps still run
        out["reason"] = f"jax.profiler did not start: {type(e).__name__}: {e}"[:500]
        return False


def _profiled_steps(jax: Any, run: Any, k: int, started: bool) -> float:
    """:func:`_annotated_steps` under a started profiler; a failed step is the run's failure,
    so it stops the profiler (leaves no trace running) and raises."""
    try:
        return _annotated_steps(jax, run, k)
    except BaseException:
        if started:
            try:
                jax.profiler.stop_trace()
            except Exception:  # noqa: BLE001
                pass
        raise


def _read_exposed(folder: str, k: int, wall_s: float, out: dict[str, Any]) -> None:
    """Fill ``out`` from the trace in ``folder`` of ``k`` annotated steps (and the warm-up):
    only device ops that start after the first annotated step's start are counted, unless the
    annotations are missing (then the warm-up's ops too, divided by ``k + 1``)."""
    try:
        planes, _ = load_planes(folder, prefer="profiledata")
        steps = steps_of(planes)
        since = steps[0][0] if len(steps) == k else None
        res = exposed_from_xspace(planes, k if since is not None else k + 1, since)
    except Exception as e:  # noqa: BLE001
        out["reason"] = f"the trace could not be read: {type(e).__name__}: {e}"[:500]
        return
    out.update(res)
    if since is None:
        out["note"] += (f"; {len(steps)} of {k} step annotations found: the warm-up "
                        f"step's ops are counted too (divided by {k + 1})")
    if out["exposed"] is not None and wall_s > 0:
        out["exposed_share_of_step"] = out["exposed"] / (wall_s / k)


def profile_comm(jax: Any, run: Any, k: int) -> dict[str, Any]:
    """Run one warm-up and ``k`` steps under ``jax.profiler`` and return the exposed
    communication per iteration (s) from the trace's device ops
    (:func:`dlperf.measure.breakdown.overlap.exposed_from_xspace`; the same keys as the PyTorch
    adapter's, plus ``per_device``, ``devices``, ``comm_ops`` and ``reason``).

    Runs after the measured segment. Every process runs the same ``k + 1`` steps whatever
    happens to its profiler (the steps' collectives must match across processes); a
    profiler that does not start or stop, or a trace that cannot be read or holds no
    collective, gives ``exposed: None`` with the ``reason`` instead of an exception. Rank 0's
    numbers are stored.
    """
    out = _comm_record(k)
    owned = make_owned("dlperf-jaxcomm-")  # reclaimed after a SIGKILL
    folder = str(owned / "trace")
    Path(folder).mkdir()
    try:
        jax.block_until_ready(run.state)
        started = _start(jax, folder, out)
        wall_s = _profiled_steps(jax, run, k, started)
        out["profiled_wall_s_per_iter"] = wall_s / k
        if not started:
            return out
        try:
            jax.profiler.stop_trace()
        except Exception as e:  # noqa: BLE001
            out["reason"] = f"jax.profiler did not stop: {type(e).__name__}: {e}"[:500]
            return out
        _read_exposed(folder, k, wall_s, out)
        return out
    finally:
        shutil.rmtree(owned, ignore_errors=True)

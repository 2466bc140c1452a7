"""TensorFlow traces: the train step under ``tf.profiler.experimental``, written as Chrome-trace
JSON and parsed for ``--breakdown`` / ``--trace`` (:mod:`dlperf.measure.breakdown`).

Each profiled step runs inside ``Trace("dlperf_step", step_num=i)``; an eager step on one
device also has each stage inside ``Trace("dlperf_phase:t_x")`` (:func:`phase_spans`), which
is how the trace parser puts eager ops in their phase. The profiler writes an XSpace protobuf;
it is read with TensorFlow's ``xplane_pb2``. In ``xla`` mode the optimised HLO of the step
(``experimental_get_compiler_ir``) names the ops the trace shows.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from dlperf.measure.breakdown.xla import parse_hlo
from dlperf.measure.breakdown.xspace import (
    PHASE_PREFIX,
    STEP_NAME,
    load_planes,
    tf_trace,
    to_chrome_trace,
)


def phase_spans(tf: Any) -> Callable[[str], AbstractContextManager[Any]]:
    """``span(stage)``: a profiler annotation ``dlperf_phase:<stage>`` around a stage."""
    trace_me = tf.profiler.experimental.Trace
    return lambda stage: trace_me(PHASE_PREFIX + stage)


def profile_steps(tf: Any, run: Callable[[], Any], n: int, folder: Any, mode: str,
                  xla_fn: Any = None, first_batch: Any = None,
                  model_scope: str | None = None) -> dict[str, Any]:
    """Trace one warm-up and ``n`` calls of ``run`` (one training iteration each, returning
    its loss) into ``folder``; return ``{"trace": TraceData, "files": {"xplane", "logdir",
    "chrome_trace"}}``.

    Args:
        mode: the run's mode (``eager``: ops attributed by the stage annotations).
        xla_fn: in ``xla`` mode, the ``tf.function(jit_compile=True)`` step, whose optimised
            HLO for ``first_batch`` names the trace's ops; else None.
        model_scope: the Keras model's name (its layers' scope in TensorFlow op names).
    """
    trace_me = tf.profiler.experimental.Trace
    tf.profiler.experimental.start(str(folder))
    try:
        out = run()  # warm-up inside the profiler, not annotated
        for i in range(n):
            with trace_me(STEP_NAME, step_num=i, _r=1):
                out = run()
        out.numpy()
    finally:
        tf.profiler.experimental.stop()
    planes, xplane = load_planes(folder, prefer="protobuf")
    hlo = None
    if xla_fn is not None:
        hlo = parse_hlo(xla_fn.experimental_get_compiler_ir(*first_batch)(
            stage="optimized_hlo"))
    trace = tf_trace(planes, mode, hlo, model_scope=model_scope)
    chrome = to_chrome_trace(planes, Path(folder) / "trace.json.gz")
    return {"trace": trace, "files": {"xplane": xplane, "logdir": folder,
                                      "chrome_trace": chrome}}

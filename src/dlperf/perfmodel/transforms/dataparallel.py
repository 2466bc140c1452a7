"""Data parallel on one device's trace (:func:`to_data_parallel`): DDP's bucketed all-reduces
inserted at their gradient-ready ops and overlapped with the rest of the backward (WFBP). The
step-level model of data parallelism is :mod:`dlperf.perfmodel.dataparallel`.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace

from dlperf.perfmodel.replay import DeviceOp, StepTrace

#: The lane of the inserted all-reduces (a stream of its own, as NCCL's and gloo's are).
COMM_LANE = -1


def to_data_parallel(step: StepTrace, bucket_bytes: Sequence[float],
                     allreduce_s: Callable[[float], float]) -> StepTrace:
    """``step`` (one device) with DDP's gradient all-reduces inserted, wait-free
    backpropagation (WFBP, Zhang et al. 2017; PyTorch DDP, Li et al. VLDB 2020):

    * bucket ``k`` (``bucket_bytes`` in reduction order: DDP fills buckets in reverse
      parameter order, which is the order backward produces gradients) is ready when the
      backward (phase ``t_b``) has run the share ``sum(bytes[:k+1]) / sum(bytes)`` of its
      device time: the first backward op past that share is its gradient-ready op;
    * its all-reduce (``allreduce_s(bytes)``: a measured all-reduce sweep or the link model,
      :mod:`dlperf.perfmodel.comm`) runs on :data:`COMM_LANE` after that op and after the
      previous bucket's all-reduce;
    * the ops after the backward (the optimizer) wait for the last all-reduce.

    Raises:
        ValueError: no bucket, or no backward op in the trace.
    """
    if not bucket_bytes:
        raise ValueError("no gradient bucket to all-reduce")
    ops = list(step.ops)
    back = [i for i, o in enumerate(ops) if o.phase == "t_b"]
    if not back:
        raise ValueError("the trace has no backward op (phase t_b): the gradients' ready times "
                         "are unknown")
    total_b = sum(ops[i].dur_s for i in back) or 1.0
    total_bytes = float(sum(bucket_bytes))
    # the backward's time up to and including each of its ops; a bucket's ready op is the
    # first whose sum reaches the bucket's share (the last op where rounding leaves none)
    upto = list(itertools.accumulate(ops[i].dur_s for i in back))
    ready = [back[min(bisect.bisect_left(upto, done / total_bytes * total_b - 1e-15),
                      len(back) - 1)]
             for done in itertools.accumulate(map(float, bucket_bytes))]
    # each all-reduce goes right after its ready op (``ready`` does not decrease): the ops'
    # indices once they are in, and the last all-reduce's
    buckets_at: dict[int, list[int]] = {}
    for k, i in enumerate(ready):
        buckets_at.setdefault(i, []).append(k)
    pos, n = [], 0
    for i in range(len(ops)):
        pos.append(n)
        n += 1 + len(buckets_at.get(i, ()))
    last_comm = pos[ready[-1]] + len(buckets_at[ready[-1]])
    out: list[DeviceOp] = []
    for i, o in enumerate(ops):
        after = tuple(pos[a] for a in o.after)
        if i > back[-1]:  # after the backward (every t_b op is at or before back[-1])
            after = (*after, last_comm)
        out.append(replace(o, after=after))
        out += [DeviceOp(lane=COMM_LANE, dur_s=allreduce_s(bucket_bytes[k]), kind="collective",
                         name=f"all-reduce bucket {k}", op_class="communication",
                         op="all_reduce", phase="t_b", launch=o.launch, after=(pos[i],),
                         bytes=bucket_bytes[k])
                for k in buckets_at.get(i, ())]
    return replace(step, ops=tuple(out)).with_note(
        f"data parallel: {len(bucket_bytes)} buckets, {total_bytes / 2**20:.1f} MiB all-reduced")

"""Where the time goes: iteration breakdown, op classes and trace analysis (issue 4).

* :mod:`dlperf.measure.breakdown.opclass` -- the table-driven classifier of kernel/op names into op
  classes (convolution, matmul/linear, recurrent, attention, ...).
* :mod:`dlperf.measure.breakdown.trace` -- framework-free trace model (:class:`TraceOp`) and its
  analysis: GPU busy fraction, CPU dispatch time, device time per op class and per phase.
* :mod:`dlperf.measure.breakdown.torch_trace` -- reads torch.profiler's Chrome-trace JSON.
* :mod:`dlperf.measure.breakdown.xla` -- reads XLA HLO text (instruction -> opcode, metadata).
* :mod:`dlperf.measure.breakdown.xspace` -- reads the XSpace protobuf of jax.profiler/tf.profiler
  (``*.xplane.pb``) and writes it as Chrome-trace JSON.
* :mod:`dlperf.measure.breakdown.phases` -- reconciling phase samples with the fused step.
* :mod:`dlperf.measure.breakdown.hlocost` -- per-kernel FLOPs and bytes of XLA kernels from the
  compiled step's HLO text.
* :mod:`dlperf.measure.breakdown.buckets` / :mod:`~dlperf.measure.breakdown.nccl` -- DDP's
  per-bucket all-reduce times; what NCCL kernel names say (algorithm, protocol) and the NCCL
  set-up of a run.

Nothing here imports a framework at module level; :mod:`~dlperf.measure.breakdown.xspace` imports the
framework's own protobuf reader lazily, inside the worker.
"""

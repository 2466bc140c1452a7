"""Per-kernel transforms of a traced iteration (:class:`~dlperf.perfmodel.replay.StepTrace`):
each a small named function ``StepTrace -> StepTrace`` that says what it did in
``meta['transforms']``. :func:`~dlperf.perfmodel.replay.simulate` then replays the result.
One module per transform:

* :mod:`~dlperf.perfmodel.transforms.gpu`: another GPU (``to_gpu``), Habitat's wave scaling
  kernel by kernel, the host by a dispatch probe;
* :mod:`~dlperf.perfmodel.transforms.precision`: fp32 <-> bf16 (``to_precision``) by the
  kernel's tensor-core eligibility (read off its name) and its memory-boundness, with the
  mixed-precision casts, host and helper kernels of
  :mod:`~dlperf.perfmodel.transforms.autocast`;
* :mod:`~dlperf.perfmodel.transforms.batch`: another batch size (``to_batch``,
  ``interpolate_batch``), from two traced batches (each kernel group's duration a power law of
  the batch) or from one;
* :mod:`~dlperf.perfmodel.transforms.dataparallel`: DDP's bucketed all-reduces inserted at
  their gradient-ready ops and overlapped with the rest of the backward (WFBP,
  ``to_data_parallel``);

and what several of them share: :mod:`~dlperf.perfmodel.transforms.kernels`, what a kernel is,
read from the trace alone, and :mod:`~dlperf.perfmodel.transforms.weights`, what a step's
weights cost whatever its batch. A caller imports the module it uses
(``from dlperf.perfmodel.transforms.precision import to_precision``): this package's face
hands no names on.
"""

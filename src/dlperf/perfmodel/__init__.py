"""Performance modelling: hardware ceilings (measured and datasheet), MFU and roofline numbers,
and the calibrated performance model of training time (docs/perfmodel.md).

Framework-free: the microbenchmark *kernels* come from each framework's adapter
(``frameworks/*/probes.py``); this package times them, keeps the results and does the
arithmetic. The model's public API is :mod:`dlperf.perfmodel.api` (``predict``, ``validate``);
:mod:`dlperf.perfmodel.records` is the one place that reads a results file for it.
"""

"""Performance modelling: hardware ceilings (measured and datasheet), MFU and roofline numbers.

Framework-free: the microbenchmark *kernels* come from each framework's adapter
(``frameworks/*_probes.py``); this package times them, keeps the results and does the arithmetic.
"""

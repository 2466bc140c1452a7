"""dlperf: benchmark and performance-model deep-learning training.

The package is organised along the axes of a benchmark (see ``docs`` in the README):
``zoo`` (what is trained), ``frameworks`` (what executes it), ``data`` (what feeds it),
``launch`` (how processes start), ``harness`` + ``stats`` (what is measured and how it is
summarised), ``results`` (storage) and ``report`` (tables and plots).
Framework imports are lazy: importing :mod:`dlperf` never imports torch, jax or tensorflow.
"""

__version__ = "0.1.0"

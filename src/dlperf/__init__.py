"""dlperf: benchmark and performance-model deep-learning training.

The package is organised along the axes of a benchmark (see ``docs`` in the README):
``zoo`` (what is trained), ``frameworks`` (what executes it), ``data`` (what feeds it),
``launch`` (how processes start), ``harness`` + ``stats`` (what is measured and how it is
summarised), ``results`` (storage) and ``report`` (tables and plots).
Framework imports are lazy: importing :mod:`dlperf` never imports torch, jax or tensorflow.
"""

__version__ = "0.1.0"

#: True where dlperf is this process's program: the ``dlperf`` command (:func:`dlperf.cli.main`
#: called without arguments, as the console script and ``python -m dlperf`` call it), a worker
#: (``python -m dlperf.worker``) or a rank (``python -m dlperf.launch.rank``); False where dlperf
#: is imported as a library (a user's Python session, a test). A framework's import may then
#: leave out what dlperf never uses (:func:`dlperf.frameworks.tensorflow.adapter.import_tf`).
OWNS_PROCESS = False

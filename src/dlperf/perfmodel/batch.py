"""The rounding of the host/device corner of the one-device model: :data:`SMOOTH_P`.

The batch-only fit that lived here (``fit_batch``, ``validate_batch``, the model behind the
first ``dlperf predict``) is retired: :mod:`dlperf.perfmodel.onedevice` fits the same
``T(B) = (H^p + (d0 + d1 B)^p)^(1/p)`` with its priors, :mod:`dlperf.perfmodel.backtest` runs
the held-out batch back-test and :mod:`dlperf.perfmodel.api` is what ``dlperf predict`` calls.
Only the constant stays, because :mod:`dlperf.perfmodel.onedevice` imports it from here; it
belongs there (move it with that module's next change and delete this file).
"""

from __future__ import annotations

#: The rounding of the host/device corner (``max(H, D)`` as p -> inf, ``H + D`` at p = 1).
#: 8 was chosen on the dlbench series of benchmarks/results/h200/dlbench.db (held-out MdAPE
#: 4.8% at p=1.5, 4.2% at 4, 3.9% at 8, 4.4% at 32), so figures on that file are not
#: out-of-sample for this one global constant; it is not fitted per series.
SMOOTH_P = 8.0

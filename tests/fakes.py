"""Test doubles shared by several test files (imported as ``from fakes import FakeClock``:
pytest puts this folder on ``sys.path``).

``FakeClock`` is the fake framework's clock (:mod:`dlperf.frameworks.fake.clock`): one clock
for the unit tests that script durations and for the fake adapter's runs. It only moves when a
test (or a fake step or device) sets ``t`` or calls ``advance``; seconds.
"""

from __future__ import annotations

from dlperf.frameworks.fake.clock import FakeClock

__all__ = ["FakeClock"]

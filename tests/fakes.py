"""Test doubles shared by several test files (imported as ``from fakes import FakeClock``:
pytest puts this folder on ``sys.path``)."""

from __future__ import annotations


class FakeClock:
    """A clock that only moves when a test (or a fake step or device) sets ``t``; seconds."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

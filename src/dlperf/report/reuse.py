"""One computation per report: the memo :func:`reusing_computations` opens and
:func:`reused` reads (``dlperf report`` writes report.md and report.html from one
computation of each section body, :func:`dlperf.report.sections.report_sections`, and of the
predicted section's back-test). A module of its own so that the sections table and the sections it lists can
both use it without importing each other."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

#: Computations kept while :func:`reusing_computations` is open: key -> result.
_REUSE: dict[tuple[Any, ...], Any] | None = None


@contextlib.contextmanager
def reusing_computations() -> Iterator[dict[tuple[Any, ...], Any]]:
    """While open, the section bodies (:func:`dlperf.report.sections.report_sections`) and the
    predicted section's back-test (:func:`dlperf.report.predicted.predicted_section`) of the
    same results are made once and reused: ``dlperf report`` writes report.md and
    report.html from one computation of each. The results must not change while it is open
    (``dlperf report`` only reads them). Yields the memo (key -> result)."""
    global _REUSE  # noqa: PLW0603 (the memo of the open context)
    outer = _REUSE
    _REUSE = {} if outer is None else outer
    try:
        yield _REUSE
    finally:
        _REUSE = outer


def reused(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """``make()``, kept under ``key`` while :func:`reusing_computations` is open."""
    if _REUSE is None:
        return make()
    if key not in _REUSE:
        _REUSE[key] = make()
    return _REUSE[key]

"""One rule for every cache of a prediction's process: a value is made once per key.

The performance model keeps what it read or fitted (records, group fits, fit solutions,
LAPACK workspaces, residual tables) in dicts keyed by what it was made from; :func:`once` is
the one place that decides whether to make it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableMapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def once(cache: MutableMapping[K, V], key: K, make: Callable[[], V]) -> V:
    """``cache[key]``, set to ``make()`` the first time ``key`` is asked for (an exception of
    ``make`` leaves ``cache`` as it was)."""
    if key not in cache:
        cache[key] = make()
    return cache[key]

"""Unbounded nonlinear least squares for the one-device series fit: scipy's Trust Region
Reflective method without its general-purpose wrappers.

:func:`trf` is the computation of ``scipy.optimize.least_squares(fun, x0, jac=jac,
method="trf", x_scale="jac", max_nfev=...)`` with no bounds, the linear loss and the exact
trust-region solver (scipy 1.17: ``scipy/optimize/_lsq/trf.py``, ``trf_no_bounds``; the
subproblem ``_lsq/common.py``, ``solve_lsq_trust_region``, after More 1977; Branch, Coleman
and Li 1999 for TRF), operation for operation, so it returns the same ``x`` to the last bit
(``tests/unit/test_perfmodel_lsq.py`` compares them). What it leaves out is scipy's per-call
and per-evaluation machinery (argument checks, the ``VectorFunction`` caches, ``svd``'s
checks and workspace query each iteration): the back-test fits a series ~6,000 times, and
that machinery was a third of ``dlperf predict --validate``'s time. It needs
``scipy.linalg`` (the same LAPACK ``gesdd`` as ``scipy.linalg.svd``), not ``scipy.optimize``.

:func:`solved` keeps every solution of a fit the model makes by a digest of its problem
(:func:`digest`: every number the fit reads), so the same problem is solved once; a store of
them (``dlperf predict --validate``'s residual table, the user's cache:
:mod:`dlperf.perfmodel.fitcache`) lets a prediction skip the solver, and scipy, altogether.

scipy is BSD-licensed (Copyright (c) 2001-2002 Enthought, Inc. 2003, SciPy Developers).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from dlperf.perfmodel.memo import once

#: Machine epsilon of float64 (scipy's ``EPS`` in ``_lsq/common.py``).
EPS = float(np.finfo(float).eps)
#: scipy's default tolerances of ``least_squares`` (``ftol``, ``xtol``, ``gtol``).
FTOL = XTOL = GTOL = 1e-8

_GESDD: dict[tuple[int, int], tuple[Any, int]] = {}


def _svd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``scipy.linalg.svd(a, full_matrices=False)`` of a finite float64 matrix: the same
    LAPACK ``gesdd`` with the same workspace, looked up once per shape.

    Raises:
        ValueError: ``a`` holds an infinity or NaN (as ``svd`` checks).
        numpy.linalg.LinAlgError: the SVD did not converge.
    """
    if not np.isfinite(a).all():
        raise ValueError("array must not contain infs or NaNs")
    m, n = a.shape
    def make() -> tuple[Any, Any]:
        from scipy.linalg import lapack

        gesdd, gesdd_lwork = lapack.get_lapack_funcs(("gesdd", "gesdd_lwork"), (a,),
                                                     ilp64="preferred")
        return gesdd, lapack._compute_lwork(gesdd_lwork, m, n, compute_uv=True,
                                            full_matrices=False)
    gesdd, lwork = once(_GESDD, (m, n), make)
    u, s, v, info = gesdd(a, compute_uv=True, lwork=lwork, full_matrices=False,
                          overwrite_a=False)
    if info > 0:
        raise np.linalg.LinAlgError("SVD did not converge")
    if info < 0:
        raise ValueError(f"illegal value in {-info}th argument of internal gesdd")
    return u, s, v


def _norm(x: np.ndarray) -> float:
    """``numpy.linalg.norm(x)`` of a float vector (``sqrt(x . x)``)."""
    return math.sqrt(x.dot(x))


def _phi_and_derivative(alpha: float, suf: np.ndarray, s: np.ndarray, delta: float
                        ) -> tuple[float, float]:
    """The norm of the ``alpha``-regularised step minus ``delta``, and its derivative."""
    denom = s ** 2 + alpha
    p_norm = _norm(suf / denom)
    return p_norm - delta, -np.sum(suf ** 2 / denom ** 3) / p_norm


def solve_trust_region(n: int, m: int, uf: np.ndarray, s: np.ndarray, v: np.ndarray,
                       delta: float, initial_alpha: float | None = None, rtol: float = 0.01,
                       max_iter: int = 10) -> tuple[np.ndarray, float]:
    """The step ``p`` with ``(J^T J + alpha I) p = -J^T f``, ``|p| <= delta`` (More 1977, on
    one SVD ``J = U diag(s) V^T``, ``uf = U^T f``) and its ``alpha``: scipy's
    ``solve_lsq_trust_region``."""
    suf = s * uf
    full_rank = s[-1] > EPS * m * s[0] if m >= n else False
    alpha_lower = 0.0
    if full_rank:
        p = -v.dot(uf / s)
        if _norm(p) <= delta:
            return p, 0.0
        phi, phi_prime = _phi_and_derivative(0.0, suf, s, delta)
        alpha_lower = -phi / phi_prime
    alpha_upper = _norm(suf) / delta
    if initial_alpha is None or not full_rank and initial_alpha == 0:
        alpha = max(0.001 * alpha_upper, (alpha_lower * alpha_upper) ** 0.5)
    else:
        alpha = initial_alpha
    for _ in range(max_iter):
        if alpha < alpha_lower or alpha > alpha_upper:
            alpha = max(0.001 * alpha_upper, (alpha_lower * alpha_upper) ** 0.5)
        phi, phi_prime = _phi_and_derivative(alpha, suf, s, delta)
        if phi < 0:
            alpha_upper = alpha
        ratio = phi / phi_prime
        alpha_lower = max(alpha_lower, alpha - ratio)
        alpha -= (phi + delta) * ratio / delta
        if np.abs(phi) < rtol * delta:
            break
    p = -v.dot(suf / (s ** 2 + alpha))
    p *= delta / _norm(p)
    return p, alpha


def trf(fun: Callable[[np.ndarray], np.ndarray], jac: Callable[[np.ndarray], np.ndarray],
        x0: np.ndarray, max_nfev: int | None = None) -> tuple[np.ndarray, float]:
    """Minimise ``0.5 |fun(x)|^2`` from ``x0`` (module docstring): ``(x, cost)``, the values
    of ``least_squares``' ``x`` and ``cost``.

    Args:
        fun: the residual vector (m,) at ``x`` (n,).
        jac: its Jacobian (m, n).
        x0: the start (n,).
        max_nfev: evaluations of ``fun`` allowed (None: ``100 n``).

    Raises:
        ValueError: the residuals are not finite at ``x0``, or a Jacobian is not finite.
    """
    x = np.atleast_1d(x0).astype(float)
    f = np.atleast_1d(fun(x))
    if not np.all(np.isfinite(f)):
        raise ValueError("Residuals are not finite in the initial point.")
    jm = np.atleast_2d(jac(x))
    nfev = 1
    m, n = jm.shape
    cost = 0.5 * np.dot(f, f)
    g = jm.T.dot(f)
    scale_inv = np.sum(jm ** 2, axis=0) ** 0.5
    scale_inv[scale_inv == 0] = 1
    scale = 1 / scale_inv
    delta = _norm(x * scale_inv)
    if delta == 0:
        delta = 1.0
    max_nfev = x.size * 100 if max_nfev is None else max_nfev
    alpha = 0.0
    # scipy's termination: the gradient test (status 1), the evaluations spent, or the
    # ftol/xtol test of the last step (status 2-4); the status itself is not returned
    converged = False
    while not converged and nfev < max_nfev and not abs(g).max(initial=0) < GTOL:
        d = scale
        g_h = d * g
        j_h = jm * d
        u, s, vt = _svd(j_h)
        v = vt.T
        uf = u.T.dot(f)
        reduction = -1.0
        while reduction <= 0 and nfev < max_nfev:
            step_h, alpha = solve_trust_region(n, m, uf, s, v, delta, initial_alpha=alpha)
            js = j_h.dot(step_h)
            predicted = -(0.5 * np.dot(js, js) + np.dot(step_h, g_h))
            step = d * step_h
            x_new = x + step
            f_new = np.atleast_1d(fun(x_new))
            nfev += 1
            step_h_norm = _norm(step_h)
            if not np.all(np.isfinite(f_new)):
                delta = 0.25 * step_h_norm
                continue
            cost_new = 0.5 * np.dot(f_new, f_new)
            reduction = cost - cost_new
            # the trust region's radius from the step's quality (scipy's update_tr_radius)
            if predicted > 0:
                ratio = reduction / predicted
            elif predicted == reduction == 0:
                ratio = 1
            else:
                ratio = 0
            delta_new = delta
            if ratio < 0.25:
                delta_new = 0.25 * step_h_norm
            elif ratio > 0.75 and step_h_norm > 0.95 * delta:
                delta_new *= 2.0
            # scipy's check_termination
            f_ok = reduction < FTOL * cost and ratio > 0.25
            x_ok = _norm(step) < XTOL * (XTOL + _norm(x))
            converged = f_ok or x_ok
            if converged:
                break
            alpha *= delta / delta_new
            delta = delta_new
        if reduction > 0:
            x, f, cost = x_new, f_new, cost_new
            jm = np.atleast_2d(jac(x))
            g = jm.T.dot(f)
            scale_inv = np.maximum(np.sum(jm ** 2, axis=0) ** 0.5, scale_inv)
            scale = 1 / scale_inv
    return x, float(cost)


#: A fit's least-squares solution (its parameters, as the solver returned them).
Solution = tuple[float, ...]
#: The solutions of the fits this process made or read from a store (:func:`remember`), by
#: problem (:func:`digest`). The same problem has the same solution under the same model
#: source, so a store of them is keyed like the group fits (:mod:`dlperf.perfmodel.fitcache`).
SOLVED: dict[str, Solution] = {}
#: The keys of :data:`SOLVED` solved in this process since :func:`take_solved`.
_SOLVED_HERE: set[str] = set()
#: The key sets of the open :func:`tracked` blocks.
_TRACKS: list[set[str]] = []


def digest(*arrays: np.ndarray) -> str:
    """A hex digest of arrays' types, shapes and values (a fit problem's key)."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:32]


def solved(key: str, solve: Callable[[], np.ndarray | Sequence[float]]) -> Solution:
    """The solution of the problem ``key`` from :data:`SOLVED`, else ``solve()`` (kept).
    Only a solution that exists is recorded as made here and as looked up by the open
    :func:`tracked` blocks (a ``solve`` that raises leaves no key behind)."""
    def make() -> Solution:
        sol = tuple(float(v) for v in solve())
        _SOLVED_HERE.add(key)
        return sol
    sol = once(SOLVED, key, make)
    for keys in _TRACKS:
        keys.add(key)
    return sol


def remember(solutions: Mapping[str, Solution]) -> None:
    """Take solutions read from a store (checked by the reader: finite numbers) into
    :data:`SOLVED`; one already there is kept."""
    for k, v in solutions.items():
        SOLVED.setdefault(k, v)


def take_solved() -> dict[str, Solution]:
    """The solutions solved in this process since the last call (to store them)."""
    out = {k: SOLVED[k] for k in sorted(_SOLVED_HERE)}
    _SOLVED_HERE.clear()
    return out


@contextlib.contextmanager
def tracked() -> Iterator[set[str]]:
    """Collect the keys of every solution made or looked up inside the block (what a
    back-test's store must hold: :func:`dlperf.validation.store_table`)."""
    keys: set[str] = set()
    _TRACKS.append(keys)
    try:
        yield keys
    finally:
        _TRACKS.remove(keys)

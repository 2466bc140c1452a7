"""A traced GEMM's dimensions, recovered from its FLOPs and bytes, and the alignment that
decides which kernels cuBLAS can run it with.

PyTorch's profiler records, for a matmul operator (``aten::linear``, ``aten::mm``,
``aten::addmm`` and the GEMMs of their backward), ``op_flops = 2 m n k`` and ``op_bytes`` the
element size times its input matrices: ``e k (m + n)`` for ``(m x k) @ (k x n)``, plus ``e n``
with a bias (checked on the stored GPT-2 timelines: its 50,257-word output layer at batch 8
reads ``F = 632,379,408,384 = 2 x 8192 x 50257 x 768`` and ``Y = 4 x 768 x (8192 + 50257)``;
the backward's GEMMs are recorded one by one with the same form). Both are exact integers, so
``(m, n, k)`` follows: ``k`` divides ``F / 2``, then ``m + n`` and ``m n`` give ``m`` and ``n``
as the roots of a quadratic (:func:`gemm_dims`).

Why it matters: a half-precision GEMM runs on Hopper's TMA tensor-core kernels (cuBLASLt
``nvjet``, ``sm90_xmma``) only when every leading dimension is a multiple of 8 elements (16
bytes; cuBLAS documentation, "Tensor Core Usage"); with a multiple of 2 or 4 it runs on
CUTLASS's Ampere ``tensorop_..._align2/4`` kernels, and with an odd one on the Turing-era
``cutlass_75_tensorop_bf16_s1688gemm_..._align1``. On the H200 and H100 development traces the
aligned matmuls reach 0.85-0.9 of the bf16 GEMM ceiling, LSTM's decoder (``k = 650``,
``align2``) about 0.3 of it and GPT-2's output layer (``n = 50257``, ``align1``) 0.12-0.19
(benchmarks/replay_kernels.py, part 5). The leading dimensions of a linear layer's matrices
are its ``n`` and ``k`` (the weight ``n x k``, the activations ``m x k`` and ``m x n``
row-major); ``m``, the batch (times the sequence), never is one.
"""

from __future__ import annotations

import functools
import itertools
import math

#: Alignments (elements) cuBLAS's half-precision kernels distinguish, best first.
ALIGNMENTS = (8, 4, 2, 1)
#: Element sizes (bytes) a traced matmul's inputs may have: fp32, then bf16/fp16.
ELEMENT_SIZES = (4, 2)
#: Largest FLOP count factored (2 m n k): a step's GEMMs stay far below (GPT-2's largest at
#: batch 64 is 5.1e12).
MAX_FLOPS = 10**16


#: Trial division stops here; a cofactor left above it is taken as prime (a shape then missed
#: leaves the GEMM's alignment unknown, never wrong the other way).
MAX_TRIAL_DIVISOR = 10**5


def _factor(n: int) -> dict[int, int]:
    f: dict[int, int] = {}
    for d in itertools.chain((2,), range(3, MAX_TRIAL_DIVISOR + 1, 2)):  # 2, then odd ones
        if d * d > n:
            break
        while n % d == 0:
            f[d] = f.get(d, 0) + 1
            n //= d
    if n > 1:
        f[n] = f.get(n, 0) + 1
    return f


def _divisors(n: int) -> list[int]:
    out = [1]
    for p, e in _factor(n).items():
        out = [x * p**k for x in out for k in range(e + 1)]
    return out


@functools.lru_cache(maxsize=4096)
def gemm_dims(flops: int, nbytes: int, elem: int) -> tuple[tuple[int, int, int], ...]:
    """Every ``(m, n, k)`` of positive integers with ``flops = 2 m n k`` and ``nbytes = elem x
    (k (m + n) + b n)`` for ``b`` in {0, 1} (without or with a bias of ``n``), sorted; empty
    where none exists (the figures are not a plain GEMM's, or not exact).

    Raises:
        ValueError: a figure is not positive, or ``flops`` exceeds :data:`MAX_FLOPS` (its
            factoring would take too long).
    """
    if flops <= 0 or nbytes <= 0 or elem <= 0:
        raise ValueError(f"flops, bytes and element size must be positive: {flops}, {nbytes}, "
                         f"{elem}")
    if flops > MAX_FLOPS:
        raise ValueError(f"{flops:.3g} FLOPs: more than the {MAX_FLOPS:.0e} factored")
    if flops % 2 or nbytes % elem:
        return ()
    p, s = flops // 2, nbytes // elem
    out: set[tuple[int, int, int]] = set()
    # Every root below is positive: p, s, k >= 1 and m n = p / k >= 1 make each discriminant
    # smaller than the square it is taken from (a k above s gives none: s % k != 0 and a
    # negative discriminant with the bias).
    for k in _divisors(p):
        mn = p // k
        if s % k == 0:  # no bias: m + n = s / k, m n = p / k, so m is a root of x^2 - t x + mn
            t = s // k
            out |= {(m, t - m, k) for m in _integer_roots(1, t, mn)}
        # bias: (k + 1) n^2 - s n + p = 0, m = mn / n
        out |= {(mn // n, n, k) for n in _integer_roots(k + 1, s, p) if mn % n == 0}
    return tuple(sorted(out))


def _integer_roots(a: int, b: int, c: int) -> set[int]:
    """The integer roots of ``a x^2 - b x + c = 0`` (``a >= 1``): ``(b +- r) / 2a`` where the
    discriminant ``b^2 - 4ac`` is a perfect square ``r^2`` and ``2a`` divides the numerator."""
    disc = b * b - 4 * a * c
    r = math.isqrt(max(disc, 0))
    return {num // (2 * a) for num in (b + r, b - r) if r * r == disc and num % (2 * a) == 0}


def alignment_of(dims: tuple[int, int, int], batch: int) -> int | None:
    """The alignment (:data:`ALIGNMENTS`) of a GEMM of ``dims`` in a step of ``batch``: the
    largest that divides its two dimensions other than a multiple of the batch (the rows of
    its activations), the most favourable such choice; None when no dimension is a multiple
    of ``batch`` (``batch >= 1``)."""
    return max((next(x for x in ALIGNMENTS if all(r % x == 0 for r in (*dims[:i], *dims[i + 1:])))
                for i, d in enumerate(dims) if d % batch == 0), default=None)


#: Precisions whose matmul inputs have one element size (:func:`element_sizes`).
_ELEMENTS_OF = {"fp32": (4,), "tf32": (4,)}


def element_sizes(precision: str | None) -> tuple[int, ...]:
    """The element sizes (bytes) a traced matmul's inputs may have in a step run at
    ``precision``: 4 at fp32 or tf32; 2 or 4 under bf16/fp16 autocast (an operator may be
    recorded before or after its inputs are cast); both where unknown."""
    return _ELEMENTS_OF.get((precision or "").lower(), ELEMENT_SIZES)


def alignment(flops: float | None, nbytes: float | None, batch: int,
              elems: tuple[int, ...] = ELEMENT_SIZES) -> int | None:
    """The alignment of a traced matmul call from its recorded ``flops`` and ``bytes`` (exact
    integers, elements of one of the sizes ``elems``) in a step of ``batch``: the most
    favourable over
    every consistent shape (:func:`gemm_dims`, :func:`alignment_of`), so that a GEMM is taken
    as misaligned only when every reading of its figures says so; None where the figures
    give no shape (missing, not integers, not a GEMM's)."""
    if not flops or not nbytes or flops != int(flops) or nbytes != int(nbytes) \
            or flops > MAX_FLOPS or batch <= 0:
        return None
    found = [a for e in elems for d in gemm_dims(int(flops), int(nbytes), e)
             if (a := alignment_of(d, batch)) is not None]
    return max(found, default=None)

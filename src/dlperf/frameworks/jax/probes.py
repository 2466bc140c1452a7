"""JAX kernels of the ceiling microbenchmarks (:mod:`dlperf.perfmodel.ceilings`).

Matmul precisions: ``fp32`` traces under ``jax.default_matmul_precision("highest")`` (IEEE
float32, TF32 off), ``tf32`` under ``"tensorfloat32"``, ``bf16`` multiplies bfloat16 operands
(float32 accumulation in XLA's GEMM, bfloat16 result). The precision is part of the jit cache
key, so each precision compiles its own product.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": "highest"}


class JaxCeilings:
    """:class:`~dlperf.perfmodel.ceilings.CeilingBackend` for JAX on device ``dev``."""

    framework = "jax"

    def __init__(self, jax: Any, dev: Any) -> None:
        self.jax, self.dev = jax, dev
        self.device_kind = "cuda" if dev.platform == "gpu" else "cpu"
        self.device_key = f"{self.device_kind}:{dev.id}" if self.device_kind == "cuda" else "cpu"

    def precision(self, precision: str):  # noqa: D102
        return self.jax.default_matmul_precision(_PRECISION[precision])

    def matmul(self, n: int, precision: str) -> Callable[[], Any]:  # noqa: D102
        import numpy as np

        jax, jnp = self.jax, self.jax.numpy
        dtype = jnp.bfloat16 if precision == "bf16" else jnp.float32
        rng = np.random.default_rng(0)  # host init: no compilation per shape
        a, b = (jax.device_put(rng.standard_normal((n, n), np.float32).astype(dtype), self.dev)
                for _ in range(2))
        f = jax.jit(jnp.matmul)
        return lambda: f(a, b)

    def scale(self, nbytes: int) -> Callable[[], Any]:  # noqa: D102
        jax, jnp = self.jax, self.jax.numpy
        import numpy as np

        # In place (the input donated): read and write nbytes each, as torch's mul(out=y), into
        # one buffer. A fresh output per call made the CPU measure page faults of a new 128 MiB
        # array (3.9 GB/s against torch's 27.7 on one CPU); on a GPU XLA reuses its pool anyway.
        # The values double per call and saturate at inf, which runs at the same speed.
        held = [jax.device_put(np.ones((nbytes // 4,), np.float32), self.dev)]
        f = jax.jit(lambda v: v * 2.0, donate_argnums=0)

        def run():
            held[0] = f(held[0])
            return held[0]

        return run

    def block(self, out: Any) -> None:  # noqa: D102
        out.block_until_ready()

    def release(self) -> None:  # noqa: D102
        pass

"""What a JAX run reports about itself besides its time: the FLOP count and bytes of XLA's
cost analysis, device memory, versions and the NVML target; and the JAX kernels of the ceiling
microbenchmarks (:mod:`dlperf.measure.ceilings`).

The framework's FLOP count (``count_flops``, without running anything): XLA's static cost
analysis of the step's HLO *before* optimisation (``xla_hlo_flops_per_step``), beside the
analytic FLOPs of the spec, and the bytes of the *compiled* program
(``xla_cost_bytes_per_step``, after fusion) for the roofline. The compiled program's own FLOP
count is kept too (``xla_cost_flops_per_step``) but not used: on a GPU, XLA turns dots and
convolutions into cuBLAS/cuDNN custom calls, which its cost analysis counts as 0 FLOPs
(measured on an H200: 1.7% of the analytic count for resnet50, 2.5% for fcn5, 52% for
gpt2_small; ``benchmarks/results/h200/mfu_inputs.db``). Loop bodies such as the LSTM's scan
are counted once by either analysis. See :func:`xla_costs`.

Memory on a GPU: ``peak_allocated_bytes`` = ``memory_stats()["peak_bytes_in_use"]``,
``peak_reserved_bytes`` = the pool size (``peak_pool_bytes`` / ``pool_bytes`` /
``bytes_reserved`` / ``bytes_limit``, whichever the runtime reports first; recorded in
``flags["reserved_bytes_source"]``), NVML used.

Matmul precisions: ``fp32`` traces under ``jax.default_matmul_precision("highest")`` (IEEE
float32, TF32 off), ``tf32`` under ``"tensorfloat32"``, ``bf16`` multiplies bfloat16 operands
(float32 accumulation in XLA's GEMM, bfloat16 result). The precision is part of the jit cache
key, so each precision compiles its own product.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dlperf.env import cpu_model

#: ``jax_default_matmul_precision`` per precision policy (the run's and the ceilings').
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": "highest"}
_PRECISION = MATMUL_PRECISION

#: Where the JAX FLOP count comes from (stored as ``flops.framework_source``).
HLO_FLOPS_SOURCE = ("XLA cost analysis of the step's HLO before optimisation ('flops' of "
                    "jit(...).lower(...).cost_analysis(), or on a GPU plugin, where that is "
                    "not implemented, XLA's HloCostAnalysis of the same HLO through the CPU "
                    "client: dots and convolutions counted before they become library calls; "
                    "loop bodies counted once)")
#: The compiled program's count, used only where the pre-optimisation one is unavailable.
COMPILED_FLOPS_SOURCE = ("XLA cost analysis of the compiled step ('flops'; loop bodies counted "
                         "once; cuBLAS/cuDNN custom calls count 0 FLOPs on a GPU)")
#: ``memory_stats()`` keys of the pool size, in the order they are preferred.
POOL_KEYS = ("peak_pool_bytes", "pool_bytes", "bytes_reserved", "bytes_limit")

def _cost_dict(obj: Any) -> dict[str, Any] | None:
    cost = obj.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return dict(cost) if cost else None


def _hlo_cost_on_cpu(lowered: Any) -> dict[str, Any] | None:
    """XLA's ``HloCostAnalysis`` of ``lowered``'s HLO (before optimisation) through the CPU
    client. ``Lowered.cost_analysis()`` returns None on a backend behind the PJRT C API (the
    CUDA plugin: jax ``pxla.MeshComputation.cost_analysis`` raises NotImplementedError, which
    ``stages.Lowered`` turns into None; jax-ml/jax#22713); the analysis of an HLO module
    before optimisation does not depend on the backend, so the CPU client computes the same
    count (checked equal to ``cost_analysis()`` on the CPU in the tests). Uses JAX internals
    (``jax._src.lib._jax.hlo_module_cost_analysis``); any failure gives None."""
    from jax._src import xla_bridge as xb
    from jax._src.lib import _jax

    module = lowered.compiler_ir("hlo").as_hlo_module()
    cost = _jax.hlo_module_cost_analysis(xb.get_backend("cpu"), module)
    return dict(cost) if cost else None


def xla_costs(lowered: Any, compiled: Any) -> dict[str, float | None]:
    """XLA's static cost estimates of one training step, for the FLOP count and the roofline.

    Args:
        lowered: ``jax.stages.Lowered`` of the step (``jitted.lower(...)``).
        compiled: its ``jax.stages.Compiled``.

    Returns ``{"xla_hlo_flops_per_step", "xla_cost_flops_per_step",
    "xla_cost_bytes_per_step"}`` (FLOPs and bytes per step; None where the backend gives no
    estimate; never raises). ``xla_hlo_flops_per_step`` is the cost analysis of the HLO before
    optimisation, where every dot and convolution is still an HLO instruction with its
    shape; the compiled program's (``xla_cost_flops_per_step``) misses what XLA:GPU hands to
    cuBLAS and cuDNN as custom calls, which ``HloCostAnalysis`` counts as 0 FLOPs.
    ``xla_cost_bytes_per_step`` is the compiled program's "bytes accessed" (after fusion: the
    traffic the fused kernels and library calls move, as far as XLA estimates it).
    """
    out: dict[str, float | None] = {"xla_hlo_flops_per_step": None,
                                    "xla_cost_flops_per_step": None,
                                    "xla_cost_bytes_per_step": None}
    for count in (_cost_dict, _hlo_cost_on_cpu):
        try:
            hlo = count(lowered)
        except Exception:  # noqa: BLE001 - not every backend reports costs
            continue
        if hlo and hlo.get("flops"):
            out["xla_hlo_flops_per_step"] = float(hlo["flops"])
            break
    try:
        cost = _cost_dict(compiled)
        if cost:
            out["xla_cost_flops_per_step"] = float(cost["flops"]) if cost.get("flops") else None
            out["xla_cost_bytes_per_step"] = (float(cost["bytes accessed"])
                                              if cost.get("bytes accessed") else None)
    except Exception:  # noqa: BLE001
        pass
    return out


def framework_flop_count(flags: dict[str, Any]) -> dict[str, Any]:
    """``count_flops()`` of a JAX run from the step's stored cost estimates (:func:`xla_costs`):
    ``{"flops_per_step", "bytes_per_step", "source", "bytes_source"}``; the pre-optimisation
    FLOP count where there is one, else the compiled program's (its source says so)."""
    hlo = flags.get("xla_hlo_flops_per_step")
    return {"flops_per_step": hlo if hlo is not None else flags.get("xla_cost_flops_per_step"),
            "bytes_per_step": flags.get("xla_cost_bytes_per_step"),
            "source": HLO_FLOPS_SOURCE if hlo is not None else COMPILED_FLOPS_SOURCE,
            "bytes_source": "XLA cost analysis of the compiled step ('bytes accessed')"}


def pool_bytes(stats: dict[str, Any] | None,
               flags: dict[str, Any]) -> tuple[int | None, int | None]:
    """``(peak allocated, pool size)`` in bytes from a GPU's ``memory_stats()`` (None where it
    reports none); the pool key used is recorded in ``flags["reserved_bytes_source"]``."""
    if not stats:
        return None, None
    allocated = int(stats.get("peak_bytes_in_use", 0)) or None
    for k in POOL_KEYS:
        if stats.get(k):
            flags["reserved_bytes_source"] = f"memory_stats()[{k!r}]"
            return allocated, int(stats[k])
    return allocated, None


def cuda_visible_entry(ordinal: int) -> tuple[str | None, int]:
    """(NVML uuid or None, NVML index) of CUDA device ``ordinal`` under CUDA_VISIBLE_DEVICES."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not vis:
        return None, ordinal
    items = [s.strip() for s in vis.split(",") if s.strip()]
    if ordinal >= len(items):
        return None, ordinal
    item = items[ordinal]
    if item.startswith(("GPU-", "MIG-")):
        return item, ordinal
    try:
        return None, int(item)
    except ValueError:
        return None, ordinal


def nvml_target(dev: Any) -> tuple[str | None, int] | None:
    """``(uuid or None, NVML index)`` of JAX GPU device ``dev`` (its local hardware id, else its
    id, under CUDA_VISIBLE_DEVICES); None for a CPU device."""
    if dev.platform != "gpu":
        return None
    hw = getattr(dev, "local_hardware_id", None)
    return cuda_visible_entry(hw if hw is not None else dev.id)


def versions(jax: Any, dev: Any) -> dict[str, Any]:
    """jax, jaxlib, flax and optax versions, the backend and device, and on a GPU the CUDA
    runtime and cuDNN versions (from jaxlib's private ``cuda_versions``, where it has them) and
    the compute capability; ``device_name`` is the GPU's kind or the CPU model."""
    import flax
    import jaxlib
    import optax

    out: dict[str, Any] = {
        "framework": "jax", "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "flax": flax.__version__, "optax": optax.__version__,
        "backend": dev.platform, "device_kind": dev.device_kind,
        "platform_version": getattr(dev.client, "platform_version", None),
    }
    if dev.platform != "gpu":
        out["device_name"] = cpu_model()
        return out
    out["device_name"] = dev.device_kind
    out["capability"] = getattr(dev, "compute_capability", None)
    try:
        from jax._src.lib import cuda_versions

        if cuda_versions is not None:
            out["cuda_runtime"] = cuda_versions.cuda_runtime_get_version()
            out["cudnn"] = cuda_versions.cudnn_get_version()
    except Exception:  # noqa: BLE001 - private module, optional
        pass
    return out


class JaxCeilings:
    """:class:`~dlperf.measure.ceilings.CeilingBackend` for JAX on device ``dev``."""

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
        jax = self.jax
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

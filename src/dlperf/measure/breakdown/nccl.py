"""What an NCCL kernel's name says about the collective it ran, and the NCCL set-up in force.

Pure functions (no framework import): :func:`parse_kernel` reads a device kernel name of any
NCCL naming generation; :func:`nccl_record` gives the NCCL version and the ``NCCL_*``
environment overrides of a run (``dist.runtime.nccl``).

What a kernel name can say, from NVIDIA/nccl's sources (the generations a trace may show):

* NCCL <= 2.6 (``src/collectives/collectives.h``, ``NCCL_KERN_NAME(coll, op, dtype)``):
  ``ncclAllReduceKernel_sum_f32`` (older builds append the thread count, ``..._f32_512``):
  the collective only; algorithm and protocol None.
* NCCL 2.7-2.18 (``NCCL_KERN_NAME(func, algo, proto, devredop, type)``):
  ``ncclKernel_AllReduce_RING_LL_Sum_float``. One kernel is built per collective, reduction,
  type and *algorithm* ("Only generate inline kernels for LL": ``IMPL_COLL4`` in
  ``src/collectives/device/common.h`` builds the LL kernel and, for LL128 and SIMPLE, device
  functions that the LL kernel calls through ``ncclFuncs[funcIndex]``), so the name's algorithm
  is the one the launch ran and its ``LL`` says nothing: ``algorithm`` = the name's,
  ``protocol`` None.
* NCCL >= 2.19 (``src/device/generate.py``): ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
  ``..._TREE_LL``, ``ncclDevKernel_SendRecv``, ``ncclDevKernel_Generic`` (and
  ``ncclDevKernel_Generic_1``...). ``best_kernel()`` specialises a kernel for TREE and, for
  every other algorithm (RING, NVLS, NVLS_TREE, COLLNET_DIRECT, COLLNET_CHAIN), for RING, always
  with LL; other functions run inside it. So ``TREE`` in the name is the algorithm, ``RING``
  is "not TREE" (``algorithm`` None) and ``LL`` is not the protocol (``protocol`` None);
  ``Generic`` says nothing.
* NCCL >= 2.27 symmetric-memory kernels (``src/device/symmetric/generate.py``):
  ``ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f32`` (2.27: ``ncclSymDevKernel_...``): one kernel
  per symmetric algorithm, so ``algorithm`` = ``"symmetric:" + the name's algorithm``;
  these do not use the LL/LL128/SIMPLE protocols (``protocol`` None).

Every parse also keeps what the name literally names (``kernel_algorithm``,
``kernel_protocol``: the kernel's specialisation) and the ``naming`` generation. NCCL's
maintainers say the same: "using the kernel name is not a reliable indication of what
ALGO/PROTO NCCL is actually using" (NVIDIA/nccl#1595); since NCCL 2.2 one launch can run
several operations and the name "just gives a hint as to what the first NCCL operation might
be" (NVIDIA/nccl#739; #2196 on the constant ``RING_LL`` suffix). So an ``algorithm`` read
from a name is that of the launch's first operation, which for a DDP bucket's all-reduce (one
call, one launch) is the bucket's. The protocol in force is known only where ``NCCL_PROTO``
forces one (:func:`nccl_record`) or from NCCL's own log (``NCCL_DEBUG=INFO``,
``NCCL_DEBUG_SUBSYS=TUNING``), which dlperf does not read. None of these names was observed
on a multi-GPU machine by this project (one GPU lent).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: NCCL's algorithm and protocol names (src/include/nccl_common.h, ``ncclAlgoStr``/
#: ``ncclProtoStr``; name tokens with ``_``).
ALGORITHMS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT",
              "COLLNET")
PROTOCOLS = ("LL", "LL128", "SIMPLE")
_ALGO = "|".join(sorted(ALGORITHMS, key=len, reverse=True))
_PROTO = "|".join(sorted(PROTOCOLS, key=len, reverse=True))
_COLLS = ("AllReduce", "AllGather", "AllGatherV", "ReduceScatter", "Reduce", "Broadcast",
          "SendRecv", "AllToAll", "Generic")

_DEV = re.compile(rf"^ncclDevKernel_(?P<coll>[A-Za-z]+)(?P<rest>(?:_[A-Za-z0-9]+)*?)"
                  rf"(?:_(?P<algo>{_ALGO})_(?P<proto>{_PROTO}))?$")
_KERN = re.compile(rf"^ncclKernel(?:Debug)?_(?P<coll>[A-Za-z]+)_(?P<algo>{_ALGO})_"
                   rf"(?P<proto>{_PROTO})_(?P<rest>.*)$")
_SYM = re.compile(r"^ncclSymk?DevKernel_(?P<coll>[A-Za-z]+)_(?P<algo>.+?)"
                  r"(?:_(?P<red>sum|avg)_(?P<ty>[a-z0-9]+))?(?:_profile)?$")
_OLD = re.compile(r"^nccl(?!Dev|Symk?Dev)(?P<coll>[A-Z][A-Za-z]+?)(?:LL)?Kernel_(?P<rest>\w+)$")

#: Environment variables that change NCCL's choice of algorithm, protocol, channels or
#: transport (NCCL's documentation, "Environment Variables"); every ``NCCL_*`` variable set is
#: kept, these are only named in the record's ``forced``.
CHOICE_VARS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
               "NCCL_NTHREADS", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
               "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL", "NCCL_BUFFSIZE",
               "NCCL_TUNER_PLUGIN", "NCCL_COLLNET_ENABLE", "NCCL_CUMEM_ENABLE")
#: Values longer than this are cut (a variable's value, e.g. a plugin path).
_MAX_VALUE = 200


def _collective(name: str) -> str:
    return next((c for c in sorted(_COLLS, key=len, reverse=True) if name.startswith(c)), name)


def parse_kernel(name: str | None) -> dict[str, Any] | None:
    """What the NCCL kernel ``name`` says (module docstring): ``{"collective", "algorithm",
    "protocol", "kernel_algorithm", "kernel_protocol", "naming"}``; ``algorithm``/``protocol``
    are the ones the launch ran where the name determines them, else None;
    ``kernel_algorithm``/``kernel_protocol`` what the name spells (None where it spells
    none); ``naming`` the generation (``"nccl>=2.19"``, ``"nccl 2.7-2.18"``,
    ``"nccl>=2.27 symmetric"``, ``"nccl<=2.6"``). None when ``name`` is not an NCCL kernel.
    A demangled name's argument list (``ncclKernel_..._float(ncclWorkElem)``) is ignored.
    """
    if not name or not name.startswith("nccl"):
        return None
    name = name.split("(", 1)[0].strip()  # Kineto gives demangled names: "...(ncclDevComm*, ...)"
    out: dict[str, Any] = {"collective": None, "algorithm": None, "protocol": None,
                           "kernel_algorithm": None, "kernel_protocol": None, "naming": None}
    if (m := _SYM.match(name)):
        algo = m.group("algo")
        return {**out, "collective": _collective(m.group("coll")),
                "algorithm": f"symmetric:{algo}", "kernel_algorithm": algo,
                "naming": "nccl>=2.27 symmetric"}
    if (m := _DEV.match(name)):
        algo, proto = m.group("algo"), m.group("proto")
        return {**out, "collective": _collective(m.group("coll")),
                "algorithm": "TREE" if algo == "TREE" else None,
                "kernel_algorithm": algo, "kernel_protocol": proto, "naming": "nccl>=2.19"}
    if (m := _KERN.match(name)):
        return {**out, "collective": _collective(m.group("coll")),
                "algorithm": m.group("algo"), "kernel_algorithm": m.group("algo"),
                "kernel_protocol": m.group("proto"), "naming": "nccl 2.7-2.18"}
    if (m := _OLD.match(name)):
        return {**out, "collective": _collective(m.group("coll")), "naming": "nccl<=2.6"}
    return None


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """Every ``NCCL_*`` variable set in ``environ`` (values cut to 200 characters), sorted by
    name."""
    return {k: str(v)[:_MAX_VALUE] for k, v in sorted(environ.items()) if k.startswith("NCCL_")}


def nccl_record(version: Any, environ: Mapping[str, str]) -> dict[str, Any]:
    """The run's NCCL set-up (``dist.runtime.nccl``): ``{"version", "env", "forced",
    "algo", "proto", "source"}``.

    Args:
        version: NCCL's version as the framework reports it (``(2, 21, 5)``, ``"2.21.5"``,
            or the integer code 22105 / 2708 of ``ncclGetVersion``), None if unknown.
        environ: the process environment (``os.environ``).

    ``env`` is every ``NCCL_*`` variable set, ``forced`` those of :data:`CHOICE_VARS` among
    them, ``algo``/``proto`` the values of ``NCCL_ALGO``/``NCCL_PROTO`` (None: NCCL's tuner
    chooses per call). NCCL also reads ``/etc/nccl.conf`` and ``~/.nccl.conf``; those are not
    read here.
    """
    env = env_overrides(environ)
    return {"version": version_text(version), "env": env,
            "forced": sorted(k for k in env if k in CHOICE_VARS),
            "algo": env.get("NCCL_ALGO"), "proto": env.get("NCCL_PROTO"),
            "source": "framework's NCCL version; NCCL_* variables of the process environment"}


def version_text(version: Any) -> str | None:
    """``"2.21.5"`` from a tuple, a dotted string or NCCL's integer code (``NCCL_VERSION_CODE``:
    major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 + patch before);
    None if ``version`` is None or empty."""
    if version is None or version == "":
        return None
    if isinstance(version, (tuple, list)):
        return ".".join(str(int(v)) for v in version)
    if isinstance(version, int) or (isinstance(version, str) and version.isdigit()):
        code = int(version)
        if code >= 10000:
            return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
        return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
    return str(version)


def bucket_algorithms(kernel_names: list[str | None]) -> list[dict[str, Any]]:
    """``{"algorithm", "protocol", "nccl_kernel"}`` per all-reduce from its kernel name
    (:func:`parse_kernel`; all None for a name that is not an NCCL kernel, e.g. gloo's span)."""
    out = []
    for n in kernel_names:
        p = parse_kernel(n)
        out.append({"algorithm": p["algorithm"] if p else None,
                    "protocol": p["protocol"] if p else None,
                    "nccl_kernel": n if p else None})
    return out

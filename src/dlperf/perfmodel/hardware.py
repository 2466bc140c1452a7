"""GPU profiles for the timeline replay: datasheets of GPUs never at hand, device profiles
measured by ``dlperf calibrate``, and the occupancy arithmetic that turns a kernel's launch
geometry into waves on a given GPU.

A :class:`GpuProfile` holds what :mod:`dlperf.perfmodel.transforms.gpu` needs to move a kernel
from one GPU to another (Habitat, Yu et al. ATC'21): SM count, SM clock, memory bandwidth, the
GEMM ceiling per precision, the per-SM limits of the compute capability (registers, threads,
resident blocks, shared memory) and the host: the host-speed probe of the machine
(``env.host_speed.python_loop_ns``) and the kernel launch latency. ``measured`` says which
numbers came from the machine (``dlperf calibrate``, or the ceilings every stored result
carries) and which from the datasheet.

Datasheet sources (dense rates: NVIDIA prints tensor-core rates "with sparsity", twice the
dense rate, for Hopper and Ada; the A100 datasheet prints both; device memory in GB as
printed, read as GiB):

* H100 SXM5 / H100 PCIe: NVIDIA H100 Tensor Core GPU datasheet (FP32 67 / 51 TFLOPS, TF32
  989* / 756*, BF16 1,979* / 1,513*, 3.35 / 2.0 TB/s, 80 GB each); SM counts 132 / 114 and 50 MB L2 from
  the NVIDIA H100 Tensor Core GPU Architecture whitepaper (Table 3). Max SM clock 1,980 /
  1,755 MHz (nvidia-smi ``clocks.max.sm``; 1,980 MHz as recorded by dlperf on the H100 and H200
  machines here, ``env.gpus[].clock_sm_max_mhz``).
* H200 SXM / H200 NVL: NVIDIA H200 Tensor Core GPU datasheet, "Technical Specifications"
  (FP32 67 / 60 TFLOPS, TF32 989* / 835*, BF16 1,979* / 1,671*, 141 GB HBM3e at 4.8 TB/s for
  both). The same GH100 die as the H100 SXM (132 SMs, 50 MB L2); the NVL's SM clock, which its
  datasheet does not print, is its FP32 rate over 132 SMs x 128 FP32 lanes x 2 FLOP
  (60e12 / 33,792 = 1,776 MHz).
* A100 SXM4 80GB / PCIe 40GB: NVIDIA A100 datasheet (FP32 19.5, TF32 156, BF16 312 dense;
  2,039 / 1,555 GB/s; 80 / 40 GB); 108 SMs, 1,410 MHz boost (A100 whitepaper, Table 3).
* L40S: NVIDIA L40S datasheet (FP32 91.6, TF32 183, BF16 362 dense, 864 GB/s, 48 GB; 142
  SMs, 2,520 MHz boost).
* A10: NVIDIA A10 datasheet (FP32 31.2, TF32 62.5, BF16 125 dense, 600 GB/s, 24 GB; 72 SMs,
  1,695 MHz boost).
* V100 SXM2 32GB: NVIDIA V100 datasheet (FP32 15.7 TFLOPS, 900 GB/s, 32 GB, no TF32 or BF16;
  80 SMs, 1,530 MHz boost).
* Per-SM limits by compute capability: CUDA C++ Programming Guide, "Technical Specifications
  per Compute Capability" (7.0, 8.0, 8.6, 8.9, 9.0) and the CUDA Occupancy Calculator's
  allocation rules (registers in units of 256 per warp; 1 KB of shared memory reserved per
  block from 8.0 on).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dlperf.errors import ConfigError
from dlperf.perfmodel.memo import once


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of a compute capability (CUDA C++ Programming Guide).

    Attributes:
        registers: 32-bit registers per SM.
        threads: resident threads per SM.
        blocks: resident blocks per SM.
        shared_bytes: shared memory per SM usable by blocks (bytes).
        reserved_shared_bytes: shared memory the system reserves per block (bytes).
    """

    registers: int = 65536
    threads: int = 2048
    blocks: int = 32
    shared_bytes: int = 228 * 1024
    reserved_shared_bytes: int = 1024


#: The precisions of a profile's GEMM ceilings (``fp32``: CUDA cores; ``tf32``, ``bf16``: dense
#: tensor cores).
GEMM_PRECISIONS = ("fp32", "tf32", "bf16")
#: A precision without a ceiling of its own -> the one whose ceiling it reads (fp16 and bf16
#: run on the same tensor cores at the same rate).
GEMM_READS = {"fp16": "bf16"}

#: Per-SM limits by compute capability.
SM_LIMITS: dict[str, SmLimits] = {
    "7.0": SmLimits(65536, 2048, 32, 96 * 1024, 0),
    "8.0": SmLimits(65536, 2048, 32, 164 * 1024, 1024),
    "8.6": SmLimits(65536, 1536, 16, 100 * 1024, 1024),
    "8.9": SmLimits(65536, 1536, 24, 100 * 1024, 1024),
    "9.0": SmLimits(65536, 2048, 32, 228 * 1024, 1024),
}


@dataclass(frozen=True)
class GpuProfile:
    """What the replay knows of one GPU and the host that drives it.

    Attributes:
        name: a short name (``h100``, ``h200``, ``a100``).
        device_name: the name the driver reports (``NVIDIA H100 80GB HBM3``), if known.
        sms: streaming multiprocessors.
        clock_mhz: the SM clock the kernels run at (max boost).
        bandwidth_bytes_per_s: DRAM bandwidth (datasheet, or measured copy/scale bandwidth).
        gemm_flops_per_s: GEMM ceiling per precision (``fp32``: CUDA cores, ``tf32``,
            ``bf16``: dense tensor cores); a precision the GPU lacks is absent.
        compute_capability: ``"9.0"`` etc. (:data:`SM_LIMITS`).
        l2_bytes: last-level cache.
        host_speed_ns: the host-speed probe (``python_loop_ns``; larger is slower), or None.
        launch_s: the time from one launch to the next kernel's start on an idle device, or
            None.
        h2d_bytes_per_s: host-to-device copy bandwidth from page-locked (pinned) memory, or
            None; h2d_pageable_bytes_per_s: the same from pageable memory, or None.
        measured: the fields measured on the machine (the rest from the datasheet).
        source: where the numbers come from, in words.
    """

    name: str
    sms: int
    clock_mhz: float
    bandwidth_bytes_per_s: float
    gemm_flops_per_s: Mapping[str, float]
    compute_capability: str = "9.0"
    l2_bytes: float | None = None
    device_name: str | None = None
    host_speed_ns: float | None = None
    launch_s: float | None = None
    h2d_bytes_per_s: float | None = None
    h2d_pageable_bytes_per_s: float | None = None
    measured: tuple[str, ...] = ()
    source: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def sm_limits(self) -> SmLimits:
        """The per-SM limits of :attr:`compute_capability` (9.0's for an unknown one)."""
        return SM_LIMITS.get(self.compute_capability, SM_LIMITS["9.0"])

    @property
    def device_kind(self) -> str | None:
        """The kind of device the profile describes, from what it holds: ``extra["device"]``
        where ``dlperf calibrate`` recorded it (``cuda``, ``cpu``); else ``cuda`` where it holds
        what only a GPU gives: a :attr:`device_name` a datasheet has (:func:`short_name`; the
        profile's own :attr:`name` is the user's and says nothing), a finite positive
        :attr:`launch_s` (a CPU's trace has no kernel launch) or a pinned host-to-device copy
        (:attr:`h2d_bytes_per_s`: page-locked memory is a CUDA allocation); else None: a
        profile stored without a kind, of a device no datasheet names, with neither (a CPU's,
        whose GEMM and bandwidth ceilings alone do not tell it from a small GPU's)."""
        kind = self.extra.get("device")
        if kind:
            return str(kind)
        launch = self.launch_s
        if (short_name(self.device_name) or self.h2d_bytes_per_s
                or (isinstance(launch, (int, float)) and math.isfinite(launch) and launch > 0)):
            return "cuda"
        return None

    @property
    def datasheet_only(self) -> bool:
        """True when nothing of this GPU was measured (a GPU never at hand)."""
        return not self.measured

    def gemm(self, precision: str) -> float | None:
        """The GEMM ceiling at ``precision`` (``fp16`` reads ``bf16``: :data:`GEMM_READS`),
        None if absent."""
        return self.gemm_flops_per_s.get(GEMM_READS.get(precision, precision))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        d = asdict(self)
        d["gemm_flops_per_s"] = dict(self.gemm_flops_per_s)
        d["measured"] = list(self.measured)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuProfile:
        """The inverse of :meth:`to_dict` (unknown keys ignored).

        Raises:
            ConfigError: a required field is missing.
        """
        try:
            return cls(name=str(d["name"]), sms=int(d["sms"]), clock_mhz=float(d["clock_mhz"]),
                       bandwidth_bytes_per_s=float(d["bandwidth_bytes_per_s"]),
                       gemm_flops_per_s={k: float(v) for k, v in
                                         (d.get("gemm_flops_per_s") or {}).items() if v},
                       compute_capability=str(d.get("compute_capability") or "9.0"),
                       l2_bytes=d.get("l2_bytes"), device_name=d.get("device_name"),
                       host_speed_ns=d.get("host_speed_ns"), launch_s=d.get("launch_s"),
                       h2d_bytes_per_s=d.get("h2d_bytes_per_s"),
                       h2d_pageable_bytes_per_s=d.get("h2d_pageable_bytes_per_s"),
                       measured=tuple(d.get("measured") or ()), source=str(d.get("source") or ""),
                       extra=dict(d.get("extra") or {}))
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"a stored device profile lacks a field or has a bad value ({e}); "
                              "run `dlperf calibrate` again") from e


H100_URL = "https://www.nvidia.com/en-us/data-center/h100/"
H200_URL = "https://www.nvidia.com/en-us/data-center/h200/"
A100_URL = "https://www.nvidia.com/en-us/data-center/a100/"
L40S_URL = "https://www.nvidia.com/en-us/data-center/l40s/"
A10_URL = "https://www.nvidia.com/en-us/data-center/products/a10-gpu/"
V100_URL = "https://www.nvidia.com/en-us/data-center/v100/"


def _ds(name: str, device_name: str, label: str, form_factor: str, sms: int, clock: float,
        bw: float, fp32: float, tf32: float | None, bf16: float | None, cc: str, l2_mb: float,
        memory_gb: float, source: str, url: str) -> GpuProfile:
    """A datasheet profile: ``bw`` in TB/s, ``fp32``/``tf32``/``bf16`` dense TFLOP/s (None:
    the GPU lacks it), ``clock`` MHz, ``l2_mb`` MiB, ``memory_gb`` the device memory the
    datasheet prints, read as GiB (``extra["memory_bytes"]``: the H100 80GB HBM3's driver
    reports 79.6 GiB, benchmarks/results/h100/calibrate.db, the H200's 140.4); ``label`` names
    the part with its form factor (``extra["label"]``, ``extra["form_factor"]``), ``url`` the
    datasheet's page (``extra["url"]``, also in ``source``)."""
    g = {p: v * 1e12 for p, v in (("fp32", fp32), ("tf32", tf32), ("bf16", bf16)) if v}
    return GpuProfile(name=name, device_name=device_name, sms=sms, clock_mhz=clock,
                      bandwidth_bytes_per_s=bw * 1e12, gemm_flops_per_s=g,
                      compute_capability=cc, l2_bytes=l2_mb * 2**20,
                      source=f"{source}, {form_factor} ({url})",
                      extra={"label": label, "form_factor": form_factor, "url": url,
                             "memory_bytes": memory_gb * 2.0**30})


#: Datasheet profiles by short name (dense TFLOP/s, TB/s), the one table of datasheet figures
#: (:func:`dlperf.perfmodel.datasheet.datasheet_peaks` is a view of it); the module docstring
#: cites each figure, each entry names its form factor (``extra["form_factor"]``), its
#: datasheet's page (``extra["url"]``) and its device memory (``extra["memory_bytes"]``).
DATASHEETS: dict[str, GpuProfile] = {
    "h100": _ds("h100", "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", "SXM", 132, 1980, 3.35, 67,
                989 / 2, 1979 / 2, "9.0", 50, 80,
                "NVIDIA H100 Tensor Core GPU datasheet and H100 whitepaper", H100_URL),
    "h100-pcie": _ds("h100-pcie", "NVIDIA H100 PCIe", "NVIDIA H100 PCIe", "PCIe", 114, 1755,
                     2.0, 51, 756 / 2, 1513 / 2, "9.0", 50, 80,
                     "NVIDIA H100 Tensor Core GPU datasheet and H100 whitepaper", H100_URL),
    "h200": _ds("h200", "NVIDIA H200", "NVIDIA H200 SXM", "SXM", 132, 1980, 4.8, 67, 989 / 2,
                1979 / 2, "9.0", 50, 141, "NVIDIA H200 Tensor Core GPU datasheet", H200_URL),
    "h200-nvl": _ds("h200-nvl", "NVIDIA H200 NVL", "NVIDIA H200 NVL", "NVL", 132, 1776,
                    4.8, 60, 835 / 2, 1671 / 2, "9.0", 50, 141,
                    "NVIDIA H200 Tensor Core GPU datasheet", H200_URL),
    "a100": _ds("a100", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB", "SXM4", 108, 1410,
                2.039, 19.5, 156, 312, "8.0", 40, 80,
                "NVIDIA A100 Tensor Core GPU datasheet and A100 whitepaper", A100_URL),
    "a100-40gb": _ds("a100-40gb", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 PCIe 40GB", "PCIe",
                     108, 1410, 1.555, 19.5, 156, 312, "8.0", 40, 40,
                     "NVIDIA A100 Tensor Core GPU datasheet", A100_URL),
    "l40s": _ds("l40s", "NVIDIA L40S", "NVIDIA L40S", "PCIe", 142, 2520, 0.864, 91.6, 183,
                362, "8.9", 96, 48, "NVIDIA L40S datasheet", L40S_URL),
    "a10": _ds("a10", "NVIDIA A10", "NVIDIA A10", "PCIe", 72, 1695, 0.6, 31.2, 62.5, 125,
               "8.6", 6, 24, "NVIDIA A10 datasheet", A10_URL),
    "v100": _ds("v100", "Tesla V100-SXM2-32GB", "NVIDIA V100 SXM2 32GB", "SXM2", 80, 1530, 0.9,
                15.7, None, None, "7.0", 6, 32, "NVIDIA V100 datasheet", V100_URL),
}

#: Names of each datasheet besides its key and its driver device name (matched by
#: :func:`norm_name`: case, separators and a leading ``NVIDIA``/``Tesla`` ignored). Only names
#: of that exact part: an ``A100 80GB PCIe`` (1.9 TB/s), an ``H200 NVL`` (``h200-nvl``) or a
#: ``V100-SXM2-16GB`` is another card, and an RTX A1000 or an A10G is not an A100 or an A10.
ALIASES: dict[str, tuple[str, ...]] = {
    "h100": ("H100 SXM", "H100 SXM5", "H100 SXM5 80GB", "H100 80GB HBM3"),
    "h100-pcie": ("H100 PCIe",),
    "h200": ("H200 SXM", "H200 SXM 141GB"),
    "h200-nvl": (),
    "a100": ("A100 SXM", "A100 SXM4", "A100 SXM4 80GB"),
    "a100-40gb": ("A100 PCIe 40GB",),
    "l40s": (),
    "a10": (),
    "v100": ("V100 SXM2", "V100 SXM2 32GB"),
}


def norm_name(name: str) -> str:
    """A GPU name as it is matched: lower case, letters and digits only, without a leading
    ``nvidia`` or ``tesla`` (``"NVIDIA H100 80GB HBM3"`` -> ``"h10080gbhbm3"``, ``"h100-sxm"``
    -> ``"h100sxm"``)."""
    key = "".join(c for c in name.lower() if c.isalnum())
    for vendor in ("nvidia", "tesla"):
        if key.startswith(vendor) and len(key) > len(vendor):
            key = key[len(vendor):]
    return key


@functools.cache
def _names() -> dict[str, str]:
    """:func:`norm_name` of every name of every datasheet (its key, its driver device name,
    :data:`ALIASES`) -> the datasheet's key; built once (both tables are constants)."""
    out: dict[str, str] = {}
    for key, prof in DATASHEETS.items():
        for n in (key, prof.device_name or key, *ALIASES.get(key, ())):
            out[norm_name(n)] = key
    return out


def datasheet(name: str) -> GpuProfile:
    """The datasheet profile of ``name``: exactly one of a datasheet's names (its
    :data:`DATASHEETS` key ``h100``, its driver device name ``NVIDIA H100 80GB HBM3`` or an
    :data:`ALIASES` name ``h100-sxm``), case, separators and a leading ``NVIDIA`` ignored
    (:func:`norm_name`). No prefix or substring matches: ``h1000`` is no H100.

    Raises:
        ConfigError: no datasheet has that name; the message gives the close names (did you
            mean) and the known ones.
    """
    import difflib

    names = _names()
    key = norm_name(name)
    if key in names:
        return DATASHEETS[names[key]]
    close = difflib.get_close_matches(key, list(names), n=6, cutoff=0.6)
    shown = list(dict.fromkeys(names[c] for c in close))
    hint = f"did you mean {' or '.join(shown)}? " if shown else ""
    raise ConfigError(f"no datasheet for GPU {name!r}; {hint}known: {', '.join(DATASHEETS)} "
                      "(or a full name such as 'NVIDIA H100 80GB HBM3', 'h100-sxm'), or run "
                      "`dlperf calibrate` on it to store a measured profile")


def short_name(device_name: str | None) -> str | None:
    """The :data:`DATASHEETS` key of a GPU name (a driver's device name or any name
    :func:`datasheet` takes), None if none is exactly that name."""
    if not device_name:
        return None
    return _names().get(norm_name(device_name))


def same_gpu(a: str | None, b: str | None) -> bool:
    """Whether two GPU names (driver device names, profile names) name the same card: the
    same datasheet (:func:`short_name`), else, for cards without one, the same
    :func:`norm_name`; a missing name matches nothing."""
    if not a or not b:
        return False
    sa, sb = short_name(a), short_name(b)
    if sa or sb:
        return sa == sb
    return norm_name(a) == norm_name(b)


def blocks_per_sm(threads_per_block: int, registers: int | None, shared_bytes: int | None,
                  limits: SmLimits) -> int:
    """Resident blocks per SM of a kernel (the CUDA Occupancy Calculator's rules): the least
    of the block limit, the threads (in whole warps), the registers (``registers`` per thread
    rounded up to 8, allocated per warp in units of 256) and the shared memory (per block plus
    the system's reserve, in 128-byte units); at least 1 (the kernel did run)."""
    warps = max(1, math.ceil(threads_per_block / 32))
    by_threads = limits.threads // (warps * 32)
    by_regs = limits.blocks
    if registers:
        per_warp = math.ceil(math.ceil(registers / 8) * 8 * 32 / 256) * 256
        by_regs = (limits.registers // per_warp) // warps
    by_smem = limits.blocks
    if shared_bytes:
        need = math.ceil((shared_bytes + limits.reserved_shared_bytes) / 128) * 128
        by_smem = limits.shared_bytes // need
    return max(1, min(limits.blocks, by_threads, by_regs, by_smem))


def waves(blocks: int, threads_per_block: int, registers: int | None,
          shared_bytes: int | None, gpu: GpuProfile) -> float:
    """Waves of a launch of ``blocks`` blocks on ``gpu``: ``ceil(blocks / (SMs x blocks per
    SM))`` (Habitat's wave size)."""
    size = gpu.sms * blocks_per_sm(threads_per_block, registers, shared_bytes, gpu.sm_limits)
    return math.ceil(blocks / size)


# --- profiles stored in a results file ------------------------------------------------------

#: ``resolve("datasheet:h100")``: the datasheet alone, whatever was measured.
DATASHEET_PREFIX = "datasheet:"
#: Prefix of a device profile's key in a results file's ``meta`` table.
META_PREFIX = "device_profile:"


def store_profile(path: str, profile: GpuProfile) -> None:
    """Store ``profile`` in the results file ``path`` (its ``meta`` table, key
    ``device_profile:<name>``; created if missing), replacing one of the same name.

    Raises:
        ConfigError: ``path`` cannot be opened as a results file (from the store).
    """
    from dlperf.results.store import ResultStore

    with ResultStore(path) as store, store.transaction("storing the device profile"):
        store._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                          (META_PREFIX + profile.name, json.dumps(profile.to_dict())))


def stored_profiles(paths: Any) -> dict[str, GpuProfile]:
    """The device profiles stored in results files (paths or folders of ``*.db``), by name;
    the last file's wins where two hold the same name. Each file is read once per process
    and content (:func:`_profiles_in`)."""
    from dlperf.results.dbfile import results_files

    out: dict[str, GpuProfile] = {}
    for f in results_files(paths):
        out.update(_profiles_in(f))
    return out


#: The profiles :func:`_profiles_in` read, by resolved path and content digest
#: (:func:`dlperf.perfmodel.records.content_digest`, the key of every store of the model): a
#: prediction asks for the same files' profiles more than once (:func:`resolve`, once per GPU
#: it names), and each read opens the whole file as a checked in-memory copy.
_PROFILES_READ: dict[tuple[str, str], dict[str, GpuProfile]] = {}


def _profiles_in(path: Any) -> dict[str, GpuProfile]:
    """The device profiles stored in the results file ``path``, by name (a copy); none where
    it cannot be read as a results file or a profile does not parse."""
    import os

    from dlperf.perfmodel.records import content_digest

    try:
        key = (os.path.realpath(path), content_digest(path))
    except OSError:  # gone or unreadable since it was listed: it holds none
        return {}
    got: dict[str, GpuProfile] = once(_PROFILES_READ, key, lambda: _read_profiles(path))
    return dict(got)


def _read_profiles(path: Any) -> dict[str, GpuProfile]:
    from dlperf.results.store import ResultStore

    out: dict[str, GpuProfile] = {}
    try:
        with ResultStore(path, read_only=True) as store:
            rows = store._db.execute("SELECT key, value FROM meta WHERE key LIKE ?",
                                     (META_PREFIX + "%",)).fetchall()
    except Exception:  # noqa: BLE001 - a file that is not a results file holds none
        return out
    for k, v in rows:
        try:
            out[k[len(META_PREFIX):]] = GpuProfile.from_dict(json.loads(v))
        except (ValueError, ConfigError):
            continue
    return out


def profile_from_points(points: Any, device_name: str) -> GpuProfile:
    """The profile of the GPU ``device_name`` from stored results: its datasheet with the
    ceilings the results measured (median of every result's matmul ceiling per precision and
    its bandwidth) and the median host-speed probe of those results.

    Raises:
        ConfigError: no datasheet matches ``device_name``.
    """
    import statistics

    base = datasheet(device_name)
    mine = [p for p in points if p.device_name == device_name]
    recorded = {f"gemm_{prec}": [p.matmul_flops_per_s.get(prec) for p in mine]
                for prec in GEMM_PRECISIONS}
    recorded["bandwidth"] = [p.bandwidth_bytes_per_s for p in mine]
    recorded["host_speed"] = [x for p in mine for x in p.host_speed_ns]
    # each field's median over the results that recorded it (0 and None: not recorded)
    med = {k: statistics.median(v) for k, v in
           ((k, [x for x in v if x]) for k, v in recorded.items()) if v}
    gemm = {prec: med[f"gemm_{prec}"] for prec in GEMM_PRECISIONS if f"gemm_{prec}" in med}
    return replace(base, gemm_flops_per_s={**base.gemm_flops_per_s, **gemm},
                   bandwidth_bytes_per_s=med.get("bandwidth", base.bandwidth_bytes_per_s),
                   host_speed_ns=med.get("host_speed"), device_name=device_name,
                   measured=tuple(med),
                   source=f"{base.source}; ceilings and host probe of {len(mine)} stored results")


def resolve(name: str, paths: Any = (), points: Any = ()) -> GpuProfile:
    """The profile of the GPU ``name``: a profile stored by ``dlperf calibrate`` in one of
    ``paths`` (by its name or device name), else the stored results' own ceilings on that
    device (``points``), else its datasheet alone (:attr:`GpuProfile.datasheet_only`).
    ``datasheet:NAME`` asks for the datasheet alone even where measurements exist.

    Raises:
        ConfigError: nothing is known of ``name``.
    """
    key = name.strip().lower()
    if key.startswith(DATASHEET_PREFIX):
        return datasheet(key[len(DATASHEET_PREFIX):])
    stored = stored_profiles(paths)
    for pname, prof in stored.items():
        if norm_name(pname) == norm_name(name) or (
                prof.device_name and norm_name(prof.device_name) == norm_name(name)):
            return prof
    short = short_name(name)
    for prof in stored.values():
        if short and short_name(prof.device_name) == short:
            return prof
    try:
        sheet = datasheet(name)
    except ConfigError as e:
        if not stored:
            raise
        raise ConfigError(f"{e}; stored profiles: {', '.join(sorted(stored))}") from None
    for dn in sorted({p.device_name for p in points if p.device_name}):
        if short_name(dn) == sheet.name:
            return profile_from_points(points, dn)
    return sheet


def achieved_like(dst: GpuProfile, src: GpuProfile) -> GpuProfile:
    """``dst`` with each datasheet ceiling that ``src`` measured (a GEMM ceiling, the
    bandwidth) scaled to the share of its datasheet ``src`` achieved, so that a measured
    source and a datasheet target are compared like for like (a measured fp32 GEMM of
    51 TFLOP/s on an H200 against the H100's datasheet 67 would read as a faster H100).
    Fields ``dst`` measured itself stay; without a datasheet for ``src`` nothing changes."""
    try:
        ref = datasheet(src.device_name or src.name)
    except ConfigError:
        return dst
    gemm = dict(dst.gemm_flops_per_s)
    for prec, v in src.gemm_flops_per_s.items():
        if (f"gemm_{prec}" in src.measured and f"gemm_{prec}" not in dst.measured
                and prec in gemm and ref.gemm(prec)):
            gemm[prec] = gemm[prec] * v / ref.gemm_flops_per_s[prec]
    bw = dst.bandwidth_bytes_per_s
    if "bandwidth" in src.measured and "bandwidth" not in dst.measured:
        bw = bw * src.bandwidth_bytes_per_s / ref.bandwidth_bytes_per_s
    return replace(dst, gemm_flops_per_s=gemm, bandwidth_bytes_per_s=bw)

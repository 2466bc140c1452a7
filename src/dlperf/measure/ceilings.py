"""Hardware ceilings measured in the run itself: a matmul microbenchmark per precision and a
memory-bandwidth microbenchmark, on the run's device, with the run's framework.

MFU needs a ceiling, and datasheet peaks are not what a machine delivers (clocks, power caps,
library versions: docs/measurement.md measured 753 TFLOP/s bf16 against a 989 TFLOP/s dense datasheet
peak on one H200). So the ceilings are measured on the machine, with the framework's own
kernels, once per framework, device, precision and thread count (:func:`point_ceilings`): a
point measures the matmul ceiling of its own precision and the bandwidth, or takes them from
the cache (this process's, then the sweep's file, :class:`CeilingCache`, which the sweep fills
from the results file and from each point's result); a cached entry counts only for the same
machine (:func:`machine_fingerprint`) and for :data:`CACHE_MAX_AGE_S`. Each result says where
its ceilings came from (``origin``: measured in this point, or cached from point X).

* **matmul**: square ``n x n @ n x n`` products, ``2 n^3`` FLOPs each, for ``fp32`` (IEEE float32:
  TF32 explicitly off), ``tf32`` (float32 with TensorFloat-32 allowed) and ``bf16`` (bfloat16
  inputs and output, float32 accumulation); several sizes, the best rate counts (a GEMM reaches
  its peak only when large enough to fill the device; too large only costs time);
* **bandwidth**: ``y = 2 * x`` over a float32 array much larger than the last-level cache
  (STREAM's "scale" kernel, McCalpin 1995), counted as ``2 * nbytes`` moved (read + write);
* **host-to-device copies** (backends with ``host_copy``): one copy of ``nbytes`` from host
  memory into the device's, from page-locked (``pinned``: the DMA engine reads it directly)
  and from ordinary pageable memory (staged through a pinned buffer by the driver), counted
  as ``nbytes`` moved; what an input pipeline's copies cost (nvbandwidth's
  ``host_to_device_memcpy_ce``, NVIDIA; CUDA's ``bandwidthTest`` sample). On a CPU device
  the "device" is host memory: the pageable copy is a host memcpy and no pinned one is made.

Each kernel is timed on the host around ``reps`` back-to-back calls with one wait for the device
at the end (``block``), after warm-up calls (compilation, autotuning, allocation); ``reps`` grows
until the timed calls take ``target_s``. The kernels are large (milliseconds on a GPU), so the
host clock and one synchronisation add well under 1%.

Backends (``frameworks/*_probes.py``) provide :class:`CeilingBackend`; this module never imports
a framework.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

MATMUL_PRECISIONS = ("fp32", "tf32", "bf16")

#: Sizes tried per device kind (ascending; larger ones are skipped once one call takes longer
#: than ``max_call_s``).
#: A CPU gets one size each (a 1024^3 GEMM already runs at the CPU's matmul rate; 128 MiB is
#: several times a server CPU's last-level cache) so that the probes cost well under a second.
MATMUL_SIZES = {"cuda": (2048, 4096, 8192), "cpu": (1024,)}
BANDWIDTH_BYTES = {"cuda": (256 * 2**20, 1024 * 2**20), "cpu": (128 * 2**20,)}
#: Host-to-device copy sizes: large enough that the copy engine's setup (about 10 us) is under
#: 1% of a copy at 25 GB/s.
H2D_BYTES = {"cuda": (64 * 2**20, 256 * 2**20), "cpu": (64 * 2**20,)}
#: The two kinds of host memory a host-to-device copy reads.
H2D_MODES = ("pinned", "pageable")
#: Timing target per kernel and size, and the longest single call worth trying a larger size.
TARGET_S = {"cuda": 0.05, "cpu": 0.05}
MAX_CALL_S = {"cuda": 0.25, "cpu": 0.15}
#: Untimed calls before timing (compilation, autotuning, first-touch of the pages).
WARMUP = {"cuda": 2, "cpu": 1}

_CACHE: dict[tuple[str, str], dict[str, Any]] = {}


class CeilingBackend(Protocol):
    """What a framework provides for the microbenchmarks."""

    framework: str
    device_kind: str  #: ``"cuda"`` or ``"cpu"``
    device_key: str   #: identifies the device for the cache, e.g. ``"cuda:0"``

    def precision(self, precision: str) -> contextlib.AbstractContextManager:
        """Context in which float32 matmuls run at ``precision`` (fp32: TF32 off; tf32: on)."""

    def matmul(self, n: int, precision: str) -> Callable[[], Any]:
        """Allocate two ``n x n`` operands (bfloat16 for ``bf16``, else float32); return a
        function that computes one product and returns it."""

    def scale(self, nbytes: int) -> Callable[[], Any]:
        """Allocate a float32 array of ``nbytes``; return a function computing ``2 * x``."""

    def block(self, out: Any) -> None:
        """Wait until ``out`` is computed."""

    # Optional: ``host_copy(nbytes, pinned) -> Callable[[], Any]``, allocate ``nbytes`` of
    # host memory (page-locked if ``pinned``) and of device memory; return a function that
    # copies the first into the second. Backends without it measure no copies.

    def release(self) -> None:
        """Free what the kernels allocated (caches of the framework's allocator)."""


def time_calls(fn: Callable[[], Any], block: Callable[[Any], None], target_s: float,
               warmup: int = 2, max_reps: int = 50,
               clock: Callable[[], float] = time.perf_counter) -> tuple[float, int]:
    """Mean seconds per call of ``fn`` and the number of timed calls.

    ``warmup`` untimed calls, then one timed call to size the loop, then ``reps`` calls (at
    least 2, at most ``max_reps``, enough to take ``target_s``) timed together with one
    ``block`` at the end; the mean of those is returned.
    """
    for _ in range(warmup):
        block(fn())
    t0 = clock()
    block(fn())
    first = clock() - t0
    reps = max(2, min(max_reps, math.ceil(target_s / first - 1e-9) if first > 0 else max_reps))
    t0 = clock()
    out = None
    for _ in range(reps):
        out = fn()
    block(out)
    return (clock() - t0) / reps, reps


def _ladder(make: Callable[[int], Callable[[], Any]], sizes: tuple[int, ...],
            work: Callable[[int], float], backend: CeilingBackend, kind: str,
            clock: Callable[[], float]) -> dict[str, Any]:
    """Run ``make(size)`` for each size; ``work(size)`` = FLOPs or bytes per call."""
    rows: list[dict[str, Any]] = []
    error = None
    fn: Callable[[], Any] | None = None
    for size in sizes:
        try:
            fn = make(size)
            t, reps = time_calls(fn, backend.block, TARGET_S[kind], warmup=WARMUP[kind],
                                 clock=clock)
        except Exception as e:  # noqa: BLE001 - out of memory, unsupported dtype: recorded
            error = f"{type(e).__name__}: {str(e)[:200]}"
            break
        finally:
            fn = None  # noqa: F841 - drop the operands before the next size
        rows.append({"size": size, "s_per_call": t, "reps": reps, "rate": work(size) / t})
        if t > MAX_CALL_S[kind]:
            break
    best = max(rows, key=lambda r: r["rate"], default={"rate": None, "size": None})
    return {"best": best["rate"], "best_size": best["size"], "runs": rows, "error": error}


def _matmul_of(backend: Any, n: int, precision: str) -> Callable[[], Any]:
    """The backend's n x n matmul callable at ``precision`` (one ladder rung)."""
    return backend.matmul(n, precision)


def measure_ceilings(backend: CeilingBackend, precisions: tuple[str, ...] = MATMUL_PRECISIONS,
                     clock: Callable[[], float] = time.perf_counter,
                     use_cache: bool = True) -> dict[str, Any]:
    """Measure (or return this process's cached) matmul and bandwidth ceilings.

    Returns:
        ``{"framework", "device", "matmul_flops_per_s": {precision: best FLOP/s or None},
        "bandwidth_bytes_per_s": best bytes/s or None, "matmul": {precision: {"best",
        "best_size", "runs": [{"size", "s_per_call", "reps", "rate"}], "error"}},
        "bandwidth": {...same, size in bytes...}, "elapsed_s", "cached", "method"}``.
    """
    key = (backend.framework, backend.device_key)
    if use_cache and key in _CACHE:
        return {**_CACHE[key], "cached": True}
    kind = backend.device_kind
    t0 = clock()
    matmul: dict[str, Any] = {}
    for p in precisions:
        with backend.precision(p):
            matmul[p] = _ladder(functools.partial(_matmul_of, backend, precision=p),
                                MATMUL_SIZES[kind],
                                lambda n: 2.0 * n ** 3, backend, kind, clock)
        backend.release()
    bw = _ladder(backend.scale, BANDWIDTH_BYTES[kind], lambda b: 2.0 * b, backend, kind, clock)
    backend.release()
    out = {"framework": backend.framework, "device": backend.device_key,
           "matmul_flops_per_s": {p: matmul[p]["best"] for p in precisions},
           "bandwidth_bytes_per_s": bw["best"], "matmul": matmul, "bandwidth": bw,
           "elapsed_s": clock() - t0, "cached": False,
           "method": "square GEMM 2n^3 FLOPs, best over sizes; bandwidth y=2x (STREAM scale), "
                     "2 x bytes; host clock over back-to-back calls, one device wait"}
    if use_cache:
        _CACHE[key] = out
    return out



# --- once per framework, device, precision and thread count ---------------------------------

#: Bumped when what the probes measure changes: a cached ceiling of another method is measured
#: again (2: one precision per point, cached across the points of a sweep).
CEILINGS_METHOD_VERSION = 2
#: The environment variable naming the cache file of a sweep (:func:`dlperf.sweep.execute`
#: sets it for its workers); unset: only this process's cache.
CACHE_ENV = "DLPERF_CEILINGS_CACHE"
#: A cached ceiling older than this (s) is measured again: a machine's clocks, power cap or
#: libraries may change without its fingerprint changing; a day costs one measurement per day.
CACHE_MAX_AGE_S = 24 * 3600.0

_POINT_CACHE: dict[str, dict[str, Any]] = {}  # this process's entries, by cache key


def machine_fingerprint(env: Mapping[str, Any], versions: Mapping[str, Any],
                        framework: str) -> dict[str, Any]:
    """What must be equal for a cached ceiling to stand for this machine: the host name, the
    CPU (model name and family/model/stepping), the CPUs this process may use, the GPUs (uuids,
    else names), the framework's version, the device's name and :data:`CEILINGS_METHOD_VERSION`.

    ``env``: :func:`dlperf.env.collect_env`'s dict; ``versions``: the framework session's
    (``{framework: version, "device_name": ...}``). Returns a JSON-able dict."""
    cid = env.get("cpu_id") or {}
    gpus = sorted(str(g.get("uuid") or g.get("name")) for g in env.get("gpus") or []
                  if isinstance(g, Mapping))
    return {"hostname": env.get("hostname"), "cpu_model": env.get("cpu_model"),
            "cpu": [cid.get("family"), cid.get("model"), cid.get("stepping")],
            "usable_cpus": env.get("cpu_affinity"), "gpus": gpus,
            "framework": f"{framework} {versions.get(framework)}",
            "device_name": versions.get("device_name"), "method": CEILINGS_METHOD_VERSION}


def cache_key(framework: Any, device_key: Any, component: str, threads: Any) -> str:
    """The cache key of one ceiling: ``component`` is ``"matmul:<precision>"`` or
    ``"bandwidth"``; ``threads`` the framework's thread count (``"default"`` if not set)."""
    return f"{framework}|{device_key}|{component}|threads={_threads(threads)}"


def _threads(threads: Any) -> Any:
    """A thread count as the cache keys and the results name it: ``"default"`` where not
    set."""
    return threads if threads else "default"


def _now(now_s: float | None) -> float:
    """``now_s``, else the wall clock (s since the epoch)."""
    return time.time() if now_s is None else now_s


def _age_s(measured_at: Any, now_s: float) -> float:
    """Seconds since the ISO time ``measured_at``; infinite if it cannot be read."""
    try:
        return now_s - _dt.datetime.fromisoformat(str(measured_at)).timestamp()
    except ValueError:
        return math.inf


class CeilingCache:
    """Ceilings measured before, by :func:`cache_key`: each entry is ``{"key", "fingerprint",
    "ladder"`` (a :func:`_ladder` dict: ``best``, ``best_size``, ``runs``, ``error``)``,
    "measured_at"`` (ISO time)``, "run_key", "label"`` (the point that measured it)``, "where"``
    (in words: ``"this sweep"``, ``"results file X"``)``}``. A JSON file between the sweep,
    which writes it, and its workers, which read it (:data:`CACHE_ENV`)."""

    def __init__(self, entries: Mapping[str, dict[str, Any]] | None = None) -> None:
        self.entries: dict[str, dict[str, Any]] = dict(entries or {})

    @classmethod
    def load(cls, path: str | Path | None) -> CeilingCache:
        """The cache in file ``path``; empty if there is none or it cannot be read (a cache:
        measuring again is the fallback)."""
        if not path:
            return cls()
        from dlperf.jsoncache import read_json

        data = read_json(path)  # trusted only if ours and intact (dlperf.jsoncache)
        entries = data.get("entries") if isinstance(data, dict) else None
        return cls(entries if isinstance(entries, dict) else None)

    def save(self, path: str | Path) -> None:
        """Write the cache to ``path`` (through a temporary file and a rename)."""
        from dlperf.jsoncache import write_json

        write_json(path, {"entries": self.entries})

    def get(self, key: str, fingerprint: Mapping[str, Any],
            now_s: float | None = None) -> dict[str, Any] | None:
        """The entry of ``key`` if it was measured on this machine (same ``fingerprint``) less
        than :data:`CACHE_MAX_AGE_S` ago, else None."""
        e = self.entries.get(key)
        if (e is None or e.get("fingerprint") != dict(fingerprint)
                or _age_s(e.get("measured_at"), _now(now_s)) > CACHE_MAX_AGE_S):
            return None
        return e

    def add_result(self, result: Mapping[str, Any], where: str) -> int:
        """Add the ceilings that ``result`` (a flat result dict) measured itself (``origin``
        ``how == "measured"``, with a rate), unless a newer entry has the key; returns how
        many were added. Cached ones are skipped: an entry always names the point that
        measured it."""
        c = result.get("ceilings") or {}
        n = 0
        for comp, o in (c.get("origin") or {}).items():
            kind, _, sub = comp.partition(":")  # a result keeps its ladders as it names them
            ladder = c.get(kind) if kind == "bandwidth" else (c.get(kind) or {}).get(sub)
            if (not isinstance(o, Mapping) or o.get("how") != "measured" or not ladder
                    or ladder.get("best") is None or not c.get("fingerprint")):
                continue
            key = cache_key(c.get("framework"), c.get("device"), comp, c.get("threads"))
            old = self.entries.get(key)
            if old is not None and str(old.get("measured_at")) > str(o.get("measured_at")):
                continue
            self.entries[key] = {"key": key, "fingerprint": c["fingerprint"], "ladder": ladder,
                                 "measured_at": o.get("measured_at"),
                                 "run_key": result.get("run_key"), "label": o.get("label"),
                                 "where": where}
            n += 1
        return n


def _matmul_ladder(backend: CeilingBackend, precision: str,
                   clock: Callable[[], float]) -> dict[str, Any]:
    """The square GEMMs at ``precision``, ``2 n^3`` FLOPs each."""
    kind = backend.device_kind
    with backend.precision(precision):
        return _ladder(lambda n: backend.matmul(n, precision), MATMUL_SIZES[kind],
                       lambda n: 2.0 * n ** 3, backend, kind, clock)


def _bandwidth_ladder(backend: CeilingBackend, _: str,
                      clock: Callable[[], float]) -> dict[str, Any]:
    """STREAM's scale kernel, ``2 x bytes`` moved."""
    kind = backend.device_kind
    return _ladder(backend.scale, BANDWIDTH_BYTES[kind], lambda b: 2.0 * b, backend, kind,
                   clock)


def _h2d_ladder(backend: CeilingBackend, memory: str,
                clock: Callable[[], float]) -> dict[str, Any]:
    """Host-to-device copies from ``pinned`` or ``pageable`` host memory, ``bytes`` moved."""
    kind, pinned = backend.device_kind, memory == "pinned"
    copy = backend.host_copy  # type: ignore[attr-defined]
    return _ladder(lambda n: copy(n, pinned), H2D_BYTES[kind], float, backend, kind, clock)


#: The microbenchmark of each kind of ceiling (a component's name before ``:``; after it the
#: precision or the host memory).
_LADDERS: dict[str, Callable[[CeilingBackend, str, Callable[[], float]], dict[str, Any]]] = {
    "matmul": _matmul_ladder, "bandwidth": _bandwidth_ladder, "h2d": _h2d_ladder}


def _measure_component(backend: CeilingBackend, component: str,
                       clock: Callable[[], float]) -> dict[str, Any]:
    """Measure one ceiling (``"matmul:<precision>"``, ``"bandwidth"`` or ``"h2d:pinned"`` /
    ``"h2d:pageable"``): a :func:`_ladder` (:data:`_LADDERS`)."""
    kind, _, sub = component.partition(":")
    out = _LADDERS[kind](backend, sub, clock)
    backend.release()
    return out


def point_ceilings(backend: CeilingBackend, precision: str, *, threads: Any,
                   fingerprint: Mapping[str, Any], point: Mapping[str, Any] | None = None,
                   cache_path: str | Path | None = None,
                   clock: Callable[[], float] = time.perf_counter,
                   now_s: float | None = None) -> dict[str, Any]:
    """The ceilings of one point: the matmul ceiling at the point's ``precision``, the
    memory bandwidth and, where the backend can copy (``host_copy``), the host-to-device
    copy bandwidth from pinned and pageable memory, each taken from this process's cache,
    else from the cache file
    ``cache_path`` (:class:`CeilingCache`, same machine and recent enough), else measured here.

    Args:
        backend: the framework's :class:`CeilingBackend` on the point's device.
        precision: ``fp32``, ``tf32`` or ``bf16``.
        threads: the framework's thread count (part of the cache key; None: its default).
        fingerprint: :func:`machine_fingerprint` of this machine.
        point: ``{"run_key", "label"}`` of the point, named as the origin of what it measures.
        cache_path: the sweep's cache file (None: only this process's cache).
        clock: interval clock (s); ``now_s``: wall time (s since the epoch) for the age.

    Returns:
        ``{"framework", "device", "threads", "precision", "matmul_flops_per_s": {precision:
        FLOP/s or None}, "bandwidth_bytes_per_s", "matmul": {precision: ladder}, "bandwidth":
        ladder, "elapsed_s"`` (spent here)``, "cached"`` (nothing measured here)``, "origin":
        {"matmul:<precision>" | "bandwidth" | "h2d:pinned" | "h2d:pageable": {"how":
        "measured" | "cached", "where", "run_key", "label", "measured_at"}}, "fingerprint",
        "method"}``, and with copies ``"h2d_bytes_per_s": {"pinned", "pageable": bytes/s or
        None}, "h2d": {"pinned", "pageable": ladder}``.
    """
    t0, point = clock(), dict(point or {})
    thr, now_s = _threads(threads), _now(now_s)
    stamp = _dt.datetime.fromtimestamp(now_s, _dt.UTC).isoformat(timespec="seconds")
    shared: CeilingCache | None = None
    ladders: dict[str, dict[str, Any]] = {}
    origin: dict[str, dict[str, Any]] = {}
    # the host memories copied from, where the backend copies (pinned memory is a GPU's notion)
    modes = [m for m in H2D_MODES if m == "pageable" or backend.device_kind != "cpu"] \
        if callable(getattr(backend, "host_copy", None)) else []
    for comp in [f"matmul:{precision}", "bandwidth", *(f"h2d:{m}" for m in modes)]:
        key = cache_key(backend.framework, backend.device_key, comp, thr)
        entry = CeilingCache(_POINT_CACHE).get(key, fingerprint, now_s)
        if entry is None and cache_path:
            shared = shared or CeilingCache.load(cache_path)
            entry = shared.get(key, fingerprint, now_s)
        if entry is None:
            ladder = _measure_component(backend, comp, clock)
            origin[comp] = {"how": "measured", "where": "this point",
                            "run_key": point.get("run_key"), "label": point.get("label"),
                            "measured_at": stamp}
            if ladder["best"] is not None:
                _POINT_CACHE[key] = {"key": key, "fingerprint": dict(fingerprint),
                                     "ladder": ladder, "measured_at": stamp,
                                     "run_key": point.get("run_key"),
                                     "label": point.get("label"), "where": "this process"}
        else:
            ladder = entry["ladder"]
            origin[comp] = {"how": "cached", **{k: entry.get(k) for k in (
                "where", "run_key", "label", "measured_at")}}
        ladders[comp] = ladder
    mm, bw = ladders[f"matmul:{precision}"], ladders["bandwidth"]
    h2d = {m: ladders[f"h2d:{m}"] for m in modes}
    copies: dict[str, Any] = {}
    copy_words = ""
    if modes:
        copies = {"h2d_bytes_per_s": {m: v["best"] for m, v in h2d.items()}, "h2d": h2d}
        copy_words = "host-to-device copies from pinned and pageable memory, bytes; "
    return {"framework": backend.framework, "device": backend.device_key, "threads": thr,
            "precision": precision, "matmul_flops_per_s": {precision: mm["best"]},
            "bandwidth_bytes_per_s": bw["best"], "matmul": {precision: mm}, "bandwidth": bw,
            "elapsed_s": clock() - t0,
            "cached": all(o["how"] == "cached" for o in origin.values()), "origin": origin,
            "fingerprint": dict(fingerprint), **copies,
            "method": "square GEMM 2n^3 FLOPs at the point's precision, best over sizes; "
                      "bandwidth y=2x (STREAM scale), 2 x bytes; "
                      + copy_words
                      + "host clock over back-to-back calls, one device wait; once per "
                        "framework, device, precision and threads (origin says where each "
                        "came from)"}


def origin_text(ceilings: Mapping[str, Any] | None) -> str | None:
    """One line saying where a result's ceilings came from, e.g. ``"matmul:fp32 cached from
    fcn5_tiny torch/eager cpu fp32 b=8 synthetic (this sweep); bandwidth measured in this
    point"``; None without an ``origin`` (results before :data:`CEILINGS_METHOD_VERSION` 2)."""
    parts = []
    for comp, o in ((ceilings or {}).get("origin") or {}).items():
        if o.get("how") == "measured":
            parts.append(f"{comp} measured in this point")
        else:
            parts.append(f"{comp} cached from {o.get('label') or o.get('run_key')} "
                         f"({o.get('where')}, {o.get('measured_at')})")
    return "; ".join(parts) or None

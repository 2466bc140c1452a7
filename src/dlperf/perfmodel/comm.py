"""Communication: fitted all-reduce times, all-reduce algorithms over a topology, and WFBP.

**Fitted all-reduce.** Shi & Chu 2017 model one all-reduce of ``M`` bytes on ``N`` ranks as
``a + b M`` fitted per ``N``. Over the 8 B - 1 GiB sweep of ``dlperf allreduce`` one line does
not hold (NCCL changes protocol and channel count with the size, so the bandwidth rises from
34 GB/s at 1 MiB to 327 GB/s at 1 GiB on two H200s), so :func:`fit_allreduce` fits ``a + b M``
per *message regime*: contiguous size ranges found by segmented least squares on relative error
(at most :data:`MAX_REGIMES`, each with at least :data:`MIN_REGIME_POINTS` sizes), per rank count.

**Algorithms over a topology** (alpha: latency per step in s, beta: s per byte of a link):

* ring (Patarasuk & Yuan 2009, bandwidth-optimal; Thakur, Rabenseifner & Gropp 2005 sec. 4):
  ``T = 2 (p-1) alpha + 2 (p-1)/p M beta``;
* tree (pipelined double binary tree, Sanders, Speck & Traeff 2009; NCCL 2.4): ``T = 2
  ceil(log2 p) alpha + 2 M beta`` (reduce then broadcast, each pipelined through every link);
* hierarchical (intra-node reduce-scatter, inter-node ring all-reduce of ``M/g``, intra-node
  all-gather; e.g. Jia et al. 2018, "Highly scalable deep learning training system with
  mixed-precision"): ``T = 2 [(g-1) a_i + (g-1)/g M b_i] + ring_k(M/g; a_e, b_e)``.

The reduction arithmetic is left out (a GPU reduces faster than any link delivers).
Link values are *given* (:data:`LINKS`, with their sources) unless the stored all-reduce sweep
measured them on this machine (:func:`measured_link`); every result says which.

**WFBP** (Shi & Chu 2017, sec. III-B, wait-free backpropagation): gradient buckets ``i = 1..n``
in the order backward produces them, bucket ``i`` ready at ``r_i`` with communication time
``c_i``; a bucket starts when it is ready and the previous one has finished::

    s_1 = r_1,  s_i = max(r_i, s_{i-1} + c_{i-1}),  e_n = s_n + c_n

and the exposed communication is ``max(0, e_n - t_b)``, ``t_b`` the end of backward.
"""

from __future__ import annotations

import bisect
import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlperf.errors import ConfigError, did_you_mean
from dlperf.perfmodel import equations as eq
from dlperf.perfmodel.equations import FIRST_BUCKET_BYTES as FIRST_BUCKET_BYTES
from dlperf.perfmodel.equations import Bucket as Bucket
from dlperf.perfmodel.equations import uniform_buckets as uniform_buckets
from dlperf.perfmodel.equations import wfbp_exposed_s as wfbp_exposed_s
from dlperf.perfmodel.equations import wfbp_schedule as wfbp_schedule
from dlperf.perfmodel.records import CollectivePoint

#: Regimes of the piecewise fit: at most 6, each at least 3 sizes. Chosen on the leave-one-size-
#: out back-test of benchmarks/results/h200x2/allreduce.db (sizes >= 1 MiB, 2 ranks): MdAPE 5.5%
#: with at most 4 regimes, 2.5% with 6 or 8; 2-size regimes over-fit (max error 21% either way).
MAX_REGIMES = 6
MIN_REGIME_POINTS = 3


@dataclass(frozen=True)
class Regime:
    """``t = a + b M`` for ``lo <= M <= hi`` bytes (a in s, b in s/byte)."""

    lo_bytes: int
    hi_bytes: int
    a_s: float
    b_s_per_byte: float


@dataclass(frozen=True)
class AllReduceFit:
    """A piecewise ``a + b M`` all-reduce model of one rank count; ``sources``: run ids."""

    nranks: int
    regimes: tuple[Regime, ...]
    sources: tuple[str, ...]

    def time_s(self, size_bytes: float) -> float:
        """Predicted all-reduce time (s) of ``size_bytes``; the nearest regime outside the range."""
        if size_bytes <= 0:
            return 0.0
        # the first regime reaching the size, else the last
        i = bisect.bisect_left([r.hi_bytes for r in self.regimes], size_bytes)
        reg = self.regimes[min(i, len(self.regimes) - 1)]
        return max(reg.a_s + reg.b_s_per_byte * size_bytes, 1e-9)

    @property
    def large(self) -> Regime:
        """The regime of the largest messages (its ``b`` is the asymptotic s/byte)."""
        return self.regimes[-1]


def _line_rel(m: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    # least squares on relative error: minimise sum(((a + b m) / t - 1)^2)
    a_mat = np.stack([1.0 / t, m / t], axis=1)
    (a, b), *_ = np.linalg.lstsq(a_mat, np.ones_like(t), rcond=None)
    if b < 0:  # latency-only regime: a constant
        a, b = 1.0 / np.mean(1.0 / t), 0.0
    r = (a + b * m) / t - 1.0
    return float(a), float(b), float(np.sum(r * r))


def fit_allreduce(points: Sequence[CollectivePoint], nranks: int,
                  max_regimes: int = MAX_REGIMES,
                  min_points: int = MIN_REGIME_POINTS) -> AllReduceFit:
    """Fit piecewise ``a + b M`` to the all-reduce sizes of ``nranks`` ranks.

    Several runs of the same size are averaged. Regimes are chosen by dynamic programming
    minimising the summed squared relative error, each at least ``min_points`` sizes long.

    Raises:
        ValueError: fewer than ``min_points`` sizes measured for ``nranks``.
    """
    pts = [p for p in points if p.benchmark == "allreduce" and p.nranks == nranks]
    by_size: dict[int, list[float]] = {}
    for p in pts:
        by_size.setdefault(p.size_bytes, []).append(p.time_s)
    sizes = sorted(by_size)
    if len(sizes) < min_points:
        raise ValueError(f"{len(sizes)} all-reduce sizes stored for {nranks} ranks; at least "
                         f"{min_points} are needed (run `dlperf allreduce --nproc {nranks}`)")
    m = np.array(sizes, float)
    t = np.array([np.mean(by_size[s]) for s in sizes])
    n = len(sizes)
    cost = {}
    for i in range(n):
        for j in range(i + min_points, n + 1):
            cost[i, j] = _line_rel(m[i:j], t[i:j])
    # best[k][j]: min cost of the first j points with k regimes, the last starting at
    # back[k][j] (the first such start; (inf, -1): none); inf + a cost stays inf
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(max_regimes + 1)]
    back = [[-1] * (n + 1) for _ in range(max_regimes + 1)]
    best[0][0] = 0.0
    for k in range(1, max_regimes + 1):
        for j in range(1, n + 1):
            best[k][j], back[k][j] = min([(inf, -1)] + [
                (best[k - 1][i] + cost[i, j][2], i) for i in range(0, j - min_points + 1)])
    k = min(range(1, max_regimes + 1), key=lambda kk: (best[kk][n], kk))
    bounds, j = [], n
    for kk in range(k, 0, -1):
        i = back[kk][j]
        bounds.append((i, j))
        j = i
    lo_hi = [(sizes[i], sizes[j - 1], *cost[i, j][:2]) for i, j in reversed(bounds)]
    # each regime extends up to the next one's start, so that any size falls in one
    his = [lo - 1 for lo, *_ in lo_hi[1:]] + [lo_hi[-1][1]]
    regimes = [Regime(lo, hi, a, b) for (lo, _, a, b), hi in zip(lo_hi, his)]
    return AllReduceFit(nranks, tuple(regimes), tuple(sorted({p.run_id for p in pts})))


@dataclass(frozen=True)
class Link:
    """One kind of link: latency per algorithm step ``alpha_s`` and ``beta_s_per_byte``
    (1 / bandwidth per direction), with where the numbers come from and whether this machine
    measured them."""

    name: str
    alpha_s: float
    beta_s_per_byte: float
    source: str
    measured: bool = False

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """1 / beta."""
        return 1.0 / self.beta_s_per_byte


_NCCL_LAT = ("NCCL src/graph/tuning.cc (NVIDIA/nccl, commit 01afd20a), hwLat[..][Ring][Simple]: "
             "per-step latency")
#: Given link values (used unless measured here or given by the user). Bandwidth per
#: direction per GPU; alpha = NCCL's own per-step latency of its ring/Simple model.
LINKS: dict[str, Link] = {
    "nvlink4": Link("nvlink4", 3.4e-6, 1 / 450e9,
                    "NVIDIA H100/H200 datasheets: NVLink 900 GB/s total = 450 GB/s per direction; "
                    + _NCCL_LAT + " 3.4 us (NVLink)"),
    "pcie5": Link("pcie5", 5.7e-6, 1 / 63e9,
                  "PCI-SIG PCIe 5.0: 32 GT/s x16, 128b/130b = 63 GB/s per direction; "
                  + _NCCL_LAT + " 5.7 us (PCI)"),
    "ib_ndr": Link("ib_ndr", 9.6e-6, 1 / 50e9,
                   "InfiniBand NDR 400 Gb/s per port = 50 GB/s per direction (IBTA roadmap; "
                   "NVIDIA ConnectX-7 datasheet); " + _NCCL_LAT + " 9.6 us (network)"),
    "eth100": Link("eth100", 9.6e-6, 1 / 12.5e9,
                   "100 Gb Ethernet (IEEE 802.3) = 12.5 GB/s per direction; "
                   + _NCCL_LAT + " 9.6 us (network)"),
}


#: NICs per node a named inter-node link is assumed to have unless given: a DGX H100/H200
#: has eight 400 Gb/s ConnectX-7 ports for its compute network, one per GPU (NVIDIA DGX H100/H200
#: User Guide, "Network Ports"); an Ethernet server one 100 Gb/s port.
TYPICAL_NICS_PER_NODE = {"ib_ndr": 8, "eth100": 1, "nvlink4": 8, "pcie5": 1}


def measured_link(fit: AllReduceFit, name: str = "measured") -> Link:
    """The link a ring all-reduce of ``fit.nranks`` ranks implies: ``alpha`` from the
    large-message regime's intercept over ``2 (p-1)`` steps, ``beta`` from its slope over
    ``2 (p-1)/p`` (the ring formula solved for the link)."""
    p = fit.nranks
    reg = fit.large
    return Link(name, max(reg.a_s, 0.0) / (2 * (p - 1)), reg.b_s_per_byte / (2 * (p - 1) / p),
                f"measured: all-reduce sweep of {p} ranks ({', '.join(fit.sources)}), "
                f"regime >= {reg.lo_bytes} B", measured=True)


def ring_allreduce_s(size_bytes: float, p: int, link: Link) -> float:
    """Ring all-reduce time (s) of ``size_bytes`` over ``p`` ranks on ``link``
    (:func:`dlperf.perfmodel.equations.ring_allreduce_s`)."""
    return eq.ring_allreduce_s(size_bytes, p, link.alpha_s, link.beta_s_per_byte)


def tree_allreduce_s(size_bytes: float, p: int, link: Link) -> float:
    """Pipelined binary-tree all-reduce time (s) on ``link``
    (:func:`dlperf.perfmodel.equations.tree_allreduce_s`)."""
    return eq.tree_allreduce_s(size_bytes, p, link.alpha_s, link.beta_s_per_byte)


def hierarchical_allreduce_s(size_bytes: float, gpus_per_node: int, nodes: int,
                             intra: Link, inter: Link, nics_per_node: int | None = None) -> float:
    """Intra-node reduce-scatter + inter-node ring all-reduce of ``M/g`` + intra all-gather (s)
    (:func:`dlperf.perfmodel.equations.hierarchical_allreduce_s`, over these links).

    The ``g`` inter-node rings (one per GPU, ``M/g`` bytes each) run at once and share the
    node's ``nics_per_node`` NICs (None: one per GPU): each gets ``min(k, g) / g`` of a NIC's
    bandwidth."""
    return eq.hierarchical_allreduce_s(size_bytes, gpus_per_node, nodes, intra.alpha_s,
                                       intra.beta_s_per_byte, inter.alpha_s,
                                       inter.beta_s_per_byte, nics_per_node)


ALGORITHMS = ("ring", "tree", "hierarchical")


def allreduce_s(size_bytes: float, gpus_per_node: int, nodes: int, intra: Link,
                inter: Link | None, algorithm: str = "best",
                nics_per_node: int | None = None) -> tuple[float, str]:
    """All-reduce time (s) of ``size_bytes`` over ``gpus_per_node x nodes`` ranks and the
    algorithm used: ``ring`` and ``tree`` run over the slowest link on the path (``inter`` when
    ``nodes > 1``), ``hierarchical`` over both; ``best`` takes the fastest of the three, as
    NCCL's tuner picks per size.

    Raises:
        ValueError: an unknown algorithm, or ``nodes > 1`` without ``inter``.
    """
    p = gpus_per_node * nodes
    if nodes <= 1:
        times = {"ring": ring_allreduce_s(size_bytes, p, intra),
                 "tree": tree_allreduce_s(size_bytes, p, intra)}
    elif inter is None:
        raise ValueError("more than one node needs an inter-node link (network=...)")
    else:
        times = {"ring": ring_allreduce_s(size_bytes, p, inter),
                 "tree": tree_allreduce_s(size_bytes, p, inter),
                 "hierarchical": hierarchical_allreduce_s(size_bytes, gpus_per_node, nodes,
                                                          intra, inter, nics_per_node)}
    if algorithm == "best":
        name = min(times, key=times.__getitem__)
        return times[name], name
    if algorithm not in times:
        raise ValueError(f"algorithm {algorithm!r}: give one of {', '.join(times)} or best")
    return times[algorithm], algorithm


@dataclass
class Network:
    """The topology for more devices: links inside a node and between nodes, GPUs per node,
    and the all-reduce algorithm (``best``, ``ring``, ``tree``, ``hierarchical``)."""

    intra: Link | None = None
    inter: Link | None = None
    algorithm: str = "best"
    #: NICs per node for the inter-node link (None: :data:`TYPICAL_NICS_PER_NODE` of the
    #: named link, else one)
    nics_per_node: int | None = None

    def nics(self) -> int:
        """NICs per node used: given, else the named inter link's typical count, else 1."""
        if self.nics_per_node is not None:
            return self.nics_per_node
        return TYPICAL_NICS_PER_NODE.get(self.inter.name, 1) if self.inter else 1


@functools.singledispatch
def link_of(spec: Any, what: str) -> Link:
    """A :class:`~dlperf.perfmodel.Link` (named ``what``: ``inter`` or ``intra``) from a
    Link, a name of :data:`~dlperf.perfmodel.LINKS`, or ``{"alpha_s": s,
    "bandwidth_bytes_per_s": B/s}`` (marked "given by the user"): one function per kind of
    ``spec`` (registered below).

    Raises:
        ConfigError: an unknown name; a latency that is not a finite number >= 0 (NaN,
            negative, a string) or a bandwidth that is not a finite number > 0; anything else.
    """
    raise ConfigError(f"network {what}: {spec!r} is neither a link name ({', '.join(LINKS)}) "
                      "nor {'alpha_s': .., 'bandwidth_bytes_per_s': ..}")


@link_of.register(Link)
def _given_link(spec: Link, what: str) -> Link:
    return spec


@link_of.register(str)
def _named_link(spec: str, what: str) -> Link:
    if spec not in LINKS:
        raise ConfigError(f"network {what} {spec!r}{did_you_mean(spec, LINKS) or ':'} give one "
                          f"of {', '.join(LINKS)} or "
                          "{'alpha_s': .., 'bandwidth_bytes_per_s': ..}")
    return LINKS[spec]


@link_of.register(Mapping)
def _link_by_numbers(spec: Mapping, what: str) -> Link:
    if not {"alpha_s", "bandwidth_bytes_per_s"} <= set(spec):
        return link_of.dispatch(object)(spec, what)
    a = _link_number(spec, what, "alpha_s", 0.0, "the latency per step in seconds, a finite "
                     "number >= 0 (e.g. 9.6e-6)")
    # least: the smallest float above 0
    bw = _link_number(spec, what, "bandwidth_bytes_per_s", math.ulp(0.0), "the bandwidth per "
                      "direction in bytes/s, a finite number > 0 (e.g. 50e9)")
    return Link(what, a, 1.0 / bw, "given by the user")


def _link_number(spec: Mapping, what: str, key: str, least: float, give: str) -> float:
    """``spec[key]`` as a float when it is a real number, finite and at least ``least``."""
    x = spec[key]
    if not real(x) or not math.isfinite(x) or x < least:
        raise ConfigError(f"network {what} {key} {x!r}: give {give}")
    return float(x)


def real(x: Any) -> bool:
    """A real number, not a bool or a string."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def whole(x: Any) -> bool:
    """A whole number (int or numpy integer), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@functools.singledispatch
def network_of(network: Any) -> Network | None:
    """A :class:`Network` from None, a link name (the inter-node link), a mapping with
    ``inter``/``intra`` (names or ``{alpha_s, bandwidth_bytes_per_s}``), ``algorithm`` and
    ``nics_per_node`` (inter-node NICs of one node): one function per kind of ``network``
    (registered below).

    Raises:
        ConfigError: an unknown link or algorithm; anything else.
    """
    raise ConfigError(f"network {network!r}: give a link name or a mapping")


@network_of.register(type(None))
@network_of.register(Network)
def _given_network(network: Network | None) -> Network | None:
    return network


@network_of.register(str)
@network_of.register(Link)
def _inter_link(network: str | Link) -> Network:
    return Network(inter=link_of(network, "inter"))


@network_of.register(Mapping)
def _network_by_parts(network: Mapping) -> Network:
    alg = network.get("algorithm", "best")
    if alg not in ("best", *ALGORITHMS):
        raise ConfigError(f"network algorithm {alg!r}: give best, {', '.join(ALGORITHMS)}")
    nics = network.get("nics_per_node")
    if nics is not None and (not whole(nics) or nics < 1):
        raise ConfigError(f"network nics_per_node {nics!r}: give a whole number >= 1 (the "
                          "inter-node NICs of one node, e.g. 8 on a DGX H200)")
    links = {what: link_of(network[what], what) for what in ("intra", "inter") if what in network}
    return Network(**links, algorithm=alg, nics_per_node=int(nics) if nics is not None else None)


def network_for(network: Any, nnodes: int) -> Network | None:
    """:func:`network_of`, refusing what cannot work before anything is loaded.

    Raises:
        ConfigError: several nodes without an inter-node link; an inter-node link (or its
            NICs per node) on one node, where it would be ignored; a hierarchical all-reduce
            on one node; what :func:`network_of` refuses.
    """
    net = network_of(network)
    if nnodes == 1 and net is not None and net.algorithm == "hierarchical":
        raise ConfigError("the hierarchical all-reduce needs more than one node; give algorithm "
                          "ring, tree or best, or nnodes > 1")
    if nnodes == 1 and net is not None and (net.inter is not None
                                            or net.nics_per_node is not None):
        given = (f"--nics-per-node {net.nics_per_node}" if net.inter is None else
                 f"--network {net.inter.name if net.inter.name in LINKS else 'LINK'}")
        raise ConfigError(f"{given} (network= in the API) is the link between nodes, "
                          "and one node (--nnodes 1) has none: it would be ignored (the devices "
                          "of one node all-reduce over the stored sweep's link, else nvlink4; "
                          "an intra-node link is network={'intra': ..} in the API): drop "
                          "it, or give --nnodes 2 or more")
    if nnodes > 1 and (net is None or net.inter is None):
        raise ConfigError(f"{nnodes} nodes need an inter-node link: give --network (network= in "
                          f"the API) one of {', '.join(LINKS)}, e.g. --network ib_ndr; "
                          "docs/perfmodel.md gives each link's latency, bandwidth and source")
    return net

"""A prediction's network argument: a link name or given values, checked, to a
:class:`dlperf.perfmodel.model.Network` (:func:`network_of`, :func:`network_for`), and the
number checks the Python API's arguments share (:func:`real`, :func:`whole`)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from dlperf.errors import ConfigError
from dlperf.perfmodel import comm
from dlperf.perfmodel import model as pm


def link_of(spec: Any, what: str) -> comm.Link:
    """A :class:`~dlperf.perfmodel.comm.Link` (named ``what``: ``inter`` or ``intra``) from a
    Link, a name of :data:`~dlperf.perfmodel.comm.LINKS`, or ``{"alpha_s": s,
    "bandwidth_bytes_per_s": B/s}`` (marked "given by the user").

    Raises:
        ConfigError: an unknown name; a latency that is not a finite number >= 0 (NaN,
            negative, a string) or a bandwidth that is not a finite number > 0.
    """
    if isinstance(spec, comm.Link):
        return spec
    if isinstance(spec, str):
        if spec not in comm.LINKS:
            raise ConfigError(f"network {what} {spec!r}: give one of {', '.join(comm.LINKS)} or "
                              "{'alpha_s': .., 'bandwidth_bytes_per_s': ..}")
        return comm.LINKS[spec]
    if isinstance(spec, Mapping) and {"alpha_s", "bandwidth_bytes_per_s"} <= set(spec):
        a, bw = spec["alpha_s"], spec["bandwidth_bytes_per_s"]
        if not real(a) or not math.isfinite(a) or a < 0:
            raise ConfigError(f"network {what} alpha_s {a!r}: give the latency per step in "
                              "seconds, a finite number >= 0 (e.g. 9.6e-6)")
        if not real(bw) or not math.isfinite(bw) or bw <= 0:
            raise ConfigError(f"network {what} bandwidth_bytes_per_s {bw!r}: give the bandwidth "
                              "per direction in bytes/s, a finite number > 0 (e.g. 50e9)")
        return comm.Link(what, float(a), 1.0 / float(bw), "given by the user")
    raise ConfigError(f"network {what}: {spec!r} is neither a link name ({', '.join(comm.LINKS)}) "
                      "nor {'alpha_s': .., 'bandwidth_bytes_per_s': ..}")


def real(x: Any) -> bool:
    """A real number, not a bool or a string."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def whole(x: Any) -> bool:
    """A whole number (int or numpy integer), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def network_of(network: Any) -> pm.Network | None:
    """A :class:`model.Network` from None, a link name (the inter-node link), a mapping with
    ``inter``/``intra`` (names or ``{alpha_s, bandwidth_bytes_per_s}``), ``algorithm`` and
    ``nics_per_node`` (inter-node NICs of one node).

    Raises:
        ConfigError: an unknown link or algorithm.
    """
    if network is None or isinstance(network, pm.Network):
        return network
    if isinstance(network, (str, comm.Link)):
        return pm.Network(inter=link_of(network, "inter"))
    if isinstance(network, Mapping):
        alg = network.get("algorithm", "best")
        if alg not in ("best", *comm.ALGORITHMS):
            raise ConfigError(f"network algorithm {alg!r}: give best, {', '.join(comm.ALGORITHMS)}")
        nics = network.get("nics_per_node")
        if nics is not None and (not whole(nics) or nics < 1):
            raise ConfigError(f"network nics_per_node {nics!r}: give a whole number >= 1 (the "
                              "inter-node NICs of one node, e.g. 8 on a DGX H200)")
        return pm.Network(intra=link_of(network["intra"], "intra") if "intra" in network else None,
                          inter=link_of(network["inter"], "inter") if "inter" in network else None,
                          algorithm=alg, nics_per_node=int(nics) if nics is not None else None)
    raise ConfigError(f"network {network!r}: give a link name or a mapping")


def network_for(network: Any, nnodes: int) -> pm.Network | None:
    """:func:`network_of`, refusing what cannot work before anything is loaded.

    Raises:
        ConfigError: several nodes without an inter-node link; a hierarchical all-reduce on one
            node; what :func:`network_of` refuses.
    """
    net = network_of(network)
    if nnodes > 1 and (net is None or net.inter is None):
        raise ConfigError(f"{nnodes} nodes need an inter-node link: give --network (network= in "
                          f"the API) one of {', '.join(comm.LINKS)}, e.g. --network ib_ndr; "
                          "docs/perfmodel.md gives each link's latency, bandwidth and source")
    if nnodes == 1 and net is not None and net.algorithm == "hierarchical":
        raise ConfigError("the hierarchical all-reduce needs more than one node; give algorithm "
                          "ring, tree or best, or nnodes > 1")
    return net

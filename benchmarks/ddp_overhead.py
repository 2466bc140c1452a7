"""DDP's fitted overhead ``rho``, ``kappa`` on the committed 2-GPU files, and which fit each
``ddp ...`` solution of the residual table is.

Prints one line per fit a prediction or the back-test makes: on all stored N-device/1-device
pairs (a prediction of N devices at a point not stored, ``validation.prime_solutions``),
without the pairs of each stored N-device point (``dlperf predict --nproc`` of that point
withholds its measurements, ``api._ddp_overhead``), and without each pair's configuration and
batch (the ``2-GPU from 1-GPU`` rows, ``backtest.dp_rows``): ``rho``, ``kappa``, the pairs
left out and the solution's key in ``benchmarks/results/perfmodel_residuals.json``.

    PYTHONPATH=src python benchmarks/ddp_overhead.py [FILES...]
"""

import sys

import numpy as np

from dlperf.perfmodel import api, lsq
from dlperf.perfmodel import dataparallel as dp
from dlperf.perfmodel.calibrate import Calibration, Config


def key_of(pairs: list[dp.Pair]) -> str:
    """The ``ddp`` solution key of a fit on ``pairs`` (as :func:`dp.fit_ddp_overhead`)."""
    return "ddp " + lsq.digest(np.array([[pr.host_s, pr.device_s, pr.exposed_s,
                                          pr.one_device_s, pr.dp.step_time_s] for pr in pairs]))


def main(db: list[str]) -> None:
    recs = api.records_of(db)
    shared = api.shared_fits(recs)
    comm_for = dp.comm_for_records(recs)

    def short(p) -> str:
        return f"{p.source.rsplit('/', 1)[-1]}:{p.result_id}"

    fits: dict[str, tuple[dp.DDPOverhead, list[str], list[str]]] = {}

    def fit(pairs: list[dp.Pair], what: str) -> None:
        k = key_of(pairs)
        if k not in fits:
            left = [short(pr.dp) for pr in every if pr not in pairs]
            fits[k] = (dp.fit_ddp_overhead(pairs), left, [])
        fits[k][2].append(what)

    every = dp.pairs_of(Calibration(recs, share_efficiencies=shared), comm_for)
    print("all pairs: " + ", ".join(short(pr.dp) for pr in every))
    fit(every, "a prediction of N devices at a point not stored")
    seen = set()
    for p in recs.points:  # as validation.predict_nproc_rows predicts them
        if p.world_size < 2 or p.nnodes != 1 or p.variant or p.instrumented \
                or p.data != "synthetic":
            continue
        withheld = [q for q in recs.points if Config.of(q) == Config.of(p) and not q.variant
                    and (q.world_size, q.nnodes, q.per_device_batch)
                    == (p.world_size, p.nnodes, p.per_device_batch)]
        ids = tuple(sorted(short(q) for q in withheld))
        if ids in seen:
            continue
        seen.add(ids)
        cal = Calibration(recs, lambda q, w=withheld: q in w, share_efficiencies=shared)
        fit(dp.pairs_of(cal, comm_for), f"predict --nproc {p.world_size} of "
            f"{p.model} {p.precision} b={p.batch_size}")
    for pr in every:  # as backtest.dp_rows fits them
        key = (pr.cfg, pr.dp.per_device_batch)
        train = [q for q in every if (q.cfg, q.dp.per_device_batch) != key]
        if train:
            fit(train, f"2-GPU from 1-GPU row {short(pr.dp)}")
    print("| solution key | pairs left out | rho | kappa | used by |\n|---|---|---:|---:|---|")
    for k, (o, left, uses) in fits.items():
        print(f"| `{k}` | {', '.join(left) or 'none'} | {o.rho:.4f} | {o.kappa:.4f} | "
              f"{'; '.join(uses)} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["benchmarks/results/h200", "benchmarks/results/h200x2"])

"""Back-test dlperf's performance model on stored results and print the validation table.

Usage (repository root)::

    PYTHONPATH=src python benchmarks/perfmodel_validate.py benchmarks/results/h200 \\
        benchmarks/results/h200x2 [--category "held-out batch" ...] [--rows rows.json] \
        [--store] [--split split.json] [--no-host-probe] [--no-kernel-term]
    PYTHONPATH=src python benchmarks/perfmodel_validate.py --committed

``--committed`` regenerates what is committed for the committed H200 results after any change
to the model: the residual tables (and stored fits) of ``h200`` + ``h200x2`` and of ``h200``
alone, and the rows of the first (:data:`ROWS_FILE`); it prints the first's tables.

Prints the markdown table of :meth:`dlperf.validation.Validation.table`, the same by
side of the frozen development/test split (:meth:`~dlperf.validation.Validation.
split_table`, the one in docs/perfmodel.md), each interval cell's coverage judged against 90%
(:meth:`~dlperf.validation.Validation.consistency_table`), the prediction intervals'
leave-one-out coverage
(:meth:`~dlperf.validation.Validation.coverage_table`, docs/perfmodel.md "Prediction
interval") and, with ``--rows``, writes every held-out prediction as JSON.
``--no-host-probe`` is the ablation of the untraced host dispatch record (schema 9): the fits
ignore ``host.dispatch_s`` (:func:`dlperf.perfmodel.onedevice.host_measurements` returns
nothing), so its effect on the same held-out points can be read off. ``--no-kernel-term`` is
the ablation of the device roofline's kernel term ``K t_k``: no configuration has a kernel count
(:meth:`dlperf.perfmodel.facts.Facts.kernel_count` returns None), so every prediction
is made as for a model never traced; its leave-one-model-out row is the model predicted from
its FLOP and byte counts without a trace of it.

Files holding traced DDP runs with a bucket record and an all-reduce sweep of their rank count
also get the WFBP recursion's own categories (:mod:`dlperf.validation.bucketcheck`), e.g.
``benchmarks/perfmodel_validate.py benchmarks/results/cpu-dev/ddp_buckets.db``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict

from dlperf.validation import split, validate

#: The repository's root: ``--committed`` runs there, so rows name files as the repository does.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The committed H200 results: each set is validated and its residual table stored.
COMMITTED = (["benchmarks/results/h200", "benchmarks/results/h200x2"],
             ["benchmarks/results/h200"])
ROWS_FILE = "benchmarks/results/h200/perfmodel_validate_rows.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="results files or folders of *.db")
    ap.add_argument("--committed", action="store_true",
                    help="validate the committed H200 sets, store their tables, write the rows")
    ap.add_argument("--category", action="append", help="only these categories (repeatable)")
    ap.add_argument("--rows", help="write every held-out prediction to this JSON file")
    ap.add_argument("--no-host-probe", action="store_true",
                    help="ablation: fit without the points' untraced host dispatch times")
    ap.add_argument("--store", action="store_true",
                    help="also write the residual table beside the files (as dlperf predict "
                         "--validate does)")
    ap.add_argument("--split", default=None,
                    help="the development/test split (default: benchmarks/results/split.json)")
    ap.add_argument("--no-kernel-term", action="store_true",
                    help="ablation: no kernel counts, so no roofline kernel term anywhere")
    args = ap.parse_args()
    if args.committed:
        if args.paths or args.category or args.no_kernel_term or args.no_host_probe:
            ap.error("--committed validates the committed results with every category")
        os.chdir(ROOT)
        # the table stores every group fit the process holds, which includes those read from
        # the user's cache (a fit one of their predictions made): with the user's cache the
        # committed table would depend on what they predicted before (a vgg16 tf32 fit, from
        # one what-if, was committed that way); an empty cache makes it the data's and the
        # model's alone
        _fresh_cache("dlperf-committed-")
        for i, paths in enumerate(COMMITTED):
            _run(paths, None, args.split, store=True, rows=ROWS_FILE if i == 0 else None,
                 quiet=i > 0)
        return
    if not args.paths:
        ap.error("give results files or folders, or --committed")
    if args.store and (args.no_kernel_term or args.no_host_probe or args.category):
        ap.error("--store writes the table predictions use: not with an ablation or a subset "
                 "of the categories")
    if args.no_kernel_term or args.no_host_probe:
        # an ablation patches the model at run time, which the caches' key cannot see: fits and
        # residuals cached by a normal run would be read back as the ablation's (fitcache.py)
        _fresh_cache("dlperf-ablation-")
    if args.no_kernel_term:
        from dlperf.perfmodel.facts import Facts

        Facts.kernel_count = lambda self, *a: None  # type: ignore[method-assign]
    if args.no_host_probe:
        from dlperf.perfmodel import onedevice

        onedevice.host_measurements = lambda points: []
    _run(args.paths, args.category, args.split, args.store, args.rows)


def _fresh_cache(prefix: str) -> str:
    """Point ``$DLPERF_CACHE_DIR`` at a new folder (named ``prefix...`` in the system's
    temporary folder, holding only the owner file of :func:`dlperf.tempdirs.make_owned`, so
    that a ``dlperf run`` of another process reclaims it once this one is gone, never while it
    runs) for the rest of the process, removed when the process exits; returns it."""
    import atexit
    import shutil

    from dlperf.tempdirs import make_owned

    folder = str(make_owned(prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ["DLPERF_CACHE_DIR"] = folder
    return folder


def _run(paths: list[str], categories: list[str] | None, split_file: str | None, store: bool,
         rows: str | None, quiet: bool = False) -> None:
    """Validate ``paths``, print the tables (unless ``quiet``), store the residual table and
    write the rows when asked."""
    t0 = time.perf_counter()
    v = validate(paths, categories)
    if not quiet:
        print(v.table(), end="")
        print("\nThe same, development / test side of the frozen split "
              f"({os.path.relpath(split_file or split.DEFAULT_PATH)}):\n")
        frozen = split.load(split_file)
        covs = v.side_coverage(frozen)
        print(v.split_table(frozen, coverage=covs), end="")
        print("\nEach cell's coverage against 90% on its own sampling spread, development / "
              "test (docs/perfmodel.md, \"Is a cell's coverage consistent with 90%?\"):\n")
        print(v.consistency_table(frozen, coverage=covs), end="")
        print("\n90% prediction intervals, leave-one-out coverage (overall / host / device) "
              "and median width (high / low):\n")
        print(v.coverage_table(), end="")
    print(f"\n{len(v.rows)} held-out predictions in {time.perf_counter() - t0:.0f} s")
    if store:
        from dlperf.validation import store_table

        print(f"residual table: {store_table(paths, v)}")
    if rows:
        with open(rows, "w") as f:
            json.dump([{**asdict(r), "ape_pct": r.ape, "baseline_ape_pct": r.baseline_ape,
                        "point": _relative(r.point)} for r in v.rows], f, indent=1)


def _relative(point: str | None) -> str | None:
    """``path:id`` with the path relative to the working directory (the file is committed)."""
    if not point:
        return point
    path, _, rid = point.rpartition(":")
    return f"{os.path.relpath(path)}:{rid}"


if __name__ == "__main__":
    main()

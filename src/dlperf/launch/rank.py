"""One process of a data-parallel run: ``python -m dlperf.launch.rank CONFIG.json OUT_DIR``.

Started by torchrun or :mod:`dlperf.launch.spawn` (as the framework's registry entry says),
which set ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``. It runs the ordinary worker function
(:func:`dlperf.worker.run_record`: the adapter joins the process group, the ranks' samples are
gathered and merged there) and writes the record, its rank in ``worker.rank``, to
``OUT_DIR/rank<RANK>.json``. A failed run
exits with status 1 right away, so the launcher tears down the other ranks instead of leaving
them blocked in a collective; the process also exits when its parent (the launcher) dies, so no
orphan keeps a device busy. After a good run the framework's ``rank_exit`` hook (registry) runs
before the process exits.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from dlperf.config import RunConfig
from dlperf.registry import launch_info, load_hook
from dlperf.results.parts import WorkerInfo
from dlperf.worker import _watch_parent, run_record, write_json_atomic


def main(argv: list[str] | None = None) -> int:
    """Run this rank; see the module docstring. Never returns normally after the run (the
    process ends with ``os._exit`` so no collective's teardown can block it)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m dlperf.launch.rank CONFIG.json OUT_DIR", file=sys.stderr)
        return 2
    launcher = os.environ.get("DLPERF_LAUNCHER_PID")  # torchrun outlives a killed dlperf
    threading.Thread(target=_watch_parent, daemon=True,
                     args=(os.getppid(), int(launcher) if launcher else None)).start()
    out = Path(argv[1])
    rank = int(os.environ.get("RANK", "0"))
    (out / f"rank{rank}.pid").write_text(str(os.getpid()))
    cfg = RunConfig.model_validate_json(Path(argv[0]).read_text())
    rec = run_record(cfg)
    rec.worker = rec.worker or WorkerInfo()
    rec.worker.rank = rank
    write_json_atomic(out / f"rank{rank}.json", rec.to_dict())
    ok = rec.identity.status == "ok"
    if ok:
        _rank_exit(cfg.runtime.framework)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ok else 1)


def _rank_exit(framework: str) -> None:
    """After a good run: the framework's ``rank_exit`` hook from its registry entry (JAX waits
    at ``jax.distributed``'s shutdown barrier). The result is written before; a failure of the
    hook is printed, never fatal."""
    try:
        hook = load_hook(launch_info(framework).rank_exit)
        if hook is not None:
            hook()
    except Exception as e:  # noqa: BLE001 - reported, never fatal: the result is written
        print(f"dlperf rank: the {framework} exit hook failed: {e}", file=sys.stderr)


if __name__ == "__main__":
    import dlperf as _dlperf

    _dlperf.OWNS_PROCESS = True
    sys.exit(main())

"""``dlperf allreduce``: all-reduce bandwidth over message sizes (nccl-tests' algbw/busbw),
run under torchrun; its rows optionally stored in a results file."""

from __future__ import annotations

import json
import sys
from datetime import UTC
from pathlib import Path
from typing import Annotated

import typer

from dlperf.cli import common
from dlperf.cli.common import NVLS_HELP, check_db, check_output, guard
from dlperf.errors import ConfigError
from dlperf.outputs import shown_path


def store_collectives(path: Path, db: str) -> None:
    """Store the all-reduce JSON at ``path`` in ``db``.

    Raises:
        ConfigError: ``path`` is not a readable all-reduce report.
    """
    from datetime import datetime

    from dlperf.results.store import ResultStore

    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{str(path)!r} is not a readable all-reduce JSON file ({e})") from None
    if not isinstance(report, dict):
        raise ConfigError(f"{str(path)!r} is not an all-reduce report (a JSON object)")
    created = datetime.fromtimestamp(Path(path).stat().st_mtime, UTC).isoformat(
        timespec="seconds")
    with ResultStore(db) as store:
        before = {r["run_id"] for r in store.collectives()}
        try:
            run_id = store.add_collectives(report, created)
        except ConfigError as e:
            raise ConfigError(f"{str(path)!r}: {e}") from None
    if run_id in before:
        common.err.print(f"run {run_id} is in {shown_path(db)} already: nothing stored twice",
                         highlight=False)
    else:
        common.err.print(f"stored {len(report['rows'])} all-reduce sizes (run {run_id}) in {shown_path(db)}",
                         highlight=False)


def _check_sizes(min_bytes: str, max_bytes: str) -> None:
    """Both sizes parse and make a range, the largest at most
    :data:`~dlperf.config.limits.MAX_MESSAGE_BYTES`; checked here, not once per rank after
    the launch."""
    from dlperf.comm.allreduce import message_sizes, parse_size
    from dlperf.config.limits import MAX_MESSAGE_BYTES, over

    for flag, v in (("--min-bytes", min_bytes), ("--max-bytes", max_bytes)):
        try:
            n = parse_size(v)
        except ValueError as e:
            raise ConfigError(f"{flag}: {e}") from None
        msg = over(n, MAX_MESSAGE_BYTES, "bytes per message")
        if msg:
            raise ConfigError(f"{flag} {v}: {msg}")
    try:
        message_sizes(parse_size(min_bytes), parse_size(max_bytes))
    except ValueError as e:
        raise ConfigError(f"--min-bytes {min_bytes} --max-bytes {max_bytes}: {e}; give "
                          "1 <= --min-bytes <= --max-bytes") from None


#: Memory one rank holds for a message of S bytes: the buffer, the correctness mask (one byte
#: per float32 element: S / 4) and room for the backend's own copies (gloo's CPU all-reduce
#: works on chunks of the buffer): 2 S, a bound, not a measurement.
RANK_BYTES_PER_MESSAGE_BYTE = 2.0


def check_allreduce(nproc: int, iters: int, warmup: int, min_bytes: str, max_bytes: str,
                    timeout: float, *, gpus: int | None = -1, cpus: int | None = None,
                    host_bytes: int | None = None, gpu_bytes: int | None = None) -> str:
    """Check every sized flag of ``dlperf allreduce`` before any process starts; returns the
    device the ranks will use (``cuda`` where GPUs are visible, else ``cpu``).

    The processes: at most one per visible GPU, or :data:`~dlperf.config.limits.
    PROCESSES_PER_CPU` per usable CPU (:func:`~dlperf.config.limits.check_local_processes`).
    ``--iters`` and ``--warmup``: at most :data:`~dlperf.config.limits.MAX_ITERS`. The largest
    message: at most :data:`~dlperf.config.limits.MAX_MESSAGE_BYTES`, and
    :data:`RANK_BYTES_PER_MESSAGE_BYTE` times it must fit one GPU's memory (``gpu_bytes``,
    the smallest visible GPU's), or ``nproc`` times that the host's available memory
    (``host_bytes``) for CPU ranks. ``--timeout``: a finite number of seconds (NaN never
    ended the wait). ``gpus``/``cpus``/``host_bytes``/``gpu_bytes`` default to this machine's.

    Raises:
        ConfigError: naming the flag, the value and the limit.
    """
    from dlperf.comm.allreduce import parse_size
    from dlperf.config.limits import (
        MAX_ITERS,
        check_count,
        check_local_processes,
        check_seconds,
    )

    if gpus == -1:
        from dlperf.nvml import visible_gpu_count

        gpus = visible_gpu_count()
    device = "cuda" if gpus else "cpu"
    check_count(nproc, "--nproc", float("inf"), "processes", low=1)
    check_local_processes(nproc, device, cpus=cpus, gpus=gpus)
    check_count(iters, "--iters", MAX_ITERS, "all-reduces per size", low=1)
    check_count(warmup, "--warmup", MAX_ITERS, "all-reduces per size", low=0)
    check_seconds(timeout, "--timeout", low=0.0)
    _check_sizes(min_bytes, max_bytes)
    need = RANK_BYTES_PER_MESSAGE_BYTE * parse_size(max_bytes)
    if device == "cuda":
        if gpu_bytes is None:
            from dlperf.nvml import gpus as gpu_list

            sizes = [g["memory_total_bytes"] for g in gpu_list() if g.get("memory_total_bytes")]
            gpu_bytes = min(sizes) if sizes else None
        if gpu_bytes and need > gpu_bytes:
            raise ConfigError(f"--max-bytes {max_bytes}: a rank holds about "
                              f"{need / 2**30:,.1f} GiB for it (the message, its check and the "
                              f"backend's copies), over the {gpu_bytes / 2**30:,.1f} GiB of a "
                              "GPU here; give a smaller --max-bytes")
        return device
    if host_bytes is None:
        import psutil

        host_bytes = int(psutil.virtual_memory().available)
    if need * nproc > host_bytes:
        raise ConfigError(f"--max-bytes {max_bytes} with --nproc {nproc}: the CPU ranks hold "
                          f"about {need * nproc / 2**30:,.1f} GiB (each the message, its check "
                          "and gloo's copies), over the "
                          f"{host_bytes / 2**30:,.1f} GiB of memory available now; give a "
                          "smaller --max-bytes or fewer --nproc")
    return device


def allreduce(
    nproc: Annotated[int, typer.Option(help="Processes (one per GPU; gloo processes on a CPU-only machine).", min=1)] = 2,
    min_bytes: Annotated[str, typer.Option(help="Smallest message, e.g. 8, 64K.")] = "8",
    max_bytes: Annotated[str, typer.Option(help="Largest message, e.g. 1M, 1G.")] = "1G",
    iters: Annotated[int, typer.Option(help="Timed all-reduces per size.", min=1)] = 20,
    warmup: Annotated[int, typer.Option(help="Untimed all-reduces per size.", min=0)] = 5,
    output: Annotated[Path | None, typer.Option("--json", help="Write rows and environment here.")] = None,
    db: Annotated[str | None, typer.Option(help="Also store the rows in this results file (see: dlperf results --compare allreduce).")] = None,
    from_json: Annotated[Path | None, typer.Option(help="Store the rows of an earlier --json file in --db instead of running.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --json file that is not an earlier all-reduce JSON (never a database).")] = False,
    nccl_nvls: Annotated[str, typer.Option(help=NVLS_HELP)] = "default",
    timeout: Annotated[float, typer.Option(help="Stop the benchmark (every rank) after this many seconds: a rank that never joins would wait forever.", min=1.0, max=2592000.0)] = 3600.0,
) -> None:
    """All-reduce bandwidth (algbw/busbw) over message sizes, in the manner of nccl-tests."""
    def body() -> None:
        import os
        import socket
        import subprocess
        import tempfile

        if db is not None:
            check_db(db, must_exist=False, write=True)
        check_output(output, "--json", db, from_json, kind="json", force=force)
        if output is not None and output.exists() and output.stat().st_size and not force:
            # the rank writes it; an earlier all-reduce JSON starts with its "benchmark" key
            from dlperf.outputs import check_target

            check_target(output, "json", '{"benchmark": "allreduce"', flag="--json")
        if from_json is not None:
            if db is None:
                raise ConfigError("--from-json stores an earlier run: give --db too")
            store_collectives(from_json, db)
            return
        check_allreduce(nproc, iters, warmup, min_bytes, max_bytes, timeout)
        with socket.socket() as s:  # a free loopback port for the rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(port), "-m",
               "dlperf.comm.allreduce", "--min-bytes", min_bytes, "--max-bytes", max_bytes,
               "--iters", str(iters), "--warmup", str(warmup)]
        tmp = None
        json_out = output
        if json_out is None and db is not None:  # the rows travel through a temporary file
            tmp = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
            tmp.close()
            json_out = Path(tmp.name)
        if json_out:
            cmd += ["--json", str(json_out)]
        from dlperf.launch.distributed import set_nccl_nvls

        set_nccl_nvls(nccl_nvls)
        try:
            from dlperf.procgroup import end_tree, wait_group

            # SIGTERM is Ctrl-C from before the launch: the ranks live in the launcher's
            # session, so a plain exit of this process would leave them running
            with common.terminated_as_interrupt():
                try:
                    proc = subprocess.Popen(cmd, env=dict(os.environ), start_new_session=True)
                except KeyboardInterrupt:
                    raise typer.Exit(130) from None
                try:
                    rc = wait_group(proc, timeout)
                except subprocess.TimeoutExpired:
                    end_tree(proc)
                    raise ConfigError(
                        f"the all-reduce benchmark ran past --timeout {timeout:g} s (waiting "
                        f"for its {nproc} ranks to finish every size up to {max_bytes}) and "
                        "was stopped with its ranks; give a larger --timeout, or fewer sizes "
                        "(--max-bytes)") from None
                except KeyboardInterrupt as e:
                    end_tree(proc)
                    how = ("terminated (SIGTERM)" if isinstance(e, common.Terminated)
                           else "interrupted")
                    common.err.print(f"{how}: the all-reduce benchmark and its {nproc} ranks "
                                     "were stopped; nothing was stored", markup=False,
                                     highlight=False)
                    raise typer.Exit(143 if isinstance(e, common.Terminated) else 130) from None
                except BaseException:
                    end_tree(proc)
                    raise
            if rc == 0 and db is not None and json_out is not None:  # set with db above
                store_collectives(json_out, db)
        finally:
            if tmp is not None:
                Path(tmp.name).unlink(missing_ok=True)
        raise typer.Exit(rc)

    guard(body)

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
        common.err.print(f"run {run_id} is in {db} already: nothing stored twice",
                         highlight=False)
    else:
        common.err.print(f"stored {len(report['rows'])} all-reduce sizes (run {run_id}) in {db}",
                         highlight=False)


def _check_sizes(min_bytes: str, max_bytes: str) -> None:
    """Both sizes parse and make a range; checked here, not once per rank after the launch."""
    from dlperf.comm.allreduce import message_sizes, parse_size

    for flag, v in (("--min-bytes", min_bytes), ("--max-bytes", max_bytes)):
        try:
            parse_size(v)
        except ValueError as e:
            raise ConfigError(f"{flag}: {e}") from None
    try:
        message_sizes(parse_size(min_bytes), parse_size(max_bytes))
    except ValueError as e:
        raise ConfigError(f"--min-bytes {min_bytes} --max-bytes {max_bytes}: {e}; give "
                          "1 <= --min-bytes <= --max-bytes") from None


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
            check_db(db, must_exist=False)
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
        _check_sizes(min_bytes, max_bytes)
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
            from dlperf.procgroup import end_group, wait_group

            proc = subprocess.Popen(cmd, env=dict(os.environ), start_new_session=True)
            try:
                rc = wait_group(proc, timeout)
            except subprocess.TimeoutExpired:
                end_group(proc)
                raise ConfigError(f"the all-reduce benchmark ran past --timeout {timeout:g} s "
                                  f"(waiting for its {nproc} ranks to finish every size up to "
                                  f"{max_bytes}) and was stopped with its ranks; give a larger "
                                  "--timeout, or fewer sizes (--max-bytes)") from None
            except BaseException:  # Ctrl-C: the ranks are in the launcher's session
                end_group(proc)
                raise
            if rc == 0 and db is not None:
                store_collectives(json_out, db)
        finally:
            if tmp is not None:
                Path(tmp.name).unlink(missing_ok=True)
        raise typer.Exit(rc)

    guard(body)

"""A terminal without UTF-8 (``PYTHONIOENCODING=ascii``, a C locale) gets ASCII, not a
``UnicodeEncodeError`` traceback (dlperf.cli.streams)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from dlperf.cli import streams
from dlperf.results.schema import new_record
from dlperf.results.store import ResultStore


def test_the_handler_writes_ascii_for_what_the_encoding_lacks():
    raw = io.BytesIO()
    s = io.TextIOWrapper(raw, encoding="ascii")
    streams.make_safe(s)
    s.write("ok \u26a0 2 \u2013 5 \u00b1 1 \u00b5s \u4e2d\n")
    s.flush()
    assert raw.getvalue() == b"ok ! 2 - 5 +- 1 us ?\n"
    utf = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    streams.make_safe(utf)
    assert utf.errors == "strict"  # a UTF-8 stream is left alone


def test_reading_commands_on_an_ascii_terminal(tmp_path):
    """results (whose table marks warnings with a warning sign), compare, list and --help
    under PYTHONIOENCODING=ascii: exit 0, no traceback."""
    from dlperf.config import make_run_config

    db = tmp_path / "r.db"
    with ResultStore(str(db)) as store:
        for rep in (0, 1):
            cfg = make_run_config(model="fcn5_tiny", batch_size=8, device="cpu", threads=1,
                                  repeat=rep)
            r = new_record(cfg, "ok").to_dict()
            times = [0.002 * (1 + 0.01 * i) for i in range(12)]
            from dlperf.stats import summarize, throughput

            r.update(summary=summarize(times).to_dict(), samples={"measure": times},
                     throughput=throughput(12, 8, sum(times)), n_measured=12,
                     warnings=["wide CI \u2013 noisy \u00b1 5%"])
            store.add(r)
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for args in (["results", "--db", str(db)], ["compare", str(db), str(db)], ["list"],
                 ["--help"], ["results", "--db", str(db), "--compare", "repeats"]):
        r = subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True,
                           env=env, check=False)
        out = r.stdout + r.stderr
        assert r.returncode == 0, (args, out[-2000:])
        assert b"Traceback" not in out and b"UnicodeEncodeError" not in out, args

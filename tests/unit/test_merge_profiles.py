"""`dlperf merge` keeps the device profiles of `dlperf calibrate` (``meta`` keys
``device_profile:NAME``): the merged file lacked them, so ``predict --gpu NAME`` on it found
no profile although every source had one."""

from __future__ import annotations

import json
import sqlite3

from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.perfmodel import hardware
from dlperf.results.merge import PROFILE_PREFIX, merge_stores
from dlperf.results.store import ResultStore


def _profile(name: str, sms: int) -> hardware.GpuProfile:
    return hardware.GpuProfile(name=name, sms=sms, clock_mhz=1980,
                               bandwidth_bytes_per_s=3e12, gemm_flops_per_s={"bf16": 7e14})


def test_the_prefix_is_the_one_calibrate_writes():
    assert PROFILE_PREFIX == hardware.META_PREFIX


def test_merge_copies_device_profiles_later_files_win(tmp_path):
    a, b, dest = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "m.db"
    for f in (a, b, dest):
        ResultStore(f).close()
    hardware.store_profile(str(a), _profile("h100", 132))
    hardware.store_profile(str(b), _profile("h100", 100))
    hardware.store_profile(str(b), _profile("l40s", 142))
    hardware.store_profile(str(dest), _profile("mine", 1))
    with sqlite3.connect(b) as con:  # a damaged profile is not copied
        con.execute("INSERT INTO meta VALUES (?, ?)", (PROFILE_PREFIX + "bad", "{not json"))
    summary = merge_stores(dest, [a, b])
    got = hardware.stored_profiles([str(dest)])
    assert sorted(got) == ["h100", "l40s", "mine"] and got["h100"].sms == 100
    assert summary["profiles"] == 3
    assert summary["added"][str(a)]["profiles"] == 1
    assert summary["added"][str(b)]["profiles"] == 2
    with sqlite3.connect(dest) as con:
        keys = [k for (k,) in con.execute("SELECT key FROM meta")]
    assert PROFILE_PREFIX + "bad" not in keys and "schema_version" in keys
    again = merge_stores(dest, [a])  # nothing new the second time
    assert again["added"][str(a)]["profiles"] == 1  # a's h100 replaces b's: a is later now
    assert again["profiles"] == 3 and hardware.stored_profiles([str(dest)])["h100"].sms == 132
    assert merge_stores(dest, [a])["added"][str(a)]["profiles"] == 0


def test_the_merge_command_says_how_many_profiles_it_added(tmp_path):
    a, dest = tmp_path / "a.db", tmp_path / "m.db"
    ResultStore(a).close()
    hardware.store_profile(str(a), _profile("h100", 132))
    r = CliRunner().invoke(app, ["merge", str(a), "--db", str(dest)])
    assert r.exit_code == 0 and "1 device profile(s)" in r.output
    assert json.loads(json.dumps(hardware.stored_profiles([str(dest)])["h100"].to_dict()))[
        "sms"] == 132

"""SIGINT/SIGTERM deferred for the whole process around a store (dlperf.interrupts): a signal
that lands while a block of :func:`held` runs, in the main thread or another, with other threads
alive, waits until the block ends, then acts as it would have."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import os, signal, sys, threading, time
from dlperf.interrupts import deferring, held
alive = threading.Event()
threading.Thread(target=alive.wait, daemon=True).start()  # a thread that may take the signal
def storing(sig):
    os.kill(os.getpid(), sig)
    for _ in range(50):  # bytecode after the signal: where Python would raise it
        time.sleep(0.002)
    print("stored whole", flush=True)
"""


def run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_during_a_held_block_in_the_main_thread_waits_for_it(sig):
    p = run(f"""
        class Stop(BaseException): pass
        def on_term(s, f): raise Stop()
        signal.signal(signal.SIGTERM, on_term)
        try:
            with deferring():
                with held():
                    storing(signal.{sig})
                print("not reached", flush=True)
        except (KeyboardInterrupt, Stop) as e:
            print("then", type(e).__name__, flush=True)
    """)
    want = "KeyboardInterrupt" if sig == "SIGINT" else "Stop"
    assert p.stdout.split("\n")[:2] == ["stored whole", f"then {want}"], p.stdout + p.stderr
    # the user is told at once that the signal was seen and when it acts (a store may wait
    # for another process's lock)
    assert p.stderr.count(f"{sig} noted") == 1 and "once the result being stored" in p.stderr


def test_a_signal_during_a_held_block_in_another_thread_waits_for_it():
    p = run("""
        done = []
        def store():
            with held():
                storing(signal.SIGINT)
                done.append(1)
        try:
            with deferring():
                t = threading.Thread(target=store)
                t.start()
                while t.is_alive():
                    time.sleep(0.001)
                time.sleep(0.5)
            print("no interrupt", flush=True)
        except KeyboardInterrupt:
            print("then KeyboardInterrupt", done, flush=True)
    """)
    assert p.stdout.split("\n")[:2] == ["stored whole", "then KeyboardInterrupt [1]"], \
        p.stdout + p.stderr


def test_held_alone_installs_the_deferral_and_outside_it_signals_act_at_once():
    p = run("""
        try:
            with held():
                storing(signal.SIGINT)
        except KeyboardInterrupt:
            print("then KeyboardInterrupt", flush=True)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        try:
            with deferring():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
                print("not reached", flush=True)
        except KeyboardInterrupt:
            print("at once", flush=True)
    """)
    assert p.stdout.split("\n")[:3] == ["stored whole", "then KeyboardInterrupt", "at once"], \
        p.stdout + p.stderr

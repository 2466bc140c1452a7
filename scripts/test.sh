#!/usr/bin/env bash
# The README's test command (and CI's: .ci/run calls exactly this): on a fresh machine it makes
# the venvs, installs dlperf with the CPU builds of PyTorch, JAX and TensorFlow, Hugging Face
# transformers and pandas at the exact versions of constraints/ci.txt (pyproject.toml has
# ranges; scripts/make_constraints.py writes that file from a venv), MXNet 1.9.1 in a venv of
# its own (numpy < 1.24), and Chromium for the HTML report's browser test where it can (root
# with apt-get), then runs the test suite.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/unit -x`). The tests run in
# two processes (pytest-xdist; DLPERF_TEST_WORKERS=N for another count, 0 for one process).
# A whole run (no arguments) also tests the declared minimum of every core dependency
# (scripts/test_floors.sh, in the background from the start: its venv installs and its tests
# run while the main venvs install and the suite runs; its log, ci-artifacts/floors.log, is
# printed after the suite); DLPERF_FLOORS=0 leaves it out.
# The installs are mostly downloads: MXNet's venv and Chromium are made in the background
# beside the main venv (logs in ci-artifacts/), and waited for before the tests. pip installs
# without byte-compiling (--no-compile): it would compile each of the ~20,000 .py files it
# installs, on one core (the main venv from a local package index on the 2-core VM: 108 s,
# 57 s without); Python compiles the ~6,000 that the tests import when they are first imported.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p ci-artifacts
# Python keeps the bytecode it compiles (__pycache__, git-ignored): of src/ and tests/ for each
# of the hundreds of processes the suite starts (CLI calls, workers, ranks), and of the
# packages pip installs without compiling them. An environment that turns that cache off
# (PYTHONDONTWRITEBYTECODE) would have each process compile what it imports again: the CLI
# test files took 126 CPU-s with it off, 109 with it on.
unset PYTHONDONTWRITEBYTECODE
floors=0
if [ $# -eq 0 ] && [ "${DLPERF_FLOORS:-1}" != 0 ]; then
  floors=1
  # niced: it takes the CPU the installs (downloads) and the suite leave
  nice -n 10 bash scripts/test_floors.sh > ci-artifacts/floors.log 2>&1 &
  floors_pid=$!
fi
( python3 -m venv .venv-mxnet && .venv-mxnet/bin/pip install -q --no-compile -r requirements-mxnet.txt ) \
  > ci-artifacts/mxnet-install.log 2>&1 &
mxnet_pid=$!
chromium_pid=
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test.sh: installing chromium (apt-get) for the HTML report's browser test" >&2
  ( apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium ) \
    > ci-artifacts/chromium-install.log 2>&1 &
  chromium_pid=$!
fi
python3 -m venv .venv
.venv/bin/pip install -q --no-compile -c constraints/ci.txt -e '.[torch,jax,tensorflow-cpu,hf,notebook,test]'
# a background install that failed stops the run here, as a failed install in the foreground
for job in "mxnet:$mxnet_pid" ${chromium_pid:+"chromium:$chromium_pid"}; do
  if ! wait "${job#*:}"; then
    echo "test.sh: installing ${job%%:*} failed; see ci-artifacts/${job%%:*}-install.log" >&2
    tail -20 "ci-artifacts/${job%%:*}-install.log" >&2
    exit 1
  fi
done
export DLPERF_MXNET_PYTHON="$PWD/.venv-mxnet/bin/python" DLPERF_REQUIRE_MXNET=1
if command -v chromium >/dev/null 2>&1; then
  # the browser is here: its test must run (fail, not skip); the screenshot is kept
  export DLPERF_REQUIRE_BROWSER=1 DLPERF_SCREENSHOT_DIR="$PWD/ci-artifacts/html"
fi
rc=0
.venv/bin/pytest -n "${DLPERF_TEST_WORKERS:-2}" --dist loadfile "$@" || rc=$?
if [ "$floors" = 1 ]; then
  echo "test.sh: the declared minimum of every core dependency (scripts/test_floors.sh," \
    "ci-artifacts/floors.log)" >&2
  floors_rc=0
  wait "$floors_pid" || floors_rc=$?
  cat ci-artifacts/floors.log >&2
  if [ "$floors_rc" != 0 ]; then
    echo "test.sh: the dependency floors failed (exit $floors_rc)" >&2
    rc=$((rc ? rc : 1))
  fi
fi
exit "$rc"

#!/usr/bin/env bash
# Installs dlperf with every core dependency at the minimum pyproject.toml declares
# (scripts/floors.py turns each ">=" into "==") into a throwaway venv, checks that pip kept
# those versions, and runs what needs no framework on them: the CLI, a fake-framework run,
# `dlperf report`, `dlperf compare --run` (the gate's CLI end to end) and the unit tests of the
# statistics, the store, the records, the reports, the terminal output and the gate. A floor that no longer
# works fails here, not on a user's machine. The tests marked `simulation` (error rates over
# thousands of simulated series, of calls the other tests of these files make one at a time)
# run in the main suite only: here they would repeat those calls, not reach another one.
#   bash scripts/test_floors.sh            # install, then run (extra arguments go to pytest;
#                                          # scripts/test.sh runs this in the background while
#                                          # it installs the main venv and runs the suite)
#   bash scripts/test_floors.sh install    # only make the venv
#   bash scripts/test_floors.sh run        # only run (on the venv install made)
set -euo pipefail
cd "$(dirname "$0")/.."
# its venv is installed without bytecode (--no-compile): Python's cache compiles what is used
unset PYTHONDONTWRITEBYTECODE
VENV="${DLPERF_FLOORS_VENV:-.venv-floors}"
phase=all
case "${1:-}" in install|run) phase="$1"; shift ;; esac

if [ "$phase" != run ]; then
  python3 -m venv "$VENV"
  python3 scripts/floors.py > "$VENV/floors.txt"
  "$VENV/bin/pip" install -q --no-compile -r "$VENV/floors.txt" pytest pytest-timeout pytest-xdist
  [ "$phase" = install ] && exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# dlperf built from a copy of its source: scripts/test.sh runs this beside the editable install
# of the main venv, and two builds in one source tree collide (build/, src/*.egg-info)
mkdir "$tmp/dlperf"
cp pyproject.toml README.md "$tmp/dlperf/"
cp -r src "$tmp/dlperf/src"
find "$tmp/dlperf/src" \( -name '*.egg-info' -o -name __pycache__ \) -prune -exec rm -rf {} +
"$VENV/bin/pip" install -q --no-deps -c "$VENV/floors.txt" "$tmp/dlperf"

"$VENV/bin/python" scripts/floors.py --check
"$VENV/bin/dlperf" --help > /dev/null
export DLPERF_FAKE_FRAMEWORK=1
"$VENV/bin/dlperf" run -m fcn5_tiny --framework fake -b 8,16 --no-ceilings --db "$tmp/r.db" > /dev/null
"$VENV/bin/dlperf" results --db "$tmp/r.db" > /dev/null
"$VENV/bin/dlperf" report --db "$tmp/r.db" -o "$tmp/report" > /dev/null
"$VENV/bin/dlperf" compare --run . . --rounds 2 --db "$tmp/gate.db" --fail-if-slower 5% \
  -- -m fcn5_tiny --framework fake -b 8 --no-ceilings > /dev/null || [ $? -eq 4 ]
# the tests import the installed dlperf (src/ is not on the path: a src layout)
unset PYTHONPATH
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n "${DLPERF_TEST_WORKERS:-2}" \
  --dist loadfile -m "not gpu and not simulation" \
  tests/unit/test_stats.py tests/unit/test_stats_drift.py tests/unit/test_compare_runs.py \
  tests/unit/test_schema.py tests/unit/test_config.py tests/unit/test_store.py \
  tests/unit/test_report.py tests/unit/test_terminal.py \
  tests/unit/test_thread_policy.py tests/unit/test_yamlsafe.py tests/unit/test_ascii_terminal.py \
  "$@"

#!/usr/bin/env bash
# Installs dlperf with every core dependency at the minimum pyproject.toml declares
# (scripts/floors.py turns each ">=" into "==") into a throwaway venv, checks that pip kept
# those versions, and runs what needs no framework on them: the CLI, a fake-framework run,
# `dlperf compare --run` and the unit and integration tests of the statistics, the store, the
# records, the reports, the thread policy and the gate. A floor that no longer works fails
# here, not on a user's machine.
# Not part of scripts/test.sh: on the 2-core development VM it takes about 10 min (install
# and tests) beside the main suite's 10, over CI's 15-minute budget; run it when a floor or a
# use of a dependency's API changes. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${DLPERF_FLOORS_VENV:-.venv-floors}"
python3 -m venv "$VENV"
python3 scripts/floors.py > "$VENV/floors.txt"
"$VENV/bin/pip" install -q -c "$VENV/floors.txt" . pytest pytest-timeout
"$VENV/bin/python" scripts/floors.py --check
"$VENV/bin/dlperf" --help > /dev/null
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export DLPERF_FAKE_FRAMEWORK=1
"$VENV/bin/dlperf" run -m fcn5_tiny --framework fake -b 8,16 --no-ceilings --db "$tmp/r.db" > /dev/null
"$VENV/bin/dlperf" results --db "$tmp/r.db" > /dev/null
"$VENV/bin/dlperf" report --db "$tmp/r.db" -o "$tmp/report" > /dev/null
"$VENV/bin/dlperf" compare --run . . --rounds 2 --db "$tmp/gate.db" --fail-if-slower 5% \
  -- -m fcn5_tiny --framework fake -b 8 --no-ceilings > /dev/null
# the tests import the installed dlperf (src/ is not on the path: a src layout)
unset PYTHONPATH
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/unit/test_stats.py tests/unit/test_stats_drift.py tests/unit/test_compare_runs.py \
  tests/unit/test_schema.py tests/unit/test_config.py tests/unit/test_store.py \
  tests/unit/test_report.py tests/unit/test_html_report.py tests/unit/test_terminal.py \
  tests/unit/test_thread_policy.py tests/unit/test_yamlsafe.py tests/unit/test_ascii_terminal.py \
  tests/integration/test_compare_cli.py "$@"

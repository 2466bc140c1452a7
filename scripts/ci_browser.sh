#!/usr/bin/env bash
# CI: the HTML report opened in a real headless Chromium (issue 21, tests/unit/test_html_report.py):
# installs Chromium where it is missing and this runs as root with apt-get (Debian's package
# "chromium"), then runs the report's tests with the browser required (they fail instead of
# skipping) and keeps the screenshot in $DLPERF_SCREENSHOT_DIR (default ci-artifacts/html/).
# Extra arguments go to pytest. Called from the repository root by .ci/run, after the venv exists.
set -euo pipefail
cd "$(dirname "$0")/.."

find_browser() {
  local b
  for b in "${DLPERF_CHROMIUM:-}" chromium chromium-browser google-chrome google-chrome-stable; do
    if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
  done
  return 1
}

if ! find_browser >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ci_browser: installing chromium (apt-get)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "ci_browser: no Chromium here, and it can only be installed as root with apt-get;" \
         "install chromium (or set DLPERF_CHROMIUM to a Chrome/Chromium binary)" >&2
    exit 1
  fi
fi
echo "ci_browser: $(find_browser) ($("$(find_browser)" --version 2>/dev/null | tail -1))" >&2

export DLPERF_REQUIRE_BROWSER=1
export DLPERF_SCREENSHOT_DIR="${DLPERF_SCREENSHOT_DIR:-$PWD/ci-artifacts/html}"
PY="${PYTHON:-.venv/bin/python}"
PYTHONPATH=src "$PY" -m pytest -q -p no:cacheprovider tests/unit/test_html_report.py "$@"
echo "ci_browser: screenshot $DLPERF_SCREENSHOT_DIR/report.png" >&2

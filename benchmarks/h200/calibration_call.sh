#!/usr/bin/env bash
# One device call of the calibration sweep (benchmarks/h200/calibration2.yaml), resumed from the
# committed database, the database returned compressed and split so that it passes the device
# tool's return limit (8 files of at most 16 MiB each; calibration2.db passed 16 MiB at 172
# points in session 19 and that call's points were lost).
#   SWEEP_S=530 DLPERF_GIT_SHA=<commit> bash benchmarks/h200/calibration_call.sh [TAG]
# Back here:  cat $FILES_AT/calibration2.db.gz.part-* | gunzip > benchmarks/results/h200/calibration2.db
set -uo pipefail
tag="${1:-call}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed (carry .whl)"; exit 1; }
export PYTHONPATH="/tmp/site:$PWD/src" PYTHONUNBUFFERED=1 COLUMNS=200
nvidia-smi --query-gpu=uuid,driver_version --format=csv,noheader
db=/tmp/calibration2.db
cp benchmarks/results/h200/calibration2.db "$db"
timeout --signal=INT "${SWEEP_S:-530}" python3 -m dlperf sweep benchmarks/h200/calibration2.yaml \
  --db "$db" 2>&1 | tee "$OUT/calibration2_$tag.txt"
gzip -6 -c "$db" | split -b 15m -d - "$OUT/calibration2.db.gz.part-"
ls -l "$OUT"

#!/usr/bin/env bash
# One device call on an H100 (kind nvidia-h100-x1) for the cross-GPU check of the timeline
# replay (docs/replay.md). Resumable: each step continues the results file committed under
# benchmarks/results/h100/ and returns it gzipped in $OUT.
#   DLPERF_GIT_SHA=<commit> bash benchmarks/h100/device.sh calibrate   # the device profile
#   DLPERF_GIT_SHA=<commit> BUDGET=520 bash benchmarks/h100/device.sh suite [YAML]
# Back here:  gunzip -c $FILES_AT/<name>.db.gz > benchmarks/results/h100/<name>.db
# (or `dlperf merge` it into the committed file: a stored result is not stored twice).
set -uo pipefail
what="${1:?calibrate or suite}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed (carry .whl)"; exit 1; }
export PYTHONPATH="/tmp/site:$PWD/src" PYTHONUNBUFFERED=1 COLUMNS=200
export JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
python3 -c "import torch, jax; print('torch', torch.__version__, 'jax', jax.__version__, torch.cuda.get_device_properties(0))"
t0=$(date +%s)
case "$what" in
  calibrate)
    db=/tmp/calibrate.db
    cp benchmarks/results/h100/calibrate.db "$db" 2>/dev/null || true
    timeout --signal=INT "${BUDGET:-480}" python3 -m dlperf calibrate --db "$db" --name h100 \
      --device cuda --framework torch --budget-s "${BUDGET:-480}" 2>&1 | tee "$OUT/calibrate.txt"
    ;;
  suite)
    yaml="${2:-benchmarks/h100/suite.yaml}"
    name="$(basename "$yaml" .yaml)"
    db="/tmp/$name.db"
    cp "benchmarks/results/h100/$name.db" "$db" 2>/dev/null || true
    timeout --signal=INT "${BUDGET:-520}" python3 -m dlperf sweep "$yaml" --db "$db" 2>&1 \
      | tee "$OUT/${name}.txt"
    ;;
  *) echo "unknown step $what"; exit 2 ;;
esac
echo "wall $(( $(date +%s) - t0 )) s"
gzip -6 -c "$db" > "$OUT/$(basename "$db").gz"
ls -l "$OUT"

#!/usr/bin/env bash
# Two chains of device.sh parts at once on nvidia-h200-x2, one GPU and half the cores each:
#   GPU0="part part" GPU1="part" LIMIT_S=560 bash benchmarks/h200/parallel.sh
# Each chain sees one GPU (CUDA_VISIBLE_DEVICES) and is pinned to the cores of its half
# (CORES0/CORES1, default 0-15 and 16-31), so single-GPU sweeps run side by side. Budgets end at
# LIMIT_S seconds from the start (DLPERF_DEADLINE). The device tool brings back at most 8 files,
# so the parts' outputs and benchmarks/results/{h200,h200x2} come back as one $OUT/results.tgz
# (unpack with: tar -xzf results.tgz -C benchmarks/results), the logs as $OUT/log_gpu{0,1}.txt.
# The two chains share the host (memory bandwidth, PCIe root), which COMMANDS.md notes.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
FINAL_OUT="$OUT"; export OUT=/tmp/parts_out; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
export DLPERF_SITE_READY=1 DLPERF_DEADLINE=$(( $(date +%s) + ${LIMIT_S:-560} ))
nproc; nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -6
CUDA_VISIBLE_DEVICES=0 taskset -c "${CORES0:-0-15}" bash benchmarks/h200/device.sh ${GPU0:-} \
  > "$FINAL_OUT/log_gpu0.txt" 2>&1 &
CUDA_VISIBLE_DEVICES=1 taskset -c "${CORES1:-16-31}" bash benchmarks/h200/device.sh ${GPU1:-} \
  > "$FINAL_OUT/log_gpu1.txt" 2>&1 &
wait
mkdir -p benchmarks/results/h200x2
tar -czf "$FINAL_OUT/results.tgz" -C benchmarks/results h200 h200x2
ls -la "$FINAL_OUT"
for g in 0 1; do echo "##### gpu$g"; tail -c 5000 "$FINAL_OUT/log_gpu$g.txt"; done

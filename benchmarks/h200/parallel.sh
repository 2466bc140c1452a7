#!/usr/bin/env bash
# Two chains of device.sh parts at once on nvidia-h200-x2, one GPU and half the cores each:
#   GPU0="part part" GPU1="part" LIMIT_S=560 bash benchmarks/h200/parallel.sh
# Each chain sees one GPU (CUDA_VISIBLE_DEVICES) and is pinned to half the physical cores with
# their hyper-thread siblings (from /sys topology; CORES0/CORES1 override), so the chains share
# no core. A sweep can also run as two shards, one per chain, into one db:
#   GPU0="frameworks" GPU1="frameworks" FRAMEWORKS_SHARDS=1 bash benchmarks/h200/parallel.sh
# ENV0="VAR=value ..." / ENV1=... set variables for one chain only. Budgets end at LIMIT_S
# seconds from the start (DLPERF_DEADLINE). The device tool brings back at most 8 files, so
# the parts' outputs and benchmarks/results/{h200,h200x2} come back as one $OUT/results.tgz
# (unpack with: tar -xzf results.tgz -C benchmarks/results), the logs as $OUT/log_gpu{0,1}.txt.
# The two chains share the host (memory bandwidth, PCIe root), which COMMANDS.md notes.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
FINAL_OUT="$OUT"; export OUT=/tmp/parts_out; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
export DLPERF_SITE_READY=1 DLPERF_DEADLINE=$(( $(date +%s) + ${LIMIT_S:-560} ))
nproc; nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -6
# Two halves of the physical cores, each with its siblings: "cpulist0 cpulist1".
read -r HALF0 HALF1 < <(python3 - <<'PY'
import glob, os
cores = {}
for d in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology")):
    cpu = int(d.split("/")[-2][3:])
    if cpu not in os.sched_getaffinity(0):
        continue
    key = tuple(open(f"{d}/{f}").read().strip() for f in ("physical_package_id", "core_id"))
    cores.setdefault(key, []).append(cpu)
groups = sorted(cores.values())
half = len(groups) // 2 or 1
a = sorted(c for g in groups[:half] for c in g)
b = sorted(c for g in groups[half:] for c in g) or a
print(",".join(map(str, a)), ",".join(map(str, b)))
PY
)
C0=${CORES0:-$HALF0}; C1=${CORES1:-$HALF1}
echo "chain 0 CPUs: $C0"; echo "chain 1 CPUs: $C1"
SH0=; SH1=
[ -n "${FRAMEWORKS_SHARDS:-}" ] && { SH0=0/2; SH1=1/2; }
# ENV0/ENV1: "VAR=value ..." for one chain only (e.g. its own OVERHEAD_POINTS and OVERHEAD_TAG)
env ${ENV0:-} CUDA_VISIBLE_DEVICES=0 FRAMEWORKS_SHARD=$SH0 taskset -c "$C0" \
  bash benchmarks/h200/device.sh ${GPU0:-} > "$FINAL_OUT/log_gpu0.txt" 2>&1 &
env ${ENV1:-} CUDA_VISIBLE_DEVICES=1 FRAMEWORKS_SHARD=$SH1 taskset -c "$C1" \
  bash benchmarks/h200/device.sh ${GPU1:-} > "$FINAL_OUT/log_gpu1.txt" 2>&1 &
wait
mkdir -p benchmarks/results/h200x2
tar -czf "$FINAL_OUT/results.tgz" -C benchmarks/results h200 h200x2
ls -la "$FINAL_OUT"
for g in 0 1; do echo "##### gpu$g"; tail -c 5000 "$FINAL_OUT/log_gpu$g.txt"; done

#!/usr/bin/env bash
# Run dlperf's H200 measurements on the GPU machine (the `device` tool), one part per call.
#   bash benchmarks/h200/device.sh PART [PART...]
#   PART: smoke | dlbench | real | overhead | overhead_jax | frameworks | allreduce (x2)
#         | scaling (x2: weak scaling 1 -> 2 GPUs and convergence on 1 vs 2 GPUs, issue 5)
# The machine has torch/CUDA but no registry: pydantic travels as wheels in .whl/, the data
# sets in .data/ (copies of ../shared/data), and dlperf runs from src/ with the image's torch.
# Results go to benchmarks/results/h200/ and are copied to $OUT for the trip back.
set -uo pipefail
export PYTHONUNBUFFERED=1 DLPERF_DATA="$PWD/.data" COLUMNS=200
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH="/tmp/site:$PWD/src"
else
  export PYTHONPATH="$PWD/src"
fi
R=benchmarks/results/h200
mkdir -p "$R"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
budget() { timeout --signal=INT "$@"; }   # SIGINT: dlperf stops cleanly, the db stays intact
for part in "$@"; do
  echo "=== $part $(date -u +%FT%TZ)"
  case "$part" in
    smoke)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_harness.py 2>&1 | tail -3
      python3 -m dlperf run --model fcn5,resnet50,lstm --batch-size 64 --device cuda \
        --db "$R/smoke.db" --min-time 0.5 2>&1 | tail -12
      ;;
    dlbench)
      budget "${DLBENCH_BUDGET:-480}" python3 -m dlperf sweep benchmarks/h200/dlbench.yaml \
        --db "$R/dlbench.db" 2>&1 | grep -v '^\s*$' | tail -90
      cp "$R/dlbench.db" "$OUT/"
      ;;
    real)
      budget 240 python3 -m dlperf sweep benchmarks/h200/real.yaml --db "$R/real.db" 2>&1 | tail -20
      cp "$R/real.db" "$OUT/"
      ;;
    overhead)
      for p in ${OVERHEAD_PRECISIONS:-fp32}; do
        # OVERHEAD_POINTS/OVERHEAD_TRUTH/OVERHEAD_TAG split the points over several device calls.
        pts=${OVERHEAD_POINTS:-fcn5:64,fcn8:64,alexnet:128,resnet50:64,lstm:64,fcn_mnist:64,alexnet_cifar:128,resnet56:128}
        truth=${OVERHEAD_TRUTH-fcn5:64,resnet50:64,lstm:64}
        python3 benchmarks/overhead.py --device cuda --precision $p --rounds "${OVERHEAD_ROUNDS:-1}" --min-time 2 \
          --points "$pts" ${truth:+--truth "$truth"} --db "$R/overhead.db" \
          --out "$R/overhead_$p${OVERHEAD_TAG:-}.json"
        cp "$R/overhead_$p${OVERHEAD_TAG:-}.json" "$OUT/"
      done
      cp "$R/overhead.db" "$OUT/"
      ;;
    overhead_jax)  # issue 3: dlperf's JAX harness against benchmarks/plain_jax_loop.py
      for p in ${OVERHEAD_PRECISIONS:-fp32 bf16}; do
        python3 benchmarks/overhead.py --framework jax --device cuda --precision $p \
          --rounds "${OVERHEAD_ROUNDS:-3}" --min-time 2 --points resnet50:128,lstm:64 \
          --db "$R/overhead_jax.db" --out "$R/overhead_jax_$p.json"
        cp "$R/overhead_jax_$p.json" "$OUT/"
      done
      ;;
    allreduce)  # issue 5, on nvidia-h200-x2: NCCL all-reduce 8 B .. 1 GB over the local GPUs
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
      n=$(nvidia-smi -L | wc -l); R2=benchmarks/results/h200x$n; mkdir -p "$R2"
      python3 -m torch.distributed.run --nproc-per-node "$n" -m dlperf.comm.allreduce \
        --min-bytes 8 --max-bytes 1G --iters 20 --warmup 5 --json "$R2/allreduce.json"
      cp "$R2/allreduce.json" "$OUT/"
      ;;
    scaling)  # issue 5, on nvidia-h200-x2: resumable sweeps; call again to continue
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
      n=$(nvidia-smi -L | wc -l)
      [ "$n" -ge 2 ] || { echo "scaling needs 2 GPUs (nvidia-h200-x2), found $n"; exit 2; }
      R2=benchmarks/results/h200x2; mkdir -p "$R2"
      budget "${SCALING_BUDGET:-420}" python3 -m dlperf sweep benchmarks/h200x2/scaling.yaml \
        --db "$R2/scaling.db" 2>&1 | grep -v '^\s*$' | tail -60
      budget "${CONVERGENCE_BUDGET:-150}" python3 -m dlperf sweep benchmarks/h200x2/convergence.yaml \
        --db "$R2/convergence.db" 2>&1 | grep -v '^\s*$' | tail -20
      python3 -m dlperf results --db "$R2/scaling.db" --compare scaling > "$R2/scaling.md"
      python3 -m dlperf results --db "$R2/convergence.db" --compare convergence > "$R2/convergence.md"
      cat "$R2/scaling.md" "$R2/convergence.md"
      cp "$R2/scaling.db" "$R2/convergence.db" "$R2/scaling.md" "$R2/convergence.md" "$OUT/"
      ;;
    frameworks)
      budget "${FRAMEWORKS_BUDGET:-540}" python3 -m dlperf sweep benchmarks/h200/frameworks.yaml \
        --db "$R/frameworks.db" 2>&1 | grep -v '^\s*$' | tail -60
      cp "$R/frameworks.db" "$OUT/"
      ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
done

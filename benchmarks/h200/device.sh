#!/usr/bin/env bash
# Run dlperf's H200 measurements on the GPU machine (the `device` tool), one part per call.
#   bash benchmarks/h200/device.sh PART [PART...]
#   PART: smoke | dlbench | real | overhead | overhead_ab | overhead_jax | overhead_gpt2 | frameworks
#         | compile_modes | cpu_threads | breakdown | gpu_tests | gap | mfu_inputs | allreduce (x2)
#         | probe | scaling (x2: weak scaling 1 -> 2 GPUs and convergence on 1 vs 2 GPUs, issue 5)
# The machine has torch/CUDA but no registry: pydantic travels as wheels in .whl/, the data
# sets in .data/ (copies of ../shared/data), and dlperf runs from src/ with the image's torch.
# mfu_inputs needs Pillow to write and read JPEGs. The image lists pillow (KINDS.md; it comes with
# torchvision and matplotlib) but ENVIRONMENT.md does not promise it: where it is missing, carry
# its wheel in .whl/ (here: python3 -m pip download --no-deps --only-binary=:all:
# --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d .whl pillow)
# and the part stops with that advice instead of measuring without it.
# The JAX ImageFolder points with loader workers (mfu_inputs, `loader_impl: processes`) run their
# workers as Grain processes: the image lacks grain, array-record and portpicker (grain's other
# requirements, absl-py, cloudpickle, etils, fsspec, numpy, protobuf, zipp, are there), so .whl/
# must hold grain-0.2.18-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl,
# array_record-0.8.6-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl and
# portpicker-1.6.0-py3-none-any.whl (python3 -m pip download --no-deps --only-binary=:all:
# --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform
# manylinux_2_17_x86_64 -d .whl grain==0.2.18 array-record==0.8.6 portpicker==1.6.0); without
# them mfu_inputs stops with that advice (`auto` would fall back to threads, with a warning).
# Results go to benchmarks/results/h200/ and are copied to $OUT for the trip back.
set -uo pipefail
export PYTHONUNBUFFERED=1 DLPERF_DATA="$PWD/.data" COLUMNS=200
if [ -n "${DLPERF_SITE_READY:-}" ]; then  # parallel.sh installed the wheels already
  export PYTHONPATH="/tmp/site:$PWD/src"
elif [ -d .whl ]; then
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
# budget SECONDS CMD...: SIGINT after SECONDS (dlperf stops cleanly, the db stays intact), or
# earlier at DLPERF_DEADLINE (epoch seconds, set by parallel.sh) less a 20 s margin.
budget() {
  local s=$1; shift
  if [ -n "${DLPERF_DEADLINE:-}" ]; then
    local left=$(( DLPERF_DEADLINE - $(date +%s) - 20 ))
    [ "$left" -lt "$s" ] && s=$left
    [ "$s" -le 5 ] && { echo "no time left for: $*"; return 0; }
  fi
  timeout --signal=INT "$s" "$@"
}
for part in "$@"; do
  echo "=== $part $(date -u +%FT%TZ)"
  case "$part" in
    smoke)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/measure/test_harness.py 2>&1 | tail -3
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
        # OVERHEAD_CORES pins both processes of every pair to the same cores (less spread);
        # "auto": the first 4 CPUs this chain may use (parallel.sh gives each chain its own)
        if [ "${OVERHEAD_CORES:-}" = auto ]; then
          OVERHEAD_CORES=$(python3 -c "import os; print(','.join(map(str, sorted(os.sched_getaffinity(0))[:4])))")
          echo "overhead pinned to CPUs $OVERHEAD_CORES"
        fi
        # budget: SIGINT at the deadline; the JSON holds every point finished by then
        budget "${OVERHEAD_BUDGET:-540}" ${OVERHEAD_CORES:+taskset -c $OVERHEAD_CORES} \
        python3 benchmarks/overhead.py --device cuda --precision $p --rounds "${OVERHEAD_ROUNDS:-1}" --min-time 2 \
          --points "$pts" ${truth:+--truth "$truth"} --db "$R/overhead.db" \
          --out "$R/overhead_$p${OVERHEAD_TAG:-}.json"
        cp "$R/overhead_$p${OVERHEAD_TAG:-}.json" "$OUT/"
      done
      cp "$R/overhead.db" "$OUT/"
      ;;
    overhead_ab)  # issue 2: in-process A/B of dlperf's step and harness against the plain step
      # AB_POINTS: model:batch:rounds:iters,...  AB_CORES: the cores the process is pinned to
      mkdir -p "$R/overhead_ab"
      for pt in ${AB_POINTS//,/ }; do
        IFS=: read -r m b rounds iters <<< "$pt"
        taskset -c "${AB_CORES:-2,3}" python3 benchmarks/overhead_ab.py --model "$m" --batch-size "$b" \
          --rounds "$rounds" --iters "$iters" \
          --variants "${AB_VARIANTS:-plain,plain+api,plain+harness,dlperf-step,dlperf+power}" \
          --json "$R/overhead_ab/ab4${AB_TAG:-}_$m.json" 2>&1 | grep -v Warning
        cp "$R/overhead_ab/ab4${AB_TAG:-}_$m.json" "$OUT/"
      done
      ;;
    overhead_jax)  # issue 3: dlperf's JAX harness against benchmarks/plain_jax_loop.py
      # Each point compiles once per process (dlperf and plain loop, every round); the
      # persistent compilation cache makes rounds 2.. load the executables instead (XLA's
      # output is the same; only the compile-time fields of these runs change).
      export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}"
      for p in ${OVERHEAD_PRECISIONS:-fp32 bf16}; do
        python3 benchmarks/overhead.py --framework jax --device cuda --precision $p \
          --rounds "${OVERHEAD_ROUNDS:-3}" --min-time 2 \
          --points "${OVERHEAD_JAX_POINTS:-resnet50:128,lstm:64,gpt2_small:8}" \
          --db "$R/overhead_jax.db" --out "$R/overhead_jax_$p${OVERHEAD_TAG:-}.json"
        cp "$R/overhead_jax_$p${OVERHEAD_TAG:-}.json" "$OUT/"
      done
      ;;
    overhead_gpt2)  # issue 3: gpt2_small b=8, dlperf against the plain torch and JAX loops
      # Plain torch: SDPA(is_causal) + fused AdamW (dlperf: foreach; OVERHEAD_PLAIN_ARGS=
      # '--optimizer-impl foreach' gives the same-optimizer ratio). Plain JAX: one AOT-compiled
      # donated step, einsum attention with attention dropout (as the spec), rbg PRNG.
      # Device time, roughly: torch ~4 min for both precisions at 3 rounds; JAX compiles
      # GPT-2 in every process (~0.5-1 min each before the cache), so split over calls with
      # OVERHEAD_FRAMEWORKS=torch|jax and OVERHEAD_PRECISIONS=bf16|fp32 if one call is short.
      export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}"
      for fw in ${OVERHEAD_FRAMEWORKS:-torch jax}; do
        for p in ${OVERHEAD_PRECISIONS:-bf16 fp32}; do
          out="$R/overhead_gpt2_${fw}_$p${OVERHEAD_TAG:-}.json"
          python3 benchmarks/overhead.py --framework "$fw" --device cuda --precision "$p" \
            --rounds "${OVERHEAD_ROUNDS:-3}" --min-time 2 --points gpt2_small:8 \
            ${OVERHEAD_PLAIN_ARGS:+--plain-args="$OVERHEAD_PLAIN_ARGS"} \
            --db "$R/overhead_gpt2.db" --out "$out"
          cp "$out" "$OUT/"
        done
      done
      cp "$R/overhead_gpt2.db" "$OUT/"
      ;;
    allreduce)  # issue 5, on nvidia-h200-x2: NCCL all-reduce 8 B .. 1 GB over the local GPUs
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
      n=$(nvidia-smi -L | wc -l); R2=benchmarks/results/h200x$n; mkdir -p "$R2"
      python3 -m torch.distributed.run --nproc-per-node "$n" -m dlperf.comm.allreduce \
        --min-bytes 8 --max-bytes 1G --iters 20 --warmup 5 --json "$R2/allreduce.json"
      python3 -m dlperf allreduce --from-json "$R2/allreduce.json" --db "$R2/allreduce.db"
      cp "$R2/allreduce.json" "$R2/allreduce.db" "$OUT/"
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
    ddp_diag)  # issue 5, on nvidia-h200-x2: why DDP resnet50 scales at 0.74 (ddp_diag.yaml)
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
      R2=benchmarks/results/h200x2; mkdir -p "$R2"
      budget "${DDP_DIAG_BUDGET:-300}" python3 -m dlperf sweep benchmarks/h200x2/ddp_diag.yaml \
        --db "$R2/ddp_diag.db" 2>&1 | grep -v '^\s*$' | tail -20
      budget 90 python3 -m dlperf run --model resnet50 --device cuda --precision bf16 \
        --batch-size 64 --scaling weak --nproc 2 --power-interval 1.0 --no-ceilings \
        --min-iters 50 --min-time 3 --db "$R2/ddp_diag_power.db" 2>&1 | tail -4
      python3 -m dlperf results --db "$R2/ddp_diag.db" --compare scaling | tee "$R2/ddp_diag.md"
      cp "$R2"/ddp_diag*.db "$R2/ddp_diag.md" "$OUT/"  # the machine's tree is reset per call
      ;;
    frameworks)
      # FRAMEWORKS_SHARD=K/N: this chain's share of the grid (parallel.sh, one per GPU)
      budget "${FRAMEWORKS_BUDGET:-540}" python3 -m dlperf sweep benchmarks/h200/frameworks.yaml \
        --db "$R/frameworks.db" ${FRAMEWORKS_SHARD:+--shard "$FRAMEWORKS_SHARD"} 2>&1 \
        | grep -v '^\s*$' | tail -60
      cp "$R/frameworks.db" "$OUT/"
      ;;
    compile_modes)  # issue 3: torch.compile reduce-overhead (CUDA graphs) on the host-bound points
      budget "${COMPILE_MODES_BUDGET:-300}" python3 -m dlperf sweep benchmarks/h200/compile_modes.yaml \
        --db "$R/frameworks.db" 2>&1 | grep -v '^\s*$' | tail -20
      cp "$R/frameworks.db" "$OUT/"
      ;;
    cpu_threads)  # issue 3: the host's 16 cores, 1..16 threads, torch and jax
      budget "${CPU_THREADS_BUDGET:-540}" python3 -m dlperf sweep benchmarks/h200/cpu_threads.yaml \
        --db "$R/cpu_threads.db" 2>&1 | grep -v '^\s*$' | tail -40
      cp "$R/cpu_threads.db" "$OUT/"
      ;;
    breakdown)  # issue 4: phases, GPU busy, op classes of `seven` in torch and jax; gaps
      if [ -n "${BREAKDOWN_TESTS:-}" ]; then  # the opt-in GPU tests of the breakdown first
        python3 -m pytest -q -m gpu -p no:cacheprovider tests/integration/test_breakdown_frameworks.py 2>&1 | tail -5
      fi
      budget "${BREAKDOWN_BUDGET:-540}" python3 -m dlperf sweep benchmarks/h200/breakdown.yaml \
        --db "$R/breakdown.db" 2>&1 | grep -v '^\s*$' | tail -60
      python3 -m dlperf results --db "$R/breakdown.db" --op-classes --format json \
        -o "$R/breakdown_op_classes.json" 2>&1 | tail -2
      python3 -m dlperf results --db "$R/breakdown.db" --op-classes 2>&1 | tail -80
      python3 -m dlperf report --db "$R/breakdown.db" -o "$R/report-breakdown" 2>&1 | tail -1
      cp "$R/breakdown.db" "$R/breakdown_op_classes.json" "$OUT/"
      cp "$R/report-breakdown/report.md" "$OUT/report-breakdown.md"
      ;;
    gpu_tests)  # every opt-in GPU test (tests/gpu/test_gpu_smoke.py first): ~4-5 min on one H200;
      # GPU_TESTS="tests/a.py::test_x ..." picks some
      # The whole output goes back in gpu_tests.log (tracebacks of failures included); the
      # call's own output keeps the summary lines.
      budget "${GPU_TESTS_BUDGET:-480}" python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        --tb=short ${GPU_TESTS:-tests/} > "$OUT/gpu_tests.log" 2>&1
      grep -E '^(FAILED|ERROR|SKIPPED|[0-9]+ (passed|failed))' "$OUT/gpu_tests.log" | cut -c1-400
      ;;
    gap)  # issue 4: both sides of the torch-JAX gaps (resnet50, lstm, transformer) again, in one
      # session on one machine: host-bound steps differ between machines of this kind (torch eager
      # resnet50 bf16 b=64: 16.5 ms on two machines, 22.8-24.8 on three others), so a gap whose
      # sides ran on two machines mixes the machines with the frameworks. The newest row of a point
      # is the one tables and gap attribution use. Run the gpu_tests part first (call 20 stored
      # torch breakdowns whose trace had failed, which those tests catch).
      export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}"
      budget "${GAP_BUDGET:-420}" python3 -m dlperf sweep "${GAP_YAML:-benchmarks/h200/gap.yaml}" --restart \
        --db "$R/breakdown.db" 2>&1 | grep -v '^\s*$' | grep -v '^[│┃┏┡└]' | tail -40
      python3 -m dlperf results --db "$R/breakdown.db" --op-classes 2>&1 | tail -70
      cp "$R/breakdown.db" "$OUT/"
      ;;
    mfu_inputs)  # issue 4: MFU for every model; resnet50 on JPEGs with 0..16 loader workers
      python3 -c "import PIL" 2>/dev/null || { echo "Pillow is missing: carry its wheel in" \
        ".whl/ (see the header of this file)"; exit 1; }
      python3 -c "import grain; print('grain', grain.__version__)" 2>/dev/null || { echo "grain" \
        "is missing: carry its wheels in .whl/ (see the header of this file)"; exit 1; }
      # A generated ImageFolder (no ImageNet here); kept in .data/ when .data is carried back in.
      [ -d "$DLPERF_DATA/imagefolder/class_099" ] || python3 -m dlperf data make-imagefolder \
        "$DLPERF_DATA/imagefolder" --images "${IMAGEFOLDER_IMAGES:-5000}" --classes 100 --size 256
      nproc; python3 -c "import torchvision; print('torchvision', torchvision.__version__)" || true
      if [ "${MFU_SAMPLER_COST:-1}" = 1 ]; then  # MFU_SAMPLER_COST=0: measured already
        python3 benchmarks/sampler_cost.py --nvml --rounds 5 > "$R/sampler_cost_nvml.json" \
          && cat "$R/sampler_cost_nvml.json" && cp "$R/sampler_cost_nvml.json" "$OUT/"
      fi
      budget "${MFU_INPUTS_BUDGET:-540}" python3 -m dlperf sweep benchmarks/h200/mfu_inputs.yaml \
        --db "$R/mfu_inputs.db" 2>&1 | grep -v '^\s*$' | tail -60
      python3 -m dlperf results --db "$R/mfu_inputs.db" --compare data 2>&1 | tail -20
      python3 -m dlperf report --db "$R/mfu_inputs.db" -o "$R/report-mfu-inputs" >/dev/null
      cp "$R/mfu_inputs.db" "$OUT/"; cp "$R/report-mfu-inputs/report.md" "$OUT/mfu_inputs.md"
      ;;
    probe)  # issues 3-4: the open questions of benchmarks/h200/probe.yaml (its header), traced
      export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}"
      budget "${PROBE_BUDGET:-540}" python3 -m dlperf sweep benchmarks/h200/probe.yaml \
        --db "$R/probe.db" 2>&1 | grep -v '^\s*$' | grep -v '^[│┃┏┡└]' | tail -40
      python3 -m dlperf results --db "$R/probe.db" 2>&1 | tail -14
      python3 -m dlperf results --db "$R/probe.db" --op-classes 2>&1 | tail -40
      cp "$R/probe.db" "$OUT/"
      ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
done

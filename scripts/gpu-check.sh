#!/usr/bin/env bash
# The GPU check, in two commands of at most 5 minutes each on a bare GPU machine (one H200, 16 cores, no
# network, no Debian packages; nvcc, CMake, ninja, Python): docs/cuda.md "On a GPU" gives the exact calls.
#
#   scripts/gpu-check.sh plan  [OUTDIR]   print the plan (steps, targets, time limits) and do nothing
#   scripts/gpu-check.sh build [OUTDIR]   unpack gpu-bundle/ into a local prefix, configure with it, build
#   scripts/gpu-check.sh test  [OUTDIR]   gpu tests, the real-client Python test, compute-sanitizer memcheck and
#                                         racecheck on small cases, the GPU benchmarks (device-timed)
#
# OUTDIR defaults to $OUT, else ./gpu-check-out. Every step writes its log there while it runs and appends one
# line to summary-<command>.txt when it ends, so a command cut off by a time limit still leaves what it did.
# Environment:
#   MOE_GPU_BUILD_DIR  build directory (default build-gpu; the bundle is unpacked into <dir>/bundle-prefix)
#   MOE_GPU_BUNDLE     the bundle (default gpu-bundle/, made here by scripts/gpu-bundle.sh; carry it along)
#   MOE_GPU_ARCH       CUDA architectures (default: the device's, from nvidia-smi; else 90)
#   MOE_GPU_TARGETS    build only these targets (default: every GPU target below)
#   MOE_GPU_JOBS       parallel jobs (default nproc)
#   MOE_GPU_BUILD_TYPE CMake build type (default Release; tests/gpu_bundle_test.sh, which only proves the
#                      bundle, builds unoptimised host code: None)
#   MOE_GPU_BUDGET     seconds for the whole command (default 285: the machine allows 300 per command)
#   MOE_GPU_BUILD_TIMEOUT  seconds for the build step (default 215)
#   MOE_GPU_HIDE_SYSTEM=1  hide the system's copies of the bundled packages (CMAKE_IGNORE_PREFIX_PATH=/usr), as
#                      the bundle test does on a machine that has them
# Exit status: 0 when every required step passed (benchmarks and optional targets are informative), else 1.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-plan}
out=$(realpath -m "${2:-${OUT:-gpu-check-out}}")
build=$(realpath -m "${MOE_GPU_BUILD_DIR:-build-gpu}")
bundle=$(realpath -m "${MOE_GPU_BUNDLE:-gpu-bundle}")
prefix="$build/bundle-prefix"
jobs=${MOE_GPU_JOBS:-$(nproc)}
budget=${MOE_GPU_BUDGET:-285}
python=${PYTHON:-$(command -v python3 || command -v python || echo python3)}
start=$(date +%s)

# Targets: the CUDA layer and every gpu-labelled program are required; the rest are built when their
# dependencies are there (NCCL, pybind11 + Python headers, Google Benchmark) and reported, not required.
required_targets="moe_cuda_layer cuda_layer_test cuda_layer_gpu_test cuda_plan_gpu_test cuda_topk_gpu_test
  cuda_ffn_accuracy_test cuda_ffn_invariance_test cuda_moe_pipeline_gpu_test cuda_stream_order_gpu_test
  layer_cases_test api_c_test"
optional_targets="cuda_moe_bench parallel_nccl_test parallel_ep_nccl_test moe_python"
# Time limits (seconds) of the steps; each is also cut to what is left of the budget.
t_configure=60 t_build=${MOE_GPU_BUILD_TIMEOUT:-215}
t_tests=100 t_python=30 t_memcheck=40 t_racecheck=40 t_bench=70
# compute-sanitizer's small cases (gtest filters) and the benchmark groups (each its own JSON).
memcheck_case="cuda_moe_pipeline_gpu_test --gtest_filter=CudaMoePipelineGpu.*"
racecheck_case="cuda_ffn_invariance_test --gtest_filter=CudaFfnInvariance.F32WeightsBitwise"
bench_groups="Plan Layer ExpertFfn"

print_plan() {
  cat <<EOF
gpu-check plan ($mode): output $out, build $build, bundle $bundle, $jobs jobs, budget ${budget}s
  build: unpack bundle -> $prefix (python, no dpkg) | configure (${t_configure}s): Ninja, Release, sim off,
         MPI off, -march=native off, warnings not fatal (logged to warnings.log), bundle prefix only, CUDA
         arch of the device, NCCL from the toolkit or the Python wheel (one line says which, or not found)
         | build (${t_build}s, -k 0): $(echo $required_targets) [required]; $(echo $optional_targets) [optional]
  test:  ctest gpu tests + api_c_test, cuda_layer_test (${t_tests}s) | real-client Python test (${t_python}s)
         | compute-sanitizer memcheck: $memcheck_case (${t_memcheck}s)
         | compute-sanitizer racecheck: $racecheck_case (${t_racecheck}s)
         | benchmarks, device-timed, one JSON per group: $bench_groups (${t_bench}s)
  total: build $((t_configure + t_build))s, test $((t_tests + t_python + t_memcheck + t_racecheck + t_bench))s (limit 300 each)
EOF
}

summary="$out/summary-$mode.txt"
note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo "$(( $(date +%s) - start ))"; }
# limit SECONDS: the step's limit cut to what is left of the budget (at least 1).
limit() {
  local left=$(( budget - $(elapsed) ))
  (( left < 1 )) && left=1
  (( $1 < left )) && echo "$1" || echo "$left"
}

case "$mode" in
  plan) print_plan; exit 0 ;;
  build|test) ;;
  *) echo "usage: scripts/gpu-check.sh plan|build|test [OUTDIR]" >&2; exit 2 ;;
esac
mkdir -p "$out"
: > "$summary"
print_plan | tee "$out/plan-$mode.txt"

if [[ "$mode" == build ]]; then
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed (no driver?)"
  arch=${MOE_GPU_ARCH:-}
  if [[ -z "$arch" ]]; then
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    arch=${cap:-90}
  fi
  note "gpu-check build: arch $arch, $(nvcc --version 2>/dev/null | tail -1), $(cmake --version | head -1)"

  if ! "$python" scripts/gpu_bundle.py unpack "$bundle" "$prefix" > "$out/bundle.log" 2>&1; then
    note "bundle FAILED ($(elapsed)s): $(tail -1 "$out/bundle.log")"
    exit 1
  fi
  mapfile -t bundle_args < <("$python" scripts/gpu_bundle.py cmake-args "$prefix" 2>> "$out/bundle.log")
  if (( ${#bundle_args[@]} == 0 )); then
    note "bundle FAILED ($(elapsed)s): $(tail -1 "$out/bundle.log")"
    exit 1
  fi
  note "bundle ok ($(elapsed)s): $(tail -1 "$out/bundle.log")"

  generator=()
  if command -v ninja > /dev/null; then generator=(-G Ninja); else note "ninja not found: Unix Makefiles"; fi
  hide=()
  [[ "${MOE_GPU_HIDE_SYSTEM:-0}" == 1 ]] && hide=(-DCMAKE_IGNORE_PREFIX_PATH=/usr)
  [[ -f "$build/CMakeCache.txt" ]] && ! grep -qE "^MOE_GPU_CHECK_BUILD:[A-Z]+=ON" "$build/CMakeCache.txt" &&
    { note "$build holds another build; remove it or set MOE_GPU_BUILD_DIR"; exit 1; }
  if ! timeout "$(limit $t_configure)" cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="${MOE_GPU_BUILD_TYPE:-Release}" \
      -DMOE_GPU_CHECK_BUILD=ON -DMOE_ENABLE_CUDA=ON -DMOE_BUILD_SIM=OFF -DMOE_ENABLE_MPI=OFF -DMOE_NATIVE=OFF \
      -DMOE_WERROR=OFF -DMOE_ENABLE_PYTHON=ON -DPython3_EXECUTABLE="$python" -DCMAKE_CUDA_ARCHITECTURES="$arch" \
      "${bundle_args[@]}" "${hide[@]}" > "$out/configure.log" 2>&1; then
    note "configure FAILED ($(elapsed)s); see configure.log"
    grep -E "CMake Error|error" "$out/configure.log" | head -20
    exit 1
  fi
  note "configure ok ($(elapsed)s)"
  grep -E "^-- moe" "$out/configure.log" | tee -a "$summary"

  # Only targets this configuration defines (optional ones may be absent: no NCCL, no pybind11, ...).
  defined=$(cmake --build "$build" --target help 2>/dev/null | sed -E 's/^\.\.\. //; s/: .*//')
  targets=${MOE_GPU_TARGETS:-$required_targets $optional_targets}
  wanted=()
  for t in $targets; do
    if grep -qx "$t" <<< "$defined"; then wanted+=("$t"); else note "target $t not defined here (skipped)"; fi
  done
  keep_going=()
  [[ ${#generator[@]} -gt 0 ]] && keep_going=(-- -k 0)
  if timeout "$(limit $t_build)" cmake --build "$build" -j "$jobs" --target "${wanted[@]}" "${keep_going[@]}" \
      > "$out/build.log" 2>&1; then
    build_rc=0
  else
    build_rc=$?
  fi
  grep -iE "warning" "$out/build.log" > "$out/warnings.log" || true
  note "build finished ($(elapsed)s, rc $build_rc, $(wc -l < "$out/warnings.log") warning lines in warnings.log)"
  status=0
  for t in "${wanted[@]}"; do
    case "$t" in
      moe_python) file=$(ls "$build/python/moe/_moe"*.so 2>/dev/null | head -1) ;;
      moe_*) file=$(ls "$build/lib/lib$t.a" 2>/dev/null) ;;
      *) file=$(ls "$build/bin/$t" 2>/dev/null) ;;
    esac
    if [[ -n "$file" ]]; then
      note "built $t"
    elif grep -qw "$t" <<< "$required_targets"; then
      note "NOT BUILT (required) $t"
      status=1
    else
      note "not built (optional) $t"
    fi
  done
  (( build_rc != 0 )) && grep -E "error|FAILED" "$out/build.log" | head -30 > "$out/errors.txt"
  note "gpu-check build: done in $(elapsed)s, status $status"
  exit $status
fi

# --- test --------------------------------------------------------------------------------------------------
if [[ ! -f "$build/CMakeCache.txt" || ! -d "$build/bin" ]]; then
  note "no build in $build: run 'scripts/gpu-check.sh build' first (on the same machine, while it is warm)"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv > "$out/gpu.txt" 2>&1
status=0

tests=$(ctest --test-dir "$build" -N 2>/dev/null | awk '/Test +#[0-9]+:/ {print $3}')
gpu_tests=$(ctest --test-dir "$build" -N -L gpu 2>/dev/null | awk '/Test +#[0-9]+:/ {print $3}')
run=""
for t in $gpu_tests api_c_test cuda_layer_test; do
  grep -qx "$t" <<< "$tests" && run="$run $t"
done
regex="^($(echo $run | tr ' ' '|'))\$"
note "tests: $(echo $run)"
# -V streams every test's output into the log as it runs (the [ info ] lines carry ulp and error figures).
if timeout "$(limit $t_tests)" ctest --test-dir "$build" -R "$regex" -V -j 4 --timeout 90 \
    --output-junit "$out/ctest-gpu.xml" > "$out/ctest-gpu.log" 2>&1; then
  note "tests ok ($(elapsed)s)"
else
  status=1
  note "tests FAILED or timed out ($(elapsed)s); see ctest-gpu.log"
fi
grep -E "tests passed|Test +#.*(Passed|Failed|Skipped|Not Run|Timeout)|no usable CUDA device|\[ info \]" \
  "$out/ctest-gpu.log" | sort -u >> "$summary"
# On the GPU machine a skipped gpu test is a failure of the check: say so plainly.
if grep -q "no usable CUDA device" "$out/ctest-gpu.log"; then
  status=1
  note "NO USABLE CUDA DEVICE: the gpu tests skipped ($(grep -m1 -o 'no usable CUDA device: .*' "$out/ctest-gpu.log"))"
fi

if ls "$build/python/moe/_moe"*.so > /dev/null 2>&1; then
  if PYTHONPATH="$build/python" OMP_NUM_THREADS=4 timeout "$(limit $t_python)" "$python" -m unittest -v \
      tests/python/test_hf_transformers.py > "$out/python-hf.log" 2>&1; then
    note "real-client python test ok ($(elapsed)s): $(grep -cE '\.\.\. ok$' "$out/python-hf.log") ok, $(grep -c 'skipped' "$out/python-hf.log") skipped"
  else
    status=1
    note "real-client python test FAILED ($(elapsed)s); see python-hf.log"
  fi
else
  note "real-client python test not run: the Python module was not built (see the build's summary)"
fi

sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/compute-sanitizer/compute-sanitizer \
  2>/dev/null | head -1 || true)
for tool in memcheck racecheck; do
  if [[ -z "$sanitizer" ]]; then note "compute-sanitizer not found (PATH, /usr/local/cuda): $tool skipped"; continue; fi
  case_var="${tool}_case"; t_var="t_$tool"
  read -r program filter <<< "${!case_var}"
  if [[ ! -x "$build/bin/$program" ]]; then note "$tool: $program not built"; status=1; continue; fi
  if timeout "$(limit ${!t_var})" "$sanitizer" --tool "$tool" --error-exitcode 99 "$build/bin/$program" $filter \
      > "$out/sanitizer-$tool.log" 2>&1; then
    note "$tool ok ($(elapsed)s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" | tail -1)"
  else
    status=1
    note "$tool FAILED or timed out ($(elapsed)s); see sanitizer-$tool.log"
  fi
done

if [[ -x "$build/bin/cuda_moe_bench" ]]; then
  bench_end=$(( $(elapsed) + $(limit $t_bench) ))
  line_buffered=$(command -v stdbuf > /dev/null && echo "stdbuf -oL" || true)
  for group in $bench_groups; do
    left=$(( bench_end - $(elapsed) ))
    (( left < 5 )) && { note "bench $group skipped (no time left)"; continue; }
    # stdbuf: the console lines reach the file as each benchmark ends (the JSON is written at the end).
    if timeout "$left" $line_buffered "$build/bin/cuda_moe_bench" --benchmark_filter="^$group/" \
        --benchmark_out="$out/bench-$group.json" --benchmark_out_format=json > "$out/bench-$group.txt" 2>&1; then
      if grep -q "no usable CUDA device" "$out/bench-$group.txt"; then
        note "bench $group: no usable CUDA device, nothing measured"
      else
        note "bench $group ok ($(elapsed)s): $(grep -c "^$group/" "$out/bench-$group.txt") benchmarks"
      fi
    else
      note "bench $group FAILED or timed out ($(elapsed)s); see bench-$group.txt"
    fi
  done
else
  note "benchmarks not built (Google Benchmark missing?)"
fi
note "gpu-check test: done in $(elapsed)s, status $status"
exit $status

#!/usr/bin/env bash
# The GPU bundle proven on this machine: scripts/gpu-check.sh's own build step, with the system's copies of the
# bundled packages hidden (CMAKE_IGNORE_PREFIX_PATH=/usr), configures from gpu-bundle/ only and builds the CUDA
# layer library and one GPU test program; then
#   - no third-party header of a bundled package was read from /usr/include (ninja's dependency log: a package
#     missing from the bundle would be found there, since the compiler searches /usr/include anyway),
#   - the test program loads xxhash from the bundle prefix (not the system's) and runs (it skips its device
#     cases here, naming the reason).
#
#   tests/gpu_bundle_test.sh SOURCE_DIR WORK_DIR [CUDA_ARCH]
# Exit status 0 pass, 1 fail, 77 skipped (no bundle: run scripts/gpu-bundle.sh; or no nvcc).
set -uo pipefail
src=$1
work=$2
arch=${3:-90}
if [[ ! -f "$src/gpu-bundle/manifest.txt" ]]; then
  echo "gpu_bundle_test: SKIPPED: no $src/gpu-bundle/manifest.txt (run scripts/gpu-bundle.sh, or make deps)"
  exit 77
fi
if ! command -v nvcc > /dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "gpu_bundle_test: SKIPPED: nvcc not found"
  exit 77
fi
build=$(realpath -m "$work/build")
out="$work/out"
start=$(date +%s)
# A whole command's budget is the device's; here, two shared cores, so the limits are generous. Host code
# unoptimised (build type None): the test proves the bundle, not the code's speed (14 s of 66 s saved).
MOE_GPU_BUILD_DIR="$build" MOE_GPU_BUNDLE="$src/gpu-bundle" MOE_GPU_ARCH="$arch" MOE_GPU_JOBS=2 \
  MOE_GPU_BUDGET=1700 MOE_GPU_BUILD_TIMEOUT=1600 MOE_GPU_HIDE_SYSTEM=1 MOE_GPU_BUILD_TYPE=None \
  MOE_GPU_TARGETS="moe_cuda_layer cuda_layer_test" bash "$src/scripts/gpu-check.sh" build "$out"
rc=$?
echo "gpu_bundle_test: gpu-check build exited $rc after $(( $(date +%s) - start ))s"
fail=0
for t in moe_cuda_layer cuda_layer_test; do
  grep -qx "built $t" "$out/summary-build.txt" || { echo "gpu_bundle_test: FAILED: $t not built"; fail=1; }
done
(( rc == 0 )) || fail=1
(( fail == 0 )) || { tail -40 "$out/build.log" 2>/dev/null; exit 1; }

prefix="$build/bundle-prefix"
deps=$(ninja -C "$build" -t deps 2>/dev/null)
system=$(grep -E '^ +/usr/include/(gtest|gmock|nlohmann|eigen3|benchmark|pybind11)/|^ +/usr/include/(xxhash|xxh3)\.h' \
  <<< "$deps" | sort -u)
if [[ -n "$system" ]]; then
  echo "gpu_bundle_test: FAILED: bundled packages' headers were read from the system:"
  echo "$system" | head -20
  exit 1
fi
from_bundle=$(grep -c "^ *$prefix/" <<< "$deps")
if (( from_bundle == 0 )); then
  echo "gpu_bundle_test: FAILED: no header was read from the bundle prefix $prefix"
  exit 1
fi
echo "gpu_bundle_test: $from_bundle header reads from the bundle, none of its packages from /usr/include"

xxhash=$(ldd "$build/bin/cuda_layer_test" | awk '/libxxhash/ {print $3}')
if [[ "$xxhash" != "$prefix"/* ]]; then
  echo "gpu_bundle_test: FAILED: cuda_layer_test loads libxxhash from '$xxhash', not from $prefix"
  exit 1
fi
echo "gpu_bundle_test: cuda_layer_test loads $xxhash"
if ! "$build/bin/cuda_layer_test" > "$work/cuda_layer_test.log" 2>&1; then
  echo "gpu_bundle_test: FAILED: the bundle-built cuda_layer_test failed:"
  tail -30 "$work/cuda_layer_test.log"
  exit 1
fi
echo "gpu_bundle_test: cuda_layer_test passed: $(grep -E '^\[  PASSED|SKIPPED \]' "$work/cuda_layer_test.log" | head -2 | tr '\n' ' ')"
echo "gpu_bundle_test: passed in $(( $(date +%s) - start ))s"

#!/usr/bin/env bash
# cmake/find_nccl.cmake on the NCCL wheel's layout: a fake site-packages holding nvidia/nccl/include/nccl.h and
# nvidia/nccl/lib/libnccl.so.2 only (as the nvidia-nccl wheel ships it), on the Python's path; the toolkit's own
# NCCL is left out of the search. Expects the line "moe: NCCL found: <wheel>/lib/libnccl.so.2"; then, without
# the wheel, the line "moe: NCCL not found".
#   tests/nccl_find_test.sh SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
src=$1 work=$2 python=$3
rm -rf "$work"
site="$work/site"
mkdir -p "$site/nvidia/nccl/include" "$site/nvidia/nccl/lib"
echo "/* stand-in for the wheel's header */" > "$site/nvidia/nccl/include/nccl.h"
echo "stand-in for the wheel's library" > "$site/nvidia/nccl/lib/libnccl.so.2"
touch "$site/nvidia/nccl/__init__.py"  # the wheel's nvidia/nccl is a package; nvidia/ is a namespace package
found=$(PYTHONPATH="$site" cmake -S "$src/tests/nccl_find" -B "$work/with" -DPython3_EXECUTABLE="$python" \
  -DMOE_NCCL_SEARCH_TOOLKIT=OFF 2>&1 | grep "moe: NCCL" || true)
echo "with the wheel: $found"
[[ "$found" == "-- moe: NCCL found: $site/nvidia/nccl/lib/libnccl.so.2 (header $site/nvidia/nccl/include/nccl.h)" ]] ||
  { echo "nccl_find_test: FAILED: the wheel's libnccl.so.2 was not found"; exit 1; }
missing=$(PYTHONPATH= cmake -S "$src/tests/nccl_find" -B "$work/without" -DPython3_EXECUTABLE="$python" \
  -DMOE_NCCL_SEARCH_TOOLKIT=OFF 2>&1 | grep "moe: NCCL" || true)
echo "without: $missing"
[[ "$missing" == "-- moe: NCCL not found"* ]] || { echo "nccl_find_test: FAILED: expected 'NCCL not found'"; exit 1; }
echo "nccl_find_test: passed"

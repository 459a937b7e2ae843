#!/usr/bin/env bash
# llama.cpp's MoE FFN on ggml's CPU backend beside our layer, measured in one run: prints a markdown table of
# milliseconds per layer call and ggml/ours ratios (docs/results.md section 3e).
#
# Usage: bench/ggml_peer.sh GGML_DIR [BUILD]
#   GGML_DIR  a checkout of github.com/ggml-org/ggml (or of llama.cpp, whose ggml/ is then used), outside this
#             tree; nothing is written into it.
#   BUILD     our build directory (default build), with bin/layer_bench (and bin/peak_bench). ggml's CPU
#             backend is configured and built there (native, Release, no GPU backends, OpenMP and llamafile's
#             sgemm as llama.cpp builds it) into BUILD/ggml-peer/ggml, installed into BUILD/ggml-peer/install,
#             and bench/ggml_moe_peer.cc (the graph of llama.cpp's build_moe_ffn) compiled against it.
# Environment (comma-separated subsets; the defaults are the full matrix, 32 minutes on the 2-core VM):
#   SHAPES   mixtral_like,deepseek_like,qwen3_30b_a3b      TYPES    f32,bf16,q8_0,q4_k,q6_k,mxfp4
#   TOKENS   1,16,256,2048                                  THREADS  1,2
#   REPS     repetitions on both sides (5; the medians are compared)
#   MIN_TIME least seconds per repetition on both sides (0.3)
#   GGML_REPACK=0  ggml's weights in its plain CPU buffer (llama.cpp's --no-repack); default: its CPU_REPACK
#            buffer where ggml offers it for the type, as llama.cpp does
#   GGML_COMMIT    ggml's commit for the record, where GGML_DIR is not a git work tree
# Each (shape, type) runs ggml's graph, then our layer_bench rows of the same shape and type (dropless, as
# ggml's graph: the deterministic preset's invariant kernels, capacity scope none), so that both see the
# machine in the same minutes. layer_bench runs with LAYER_BENCH_STREAM=0: like ggml's harness, it then
# reads no stream between its calls (its stream read evicts the caches the next calls would find warm). Output under BUILD/bench/: ggml_peer.jsonl
# (ggml), ggml_peer_ours_<shape>_<type>.json (layer_bench), peak.json (peak_bench, when absent),
# ggml_results.md.
set -euo pipefail

die() {
  echo "ggml_peer.sh: $*" >&2
  exit 2
}

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  die "usage: bench/ggml_peer.sh GGML_DIR [BUILD] (GGML_DIR: a ggml checkout)"
fi
ggml_dir=$1
build=${2:-build}
root=$(cd "$(dirname "$0")/.." && pwd)

[ -d "$ggml_dir" ] ||
  die "GGML_DIR '$ggml_dir' is not a directory (clone github.com/ggml-org/ggml outside this tree)"
ggml_dir=$(cd "$ggml_dir" && pwd)
[ -f "$ggml_dir/ggml/include/ggml.h" ] && ggml_dir=$ggml_dir/ggml  # a llama.cpp checkout
for f in CMakeLists.txt include/ggml.h include/ggml-cpu.h include/ggml-backend.h src/ggml-cpu; do
  [ -e "$ggml_dir/$f" ] || die "GGML_DIR '$ggml_dir' is not a ggml checkout (no $f)"
done
case "$ggml_dir/" in
  "$root"/*) die "GGML_DIR '$ggml_dir' lies inside this source tree; check ggml out elsewhere" ;;
esac
[ -x "$build/bin/layer_bench" ] ||
  die "$build/bin/layer_bench not found (cmake --build $build --target layer_bench peak_bench)"
build=$(cd "$build" && pwd)
case "$build/" in
  "$ggml_dir"/*) die "BUILD '$build' lies inside GGML_DIR; nothing is to be written there" ;;
esac

# The lists, checked against what both sides know.
shapes=${SHAPES:-mixtral_like,deepseek_like,qwen3_30b_a3b}
types=${TYPES:-f32,bf16,q8_0,q4_k,q6_k,mxfp4}
tokens=${TOKENS:-1,16,256,2048}
threads=${THREADS:-1,2}
reps=${REPS:-5}
min_time=${MIN_TIME:-0.3}
check_list() {  # name, value, regex of one item, what an item must be
  local item items
  [ -n "$2" ] || die "$1 is empty"
  IFS=, read -ra items <<< "$2"
  for item in "${items[@]}"; do
    [[ $item =~ ^($3)$ ]] || die "$1: '$item' is not $4"
  done
}
check_list SHAPES "$shapes" "mixtral_like|deepseek_like|qwen3_30b_a3b" \
  "one of mixtral_like, deepseek_like, qwen3_30b_a3b"
check_list TYPES "$types" "f32|bf16|q8_0|q4_k|q6_k|mxfp4" "one of f32, bf16, q8_0, q4_k, q6_k, mxfp4"
check_list TOKENS "$tokens" "[1-9][0-9]{0,5}" "a token count from 1 to 999999"
check_list THREADS "$threads" "[1-9][0-9]{0,2}" "a thread count from 1 to 999"
check_list REPS "$reps" "[1-9][0-9]?" "a repetition count from 1 to 99"
[[ $min_time =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "MIN_TIME '$min_time' is not a number of seconds"

peer_dir=$build/ggml-peer
out=$build/bench
mkdir -p "$peer_dir" "$out"
commit=${GGML_COMMIT:-$(git -C "$ggml_dir" rev-parse HEAD 2> /dev/null || echo unknown)}

# ggml's CPU backend, built as llama.cpp builds it by default on Linux.
log=$peer_dir/ggml-build.log
cache=$peer_dir/ggml/CMakeCache.txt
if [ -f "$cache" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ggml_dir" "$cache"; then
  rm -rf "$peer_dir/ggml"  # configured from another checkout
fi
echo "== building ggml from $ggml_dir (commit $commit) into $peer_dir/ggml (log: $log)" >&2
if ! {
  cmake -S "$ggml_dir" -B "$peer_dir/ggml" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DGGML_CPU=ON -DGGML_OPENMP=ON -DGGML_LLAMAFILE=ON -DGGML_CPU_REPACK=ON -DGGML_BLAS=OFF \
    -DGGML_BACKEND_DL=OFF -DGGML_CUDA=OFF -DGGML_HIP=OFF -DGGML_MUSA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
    -DGGML_SYCL=OFF -DGGML_OPENCL=OFF -DGGML_WEBGPU=OFF -DGGML_RPC=OFF -DGGML_BUILD_TESTS=OFF \
    -DGGML_BUILD_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX="$peer_dir/install" &&
    cmake --build "$peer_dir/ggml" -j "$(nproc)" &&
    cmake --install "$peer_dir/ggml" --prefix "$peer_dir/install"
} > "$log" 2>&1; then
  tail -n 30 "$log" >&2
  die "building ggml from $ggml_dir failed (log: $log)"
fi
libs=()
for lib in ggml ggml-cpu ggml-base; do
  path=$(find "$peer_dir/install" -name "lib$lib.a" | head -n 1)
  [ -n "$path" ] || die "lib$lib.a not installed under $peer_dir/install (log: $log)"
  libs+=("$path")
done
peer=$peer_dir/ggml_moe_peer
"${CXX:-g++}" -std=c++20 -O2 -march=native -Wall -Wextra -Werror -I"$root" -I"$peer_dir/install/include" \
  "$root/bench/ggml_moe_peer.cc" -o "$peer" "${libs[@]}" -fopenmp -lpthread -ldl -lm ||
  die "compiling bench/ggml_moe_peer.cc against $peer_dir/install failed"

# The machine's limits first (bench/peak_bench.cc), as bench/layer_peer.sh does: remove peak.json to
# remeasure.
if [ ! -f "$out/peak.json" ] && [ -x "$build/bin/peak_bench" ]; then
  "$build/bin/peak_bench" --out "$out/peak.json"
fi

repack=()
[ "${GGML_REPACK:-1}" = 0 ] && repack=(--no-repack)
: > "$out/ggml_peer.jsonl"
rm -f "$out"/ggml_peer_ours_*.json
IFS=, read -ra shape_list <<< "$shapes"
IFS=, read -ra type_list <<< "$types"
for shape in "${shape_list[@]}"; do
  for type in "${type_list[@]}"; do
    echo "== $shape $type: ggml" >&2
    "$peer" --shape "$shape" --type "$type" --tokens "$tokens" --threads "$threads" --reps "$reps" \
      --min-time "$min_time" --ggml-commit "$commit" "${repack[@]}" >> "$out/ggml_peer.jsonl"
    # Our rows of the same shape and type, dropless as ggml's graph is: <shape>_dropless for f32 weights, else
    # <shape>_<type>_dropless (the deterministic preset's invariant kernels, capacity scope none).
    case $type in
      f32) name=${shape}_dropless ;;
      *) name=${shape}_${type}_dropless ;;
    esac
    filter="^BM_Layer/$name/T:(${tokens//,/|})/threads:(${threads//,/|})(/|$)"
    if ! "$build/bin/layer_bench" --benchmark_list_tests --benchmark_filter="$filter" | grep -q .; then
      echo "ggml_peer.sh: layer_bench has no rows BM_Layer/$name (ours left empty)" >&2
      continue
    fi
    echo "== $shape $type: ours (layer_bench BM_Layer/$name)" >&2
    LAYER_BENCH_STREAM=0 "$build/bin/layer_bench" --benchmark_filter="$filter" --benchmark_min_time="$min_time" \
      --benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true --benchmark_format=json \
      --benchmark_out="$out/ggml_peer_ours_${shape}_${type}.json" --benchmark_out_format=json > /dev/null
  done
done

peaks=()
[ -f "$out/peak.json" ] && peaks=(--peaks "$out/peak.json")
ours=("$out"/ggml_peer_ours_*.json)
[ -e "${ours[0]}" ] || ours=()
/usr/bin/python3 "$root/scripts/ggml_report.py" "$out/ggml_peer.jsonl" "${ours[@]}" "${peaks[@]}" \
  --markdown "$out/ggml_results.md"

#!/usr/bin/env bash
# Runs every benchmark program in BUILD/bin (default build) and writes JSON results to BUILD/bench/.
set -euo pipefail
build=${1:-build}
out="$build/bench"
mkdir -p "$out"
# The machine's limits first (a plain program with its own JSON): the tables below are read against them.
if [ -x "$build/bin/peak_bench" ]; then
  echo "== peak_bench"
  "$build/bin/peak_bench" --out "$out/peak.json"
fi
for exe in "$build"/bin/*_bench; do
  [ -x "$exe" ] || continue
  name=$(basename "$exe")
  [ "$name" = peak_bench ] && continue
  # A benchmark with a peer script (bench/<area>_peer.sh) is run by that script, side by side with its peer.
  [ -x "bench/${name%_bench}_peer.sh" ] && continue
  echo "== $name"
  "$exe" --benchmark_out="$out/$name.json" --benchmark_out_format=json
done
for script in bench/*_peer.sh; do
  [ -x "$script" ] || continue
  [ "$script" = bench/ggml_peer.sh ] && continue # needs a ggml checkout: below
  echo "== $script"
  "$script" "$build"
done
# llama.cpp's MoE graph on ggml beside our layer (docs/results.md section 3e): only with a ggml checkout.
if [ -n "${GGML_DIR:-}" ]; then
  echo "== bench/ggml_peer.sh $GGML_DIR"
  bench/ggml_peer.sh "$GGML_DIR" "$build"
else
  echo "== bench/ggml_peer.sh skipped: set GGML_DIR to a checkout of github.com/ggml-org/ggml outside" \
    "this tree (make bench GGML_DIR=/path/to/ggml; SHAPES, TYPES, TOKENS, THREADS narrow it:" \
    "bench/ggml_peer.sh)"
fi
# Planning's instruction counts (greedy vs stable vs causal), immune to the noise of a shared machine. Needs
# valgrind; the script builds its own non-AVX-512 tree ($build-callgrind), as valgrind cannot decode AVX-512.
if command -v valgrind >/dev/null; then
  echo "== bench/planner_instructions.sh"
  bench/planner_instructions.sh "$build-callgrind" | tee "$out/planner_instructions.txt"
fi
# moe-sim sweeps spread over the ranks of an MPI job, against one process (docs/results.md section 5e).
if command -v mpirun >/dev/null; then
  echo "== bench/sim_mpi.sh"
  bench/sim_mpi.sh "$build/bin/moe-sim" | tee "$out/sim_mpi.md"
fi
# The deployment model against DeepEP's published low-latency times, and its worked example (docs/results.md 5f).
echo "== bench/deepep_check.sh"
bench/deepep_check.sh "$build/bin/moe-sim" | tee "$out/deepep_check.md"
echo "== bench/deploy_example.sh"
bench/deploy_example.sh "$build/bin/moe-sim" | tee "$out/deploy_example.md"

#!/usr/bin/env bash
# Runs every libFuzzer target of build-fuzz/ (make fuzz) for FUZZ_SECONDS each, starting from its committed
# seeds (fuzz/corpus/<name>/) and a working corpus in build-fuzz/corpus/<name>/ that grows across runs.
# A crash, a sanitizer report, a leak, a timeout or an out-of-memory fails the run: its input is saved as
# build-fuzz/artifacts/<name>/crash-* (turn it into a regression test: docs/fuzzing.md). Prints one table
# row per target: executions, seconds, coverage (edges), result.
#   scripts/fuzz.sh BUILD_DIR [TARGET ...]      FUZZ_SECONDS (default 60), FUZZ_JOBS (default 1)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
shift || true
seconds=${FUZZ_SECONDS:-60}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for dir in fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
fi
# -rss_limit_mb / -malloc_limit_mb: an input that makes the parser allocate 2 GiB is a finding.
# -timeout: one input taking 10 s is a hang. ASan: leaks are reported; UBSan reports are fatal (the build
# uses -fno-sanitize-recover=all).
flags=(-max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 -print_final_stats=1
       -max_len=65536)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
printf '%-18s %12s %8s %8s  %s\n' target executions seconds edges result
for t in "${targets[@]}"; do
  bin=$build/bin/fuzz_$t
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (make fuzz builds it)" >&2
    failed=1
    continue
  fi
  corpus=$build/corpus/$t
  artifacts=$build/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  log=$build/logs/$t.log
  mkdir -p "$(dirname "$log")"
  start=$(date +%s)
  "$bin" "${flags[@]}" -artifact_prefix="$artifacts/" "$corpus" "fuzz/corpus/$t" > "$log" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  if [ $rc -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $rc; $log; input in $artifacts/)"
    failed=1
  fi
  printf '%-18s %12s %8s %8s  %s\n' "$t" "${execs:-?}" "$elapsed" "${edges:-?}" "$result"
  if [ $rc -ne 0 ]; then
    grep -m1 -A12 -E 'ERROR: |runtime error|fuzz: check failed|deadly signal|uncaught exception' "$log" >&2
  fi
done
exit $failed

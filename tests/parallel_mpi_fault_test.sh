#!/usr/bin/env bash
# Runs a fault-injection MPI job and asserts that it fails cleanly:
#   - the job exits with a non-zero status,
#   - within --max-seconds (measured here; a hang is killed and reported, not left to ctest),
#   - and its output matches every --expect extended regular expression.
# usage: parallel_mpi_fault_test.sh --max-seconds N --expect ERE [--expect ERE ...] -- command args...
set -u
max_seconds=""
expects=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --max-seconds) max_seconds="$2"; shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "parallel_mpi_fault_test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$max_seconds" || $# -eq 0 ]]; then
  echo "usage: parallel_mpi_fault_test.sh --max-seconds N --expect ERE ... -- command args..." >&2
  exit 2
fi

echo "running: $*"
start_ns=$(date +%s%N)
output=$(timeout --kill-after=5 "$((max_seconds + 10))" "$@" 2>&1)
status=$?
elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
echo "----- job output -----"
echo "$output"
echo "----------------------"
echo "exit status ${status} after ${elapsed_ms} ms (limit ${max_seconds} s)"

failed=0
if [[ $status -eq 0 ]]; then
  echo "FAIL: the job exited with status 0; a fault must end it with a non-zero status"
  failed=1
fi
if [[ $status -eq 124 || $status -eq 137 ]]; then
  echo "FAIL: the job hung and was killed by timeout(1)"
  failed=1
fi
if (( elapsed_ms > max_seconds * 1000 )); then
  echo "FAIL: the job took ${elapsed_ms} ms, more than ${max_seconds} s"
  failed=1
fi
for pattern in "${expects[@]}"; do
  if ! grep -Eq -- "$pattern" <<<"$output"; then
    echo "FAIL: the output does not match: $pattern"
    failed=1
  fi
done
if [[ $failed -eq 0 ]]; then echo "PASS"; fi
exit $failed

# shellcheck shell=bash
# Sourced by the benchmark scripts that time whole programs (bench/sim_throughput.sh, bench/sim_mpi.sh).
#
# best_wall REPEATS OUT CMD...: runs CMD REPEATS times, its stdout to OUT each time, and prints
# "WALL RSS_KIB": the best wall time in seconds and the peak resident memory of that best run (/usr/bin/time's
# %M: of CMD itself; for a launcher such as mpirun, of the launcher). Fails if any run fails.
best_wall() {
  local repeats=$1 out=$2 best="" rss="" t0 t1 s rss_file
  shift 2
  rss_file=$(mktemp)
  for _ in $(seq "$repeats"); do
    t0=$(date +%s.%N)
    /usr/bin/time -f "%M" -o "$rss_file" "$@" >"$out" || { rm -f "$rss_file"; return 1; }
    t1=$(date +%s.%N)
    s=$(echo "$t1 - $t0" | bc -l)
    if [ -z "$best" ] || [ "$(echo "$s < $best" | bc -l)" = 1 ]; then
      best=$s
      rss=$(tail -1 "$rss_file")
    fi
  done
  rm -f "$rss_file"
  echo "$best $rss"
}

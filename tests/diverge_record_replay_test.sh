#!/usr/bin/env bash
# `moe-sim diverge --record-logits DIR` writes the trained model's router logits on held-out text (layer<l>.npy +
# meta.csv) and `moe-sim replay` reads every layer's file as it is: each plan has one row per (token, choice)
# pair, the dropless plan keeps them all, and the summary's token count is the recorded one.
# Usage: tests/diverge_record_replay_test.sh MOE_SIM CORPUS_DIR OUT_DIR
set -euo pipefail
sim=$1 corpus=$2 out=$3
rm -rf "$out"
"$sim" diverge --record-logits "$out" --corpus "$corpus" --record-tokens 600 --record-window 256 >"$out.log"
grep -q "600 held-out tokens (3 windows" "$out.log"
test "$(wc -l <"$out/meta.csv")" -eq 601
test "$(sed -n 258p "$out/meta.csv")" = "1,0"  # row 256: the second window's first token
for l in 0 1 2 3; do
  "$sim" replay --logits "$out/layer$l.npy" --meta "$out/meta.csv" --top-k 2 --scope none \
    --out "$out/plan$l.csv" --json >"$out/replay$l.json"
  test "$(grep -c ',kept$' "$out/plan$l.csv")" -eq 1200
  grep -q '"tokens": *600' "$out/replay$l.json"
done
# A missing corpus is an error that names the script that builds it.
if "$sim" diverge --record-logits "$out/x" --corpus "$out/no-corpus" 2>"$out.err"; then
  echo "expected an error for a missing corpus" >&2
  exit 1
fi
grep -q "scripts/fetch-corpus.sh" "$out.err"
echo "record-logits -> replay: 4 layers x 600 tokens planned"

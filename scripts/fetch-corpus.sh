#!/usr/bin/env bash
# Builds the plain-text King James Version corpus of the trained model (models/kjv-moe, docs/training.md).
#
# Source: Debian's bible-kjv-text (the public-domain KJV in the compressed, indexed bible.data format) read out
# with the `bible` program of bible-kjv, both by package name through scripts/install-deps.sh. Nothing is
# downloaded by this script and the text is not committed.
#
# Output (in OUT, default data/kjv, ignored by git), one verse per line, "\n"-terminated, no references:
#   kjv-refs.txt   every verse as "<ref> <text>" exactly as `bible -f Gen1:1-Rev22:21` prints it (31102 lines)
#   train.txt      the verses of every book but the held-out ones, in canonical order
#   heldout.txt    the verses of the held-out books (Ruth, Ecclesiastes, Jonah, Acts, Philippians), in canonical
#                  order: 1466 verses, about 4.6% of the text; narrative, wisdom, prophecy, NT history, epistle
#   SHA256SUMS     the digests of the three files; the script fails if they differ from the ones below
#                  (bible-kjv 4.38), so a different package version cannot silently change the data.
#
# Usage: scripts/fetch-corpus.sh [OUT]
set -euo pipefail

out="${1:-data/kjv}"
if ! command -v bible >/dev/null 2>&1; then
  echo "fetch-corpus: 'bible' not found: install the packages bible-kjv and bible-kjv-text" \
    "(apt install bible-kjv bible-kjv-text; in a checkout, scripts/install-deps.sh does)" >&2
  exit 1
fi
mkdir -p "$out"
export LC_ALL=C
# -f turns pretty-printing off: one verse per line, preceded by its reference ("Ge1:1 In the beginning ...").
bible -f "Gen1:1-Rev22:21" </dev/null >"$out/kjv-refs.txt.tmp"
mv "$out/kjv-refs.txt.tmp" "$out/kjv-refs.txt"

# Held-out books, by the reference prefixes `bible` prints: Ruth, Eccl(esiastes), Jonah, Acts, Phi(lippians).
# (Philemon is "Phmn", so "Phi" followed by a digit is Philippians only.)
heldout_re='^(Ruth|Eccl|Jonah|Acts|Phi)[0-9]+:[0-9]+ '
grep -E "$heldout_re" "$out/kjv-refs.txt" | sed -E 's/^[^ ]+ //' >"$out/heldout.txt"
grep -vE "$heldout_re" "$out/kjv-refs.txt" | sed -E 's/^[^ ]+ //' >"$out/train.txt"

(cd "$out" && sha256sum kjv-refs.txt train.txt heldout.txt >SHA256SUMS)
if ! (cd "$out" && sha256sum --quiet -c - <<'SUMS'
cd45f0c9cedab8e4439bd6486c8952c77cc8b0ecc5d1f6ae3513f2039f47229d  kjv-refs.txt
b17c588eec08e6e83f1c48252ac123cd98e3dbc3083cc805794700f0647801df  train.txt
136dacb4f23c773a4982b6c801559848161fc4ed943a499a3d904b54dcdb81e8  heldout.txt
SUMS
); then
  echo "fetch-corpus: the text in $out differs from bible-kjv 4.38's (sha256 mismatch above)" >&2
  exit 1
fi
echo "fetch-corpus: $(wc -l <"$out/train.txt") train verses, $(wc -l <"$out/heldout.txt") held-out verses in $out"

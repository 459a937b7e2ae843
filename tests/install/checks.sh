#!/usr/bin/env bash
# shellcheck disable=SC2015 # `check && pass ... || fail ...`: pass only echoes, it cannot fail
# The install test's checks (tests/install_test.sh runs them): in a private mount namespace where the source and
# build trees are empty file systems, from the empty directory $TMP/work, with PATH=$P/bin:/usr/bin:/bin and an
# empty $HOME and $XDG_CACHE_HOME. Environment: TMP, SRC, BUILD, P (the prefix), CC, PY, MPIRUN (the launcher and
# its options, words without spaces; empty: no MPI build). Every check runs; the exit status is 1 if any failed.
set -uo pipefail
failures=0
fail() {
  echo "FAIL: $1"
  [ $# -gt 1 ] && sed 's/^/    /' "${@:2}" | head -30
  failures=$((failures + 1))
}
pass() { echo "ok: $*"; }
# The two files are equal apart from the lab's wall-time line ("(0.5 s)"), the one part of its report that is
# not a function of its inputs.
same_untimed() { cmp -s <(grep -vE '^\([0-9.]+ s\)$' "$1") <(grep -vE '^\([0-9.]+ s\)$' "$2"); }
S=$TMP/src

# --- the environment ------------------------------------------------------------------------------------------
# (The build tree, when inside the source tree, is gone with it.)
if [ -z "$(ls -A "$SRC")" ] && { [ ! -e "$BUILD" ] || [ -z "$(ls -A "$BUILD")" ]; }; then
  pass "source and build trees hidden ($SRC: empty; $BUILD: empty or gone)"
else
  fail "the source or build tree is still visible"
fi
[ -z "$(ls -A .)" ] && pass "working directory $PWD is empty" || fail "working directory not empty"
[ "$(command -v moe-sim)" = "$P/bin/moe-sim" ] && pass "moe-sim on PATH from the prefix" || fail "moe-sim not from $P"
# Nothing installed names the source or build tree: run paths, CMake and pkg-config files, scripts.
leaks=$(grep -rlsF -e "$SRC" -e "$BUILD" "$P/lib/cmake" "$P"/lib*/pkgconfig "$P/share" "$P/lib/python3" \
  --include='*.cmake' --include='*.pc' --include='*.sh' --include='*.py' --include='*.toml' --include='*.json')
for f in "$P"/bin/* "$P"/libexec/moe/* "$P"/lib*/libmoe.so.*.*.* "$P"/lib/python3/dist-packages/moe/*.so; do
  readelf -d "$f" | grep -E 'R(UN)?PATH' | grep -qF -e "$SRC" -e "$BUILD" && leaks+=" $f(run path)"
done
[ -z "$leaks" ] && pass "no installed file names the source or build tree" || fail "tree paths in: $leaks"

# --- moe-sim run, sweep (a shipped scenario, by path and by name; under mpirun) --------------------------------
moe-sim run --requests 8 --json --quiet >run.json 2>err &&
  "$PY" -c "import json; j = json.load(open('run.json')); assert j['requests'] == 8 and j['pairs'] > 0, j" 2>>err &&
  pass "moe-sim run --requests 8 --json" || fail "moe-sim run" err
scenario=$P/share/moe/scenarios/serving.toml
moe-sim sweep --scenario "$scenario" --capacity-factors 1,2 --quiet >sweep.txt 2>err &&
  grep -q "^mode  *cf  *drop_rate" sweep.txt && grep -qE "^greedy +1 +0\.[0-9]+ " sweep.txt &&
  grep -qE "^stable +2 +0\.[0-9]+ " sweep.txt &&
  pass "moe-sim sweep --scenario $scenario --capacity-factors 1,2 ($(grep -c '^[a-z-]* *[12] ' sweep.txt) points)" ||
  fail "moe-sim sweep --scenario $scenario" err sweep.txt
moe-sim sweep --scenario serving --capacity-factors 1,2 --quiet >by_name.txt 2>err && cmp -s sweep.txt by_name.txt &&
  pass "moe-sim sweep --scenario serving: the shipped scenario, the same output" || fail "--scenario serving" err
if [ -n "$MPIRUN" ]; then
  # shellcheck disable=SC2086 # MPIRUN is the launcher and its options, split on spaces
  $MPIRUN -np 2 moe-sim sweep --scenario serving --capacity-factors 1,2 --quiet >mpi.txt 2>err &&
    cmp -s sweep.txt mpi.txt && pass "mpirun -np 2 moe-sim sweep (libexec/moe/moe-sim-mpi): the same bytes" ||
    fail "mpirun -np 2 moe-sim sweep" err mpi.txt
else
  echo "note: no MPI in this build: mpirun not checked"
fi

# --- moe-sim diverge: the shipped model; the held-out text prepared at first use into the empty cache ---------
if command -v bible >/dev/null; then
  moe-sim diverge --trials 6 --modes greedy,stable-varied --kernels invariant --no-sweep --threads 2 -q \
    >div.txt 2>err
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q "^model: models/kjv-moe$" div.txt && grep -q "^config  *cf distinct" div.txt &&
    grep -qE "^greedy/invariant +1\.00 +[1-6]/6 " div.txt && grep -qE "^stable/invariant/varied +1\.00 +1/6 " div.txt &&
    grep -qF "preparing the held-out text once, into $XDG_CACHE_HOME/moe/kjv" err &&
    [ -s "$XDG_CACHE_HOME/moe/kjv/heldout.txt" ]; then
    pass "moe-sim diverge: the lab's table; the held-out text prepared into $XDG_CACHE_HOME/moe/kjv"
  else
    fail "moe-sim diverge (exit $rc)" err div.txt
  fi
  moe-sim diverge --trials 2 --modes stable --kernels invariant --no-sweep -q >div2.txt 2>err &&
    ! grep -q preparing err && grep -qE "^stable/invariant +1\.00 +1/2 " div2.txt &&
    pass "moe-sim diverge again: the cached text, nothing prepared" || fail "moe-sim diverge again" err div2.txt
  moe-diverge --trials 2 --modes stable --kernels invariant --no-sweep -q >div3.txt 2>err && same_untimed div2.txt div3.txt &&
    pass "moe-diverge (the lab alone): the same output" || fail "moe-diverge" err div3.txt
else
  # Without bible-kjv the one command that prepares the text must be named.
  if moe-sim diverge --trials 2 --no-sweep -q >div.txt 2>err; then
    fail "moe-sim diverge ran without the held-out text" div.txt
  elif grep -qF "run \`bash $P/share/moe/scripts/fetch-corpus.sh $XDG_CACHE_HOME/moe/kjv\`" err; then
    pass "moe-sim diverge without bible-kjv names the one command that prepares the text"
  else
    fail "moe-sim diverge without bible-kjv" err
  fi
fi

# --- the shared library: SONAME, links, exports -----------------------------------------------------------------
libdir=$(realpath "$(PKG_CONFIG_PATH=$(echo "$P"/lib*/pkgconfig) pkg-config --variable=libdir moe-c)")
soname=$(readelf -d "$libdir/libmoe.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
lib=$libdir/$soname
if [[ "$soname" =~ ^libmoe\.so\.[0-9]+\.[0-9]+$ ]] && [ "$(readlink "$libdir/libmoe.so")" = "$soname" ] &&
  [[ "$(readlink "$lib")" =~ ^$soname\.[0-9]+$ ]] && [ -f "$(readlink -f "$lib")" ]; then
  pass "libmoe.so -> $soname -> $(readlink "$lib") (SONAME $soname)"
else
  fail "libmoe.so's SONAME or links ($soname)"
fi
header=$P/include/moe/moe/api/moe_c.h
# Every defined dynamic symbol but the version node (MOE_0.1, type A).
nm -D --defined-only "$lib" | awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' | sort >exported.txt
grep -oE '\bmoe_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u >declared.txt
[ -s declared.txt ] && cmp -s exported.txt declared.txt &&
  pass "libmoe exports exactly moe_c.h's $(wc -l <declared.txt) functions" ||
  { diff declared.txt exported.txt >exports.diff; fail "exports differ from moe_c.h (< header, > library)" exports.diff; }

# --- the C API through the shared library: linked with -lmoe (pkg-config moe-c) by the C compiler; dlopen; ctypes
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046 # pkg-config's words
"$CC" -std=c99 -O2 -Wall -Wextra -Werror "$S/consumer.c" -o consumer $(pkg-config --cflags --libs moe-c) -lm -Wl,-rpath,"$libdir" 2>err &&
  ./consumer >c.txt 2>>err && readelf -d consumer | grep -qF "[$soname]" &&
  ! readelf -d consumer | grep -q "libstdc++" &&
  pass "C program, cc \$(pkg-config --cflags --libs moe-c): NEEDED $soname, no libstdc++; $(head -1 c.txt)" ||
  fail "C program linked with pkg-config moe-c" err c.txt
# shellcheck disable=SC2046
"$CC" -std=c99 -O2 -Wall -Wextra -Werror $(pkg-config --cflags moe-c) "$S/dlopen_c_api.c" -o dlopen_c_api -ldl -lm 2>err &&
  ./dlopen_c_api "$lib" >dl.txt 2>>err && [ "$(head -1 dl.txt)" = "$(head -1 c.txt)" ] &&
  pass "C program, dlopen(\"$lib\"): the same output" || fail "dlopen" err dl.txt c.txt
"$PY" "$S/ctypes_c_api.py" "$lib" >ctypes.txt 2>err && [ "$(cat ctypes.txt)" = "$(head -1 c.txt)" ] &&
  pass "Python ctypes.CDLL(\"$lib\"): the same output" || fail "ctypes" err ctypes.txt

# --- import moe from the prefix: the shipped model's first MoE layer, a forward pass ------------------------------
if [ -d "$P/lib/python3/dist-packages/moe" ]; then
  PYTHONPATH=$P/lib/python3/dist-packages "$PY" "$S/import_moe.py" "$P" >py.txt 2>err &&
    pass "import moe: $(cat py.txt)" || fail "import moe" err py.txt
else
  echo "note: no Python module in this build: import moe not checked"
fi
echo "checks done in ${SECONDS} s, $failures failed"
exit $((failures > 0))

#!/usr/bin/env bash
# A user's first hour outside the source tree: `cmake --install` of the build into a temporary prefix, then - with
# the source and build trees hidden (a private mount namespace lays empty tmpfs file systems over them) and from
# an empty directory, with an empty home and cache - what the user runs (tests/install/checks.sh): moe-sim run,
# sweep (a shipped scenario; and under mpirun), diverge (the shipped model; the held-out text prepared into the
# cache), a C program linked with -lmoe through pkg-config, the C API loaded with dlopen and with ctypes, and
# `import moe` doing a forward pass of the shipped model.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR CC PYTHON [MPIRUN [MPIRUN options...]]  (no MPIRUN: no MPI build)
# Exit status 77 (skipped, with the reason) when no private mount namespace can be made: unshare -m is not
# permitted as root nor in a user namespace.
set -uo pipefail
SRC=$(realpath "${1:?usage: install_test.sh SOURCE_DIR BUILD_DIR CC PYTHON [MPIRUN...]}")
BUILD=$(realpath "${2:?BUILD_DIR}")
CC=${3:?CC}
PY=${4:?PYTHON}
shift 4
TMP=$(mktemp -d /tmp/moe-install-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
P=$TMP/prefix
case "$TMP" in "$SRC"/* | "$BUILD"/*) echo "FAIL: $TMP is inside a tree the test hides"; exit 1 ;; esac

# The mount namespace: as root, or else as root of a new user namespace (an unprivileged CI runner).
mkdir -p "$TMP/probe"
UNSHARE=()
for u in "unshare --mount --propagation private" "unshare --user --map-root-user --mount --propagation private"; do
  if $u mount -t tmpfs moe-probe "$TMP/probe" 2>/dev/null; then
    read -ra UNSHARE <<<"$u"
    break
  fi
done
if [ ${#UNSHARE[@]} -eq 0 ]; then
  echo "SKIP: no private mount namespace (unshare -m, also in a user namespace, is not permitted here), so the"
  echo "      source and build trees ($SRC, $BUILD) cannot be hidden from the installed programs"
  exit 77
fi

echo "== cmake --install $BUILD --prefix $P"
cmake --install "$BUILD" --prefix "$P" >"$TMP/install.log" || { cat "$TMP/install.log"; exit 1; }
# What the checks need from the source tree, copied out before it is hidden.
mkdir -p "$TMP/src" "$TMP/work" "$TMP/home"
cp "$SRC/tests/install/checks.sh" "$SRC/tests/install/dlopen_c_api.c" "$SRC/tests/install/ctypes_c_api.py" \
  "$SRC/tests/install/import_moe.py" "$SRC/tests/consumer/consumer.c" "$TMP/src/" || exit 1

echo "== hiding $SRC and $BUILD (${UNSHARE[*]}), running from an empty directory"
# shellcheck disable=SC2016 # expanded by the inner shell
env -i PATH="$P/bin:/usr/local/bin:/usr/bin:/bin" HOME="$TMP/home" XDG_CACHE_HOME="$TMP/cache" LC_ALL=C \
  TMP="$TMP" SRC="$SRC" BUILD="$BUILD" P="$P" CC="$CC" PY="$PY" MPIRUN="$*" \
  "${UNSHARE[@]}" bash -c '
    mount -t tmpfs moe-hidden-build "$BUILD" && mount -t tmpfs moe-hidden-source "$SRC" || exit 3
    cd "$TMP/work" && exec bash "$TMP/src/checks.sh"'
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "install test FAILED (exit $rc)"
  exit 1
fi
echo "install test passed"

#!/usr/bin/env bash
# Installs what the project needs on Debian 12 (apt, as root). Idempotent and fast when all is present:
# it asks dpkg first and calls apt only for the missing packages.
set -euo pipefail

packages=(
  build-essential cmake make pkg-config git
  libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev
  libcli11-dev nlohmann-json3-dev libtoml11-dev libxxhash-dev
  libopenmpi-dev openmpi-bin
  pybind11-dev python3-dev python3-numpy python3-torch python3-pybind11
  libopenblas0-pthread
  clang-format
  clang-14 libclang-rt-14-dev
  valgrind
  librsvg2-bin  # rsvg-convert: the SVG test renders every plot the project writes
  bible-kjv bible-kjv-text
  dpkg-dev file  # make package: CPack's DEB generator runs dpkg-shlibdeps and file
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Fetches the Debian packages the GPU build needs and a bare GPU machine lacks (third-party headers, GTest,
# Google Benchmark, xxhash, pybind11) into gpu-bundle/ of the checkout (ignored by git; a few MB), by package
# name with apt-get download, at the version installed here (the one this project is built and tested with).
# scripts/gpu-check.sh unpacks them into a local prefix there (scripts/gpu_bundle.py, no dpkg needed) and
# configures with that prefix only. Idempotent: a package whose .deb is present with the manifest's checksum is
# not fetched again.
#
#   scripts/gpu-bundle.sh [DIR]      DIR defaults to gpu-bundle/ in the checkout
#
# Writes DIR/*.deb and DIR/manifest.txt ("package version file sha256" per line).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(realpath -m "${1:-gpu-bundle}")

# What the CUDA layer, its tests and benchmarks need beyond the CUDA toolkit, CMake, ninja, a C++ compiler and
# Python (which the GPU machine has). Header-only: Eigen, nlohmann_json, pybind11; static: GTest (gmock too, which
# GTest's package config loads when present); shared: xxhash, Google Benchmark (runtime package with it).
packages=(
  libeigen3-dev
  nlohmann-json3-dev
  libxxhash-dev libxxhash0
  libgtest-dev libgmock-dev
  libbenchmark-dev libbenchmark1debian
  pybind11-dev
)

mkdir -p "$dir"
manifest="$dir/manifest.txt"
new_manifest=$(mktemp)
trap 'rm -f "$new_manifest"' EXIT
for p in "${packages[@]}"; do
  version=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
  if [[ -z "$version" ]]; then
    version=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')
  fi
  if [[ -z "$version" || "$version" == "(none)" ]]; then
    echo "gpu-bundle: package $p has no installable version (apt-get update?)" >&2
    exit 1
  fi
  # The file apt-get download writes: name_version_arch.deb with ':' (epoch) escaped as %3a.
  existing=$(ls "$dir/${p}_${version//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
  if [[ -n "$existing" ]] && grep -q " $(sha256sum "$existing" | cut -d' ' -f1)\$" "$manifest" 2>/dev/null; then
    file=$existing
  else
    fetch() { (cd "$dir" && apt-get download -q "$p=$version" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true); }
    fetch
    file=$(ls "$dir/${p}_${version//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
    if [[ -z "$file" && -z "${updated:-}" ]]; then  # no package lists yet (a fresh machine): update once, retry
      apt-get update -qq && updated=1 && fetch
      file=$(ls "$dir/${p}_${version//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
    fi
    if [[ -z "$file" ]]; then
      echo "gpu-bundle: apt-get download $p=$version wrote no .deb into $dir" >&2
      exit 1
    fi
  fi
  echo "$p $version $(basename "$file") $(sha256sum "$file" | cut -d' ' -f1)" >> "$new_manifest"
done
mv "$new_manifest" "$manifest"
trap - EXIT
echo "gpu-bundle: $(wc -l < "$manifest") packages, $(du -sh "$dir" | cut -f1) in $dir"

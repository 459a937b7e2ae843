#!/usr/bin/env python3
"""Unpacks the GPU bundle (scripts/gpu-bundle.sh) into a local prefix and prints CMake arguments that point
the build at that prefix only. Needs nothing but Python's standard library (no dpkg, ar or xz on the GPU
machine): a .deb is an ar archive whose data.tar.{xz,gz,zst?} member holds the files.

  gpu_bundle.py unpack BUNDLE_DIR PREFIX      verify checksums (manifest.txt), extract every .deb into PREFIX
  gpu_bundle.py cmake-args PREFIX             one -D argument per line: each package's config dir, xxhash

Exit status 1 with a message naming the problem (missing bundle, bad checksum, unknown compression, a
package's CMake files not found in PREFIX)."""

import hashlib
import io
import os
import sys
import tarfile


def fail(message):
    sys.stderr.write("gpu_bundle: " + message + "\n")
    sys.exit(1)


def ar_members(data, name):
    """(member name, bytes) of an ar archive (the common format: 60-byte headers, 2-byte alignment)."""
    if not data.startswith(b"!<arch>\n"):
        fail(name + " is not a .deb (no ar magic)")
    at = 8
    while at + 60 <= len(data):
        header = data[at:at + 60]
        member = header[0:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        yield member, data[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)


def read_manifest(bundle):
    path = os.path.join(bundle, "manifest.txt")
    if not os.path.isfile(path):
        fail("no " + path + ": run scripts/gpu-bundle.sh on a Debian 12 machine with apt, and carry "
             "gpu-bundle/ along with the checkout")
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4:
                rows.append(parts)
    if not rows:
        fail(path + " lists no packages")
    return rows


def unpack(bundle, prefix):
    rows = read_manifest(bundle)
    stamp = os.path.join(prefix, ".bundle-manifest")
    with open(os.path.join(bundle, "manifest.txt"), "rb") as f:
        manifest_bytes = f.read()
    if os.path.isfile(stamp):
        with open(stamp, "rb") as f:
            if f.read() == manifest_bytes:
                print("gpu_bundle: %s already holds these %d packages" % (prefix, len(rows)))
                return
    os.makedirs(prefix, exist_ok=True)
    for package, version, file, sha in rows:
        path = os.path.join(bundle, file)
        if not os.path.isfile(path):
            fail("%s (%s %s) is listed in the manifest but missing" % (path, package, version))
        with open(path, "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != sha:
            fail("%s does not match its checksum in the manifest" % path)
        found = False
        for member, payload in ar_members(data, path):
            if not member.startswith("data.tar"):
                continue
            found = True
            if member.endswith(".zst"):
                fail("%s: data.tar.zst needs zstd, which Python's tarfile cannot read" % path)
            with tarfile.open(fileobj=io.BytesIO(payload), mode="r:*") as tar:
                safe = [m for m in tar.getmembers() if not os.path.isabs(m.name) and ".." not in m.name.split("/")]
                if hasattr(tarfile, "fully_trusted_filter"):  # Python >= 3.12: say so, no warning
                    tar.extractall(prefix, members=safe, filter="fully_trusted")
                else:
                    tar.extractall(prefix, members=safe)
        if not found:
            fail("%s has no data.tar member" % path)
    with open(stamp, "wb") as f:
        f.write(manifest_bytes)
    print("gpu_bundle: unpacked %d packages into %s" % (len(rows), prefix))


def find_file(prefix, name, must_contain=""):
    for root, _, files in os.walk(prefix):
        if name in files and must_contain in root:
            return os.path.join(root, name)
    return None


def cmake_args(prefix):
    prefix = os.path.abspath(prefix)
    args = []
    configs = [("Eigen3", "Eigen3Config.cmake", True), ("nlohmann_json", "nlohmann_jsonConfig.cmake", True),
               ("GTest", "GTestConfig.cmake", True), ("benchmark", "benchmarkConfig.cmake", False),
               ("pybind11", "pybind11Config.cmake", False)]
    for package, config, required in configs:
        path = find_file(prefix, config)
        if path is None:
            if required:
                fail("%s not found under %s (is the bundle unpacked?)" % (config, prefix))
            continue
        args.append("-D%s_DIR=%s" % (package, os.path.dirname(path)))
    header = find_file(prefix, "xxhash.h")
    library = find_file(prefix, "libxxhash.so")
    if header is None or library is None:
        fail("xxhash.h or libxxhash.so not found under %s" % prefix)
    args.append("-DMOE_XXHASH_INCLUDE_DIR=%s" % os.path.dirname(header))
    args.append("-DMOE_XXHASH_LIBRARY=%s" % library)
    print("\n".join(args))


def main(argv):
    if len(argv) == 4 and argv[1] == "unpack":
        unpack(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "cmake-args":
        cmake_args(argv[2])
    else:
        fail("usage: gpu_bundle.py unpack BUNDLE_DIR PREFIX | cmake-args PREFIX")


if __name__ == "__main__":
    main(sys.argv)

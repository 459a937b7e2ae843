#!/usr/bin/python3
"""Cross-check moe/io against files written by Python.

Writes tiny Mixtral-named layers as .safetensors by hand (the `safetensors` package is not assumed), in f32,
bf16 and f16, plus raw dumps of the exact bytes each loaded matrix must hold, then runs the C++ checker
(io_pycheck, argv[1]) on a manifest. bf16 references come from torch (torch.bfloat16, round to nearest even)
when torch is importable, and from an independent numpy implementation otherwise; when both exist they are
compared too. Bit equality throughout.

Usage: /usr/bin/python3 io_python_safetensors_test.py path/to/io_pycheck
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
except ImportError:  # numpy-only path
    torch = None

HIDDEN, FF, EXPERTS, LAYER = 8, 6, 3, 1


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype string, shape, raw bytes). Laid out in the given order, header padded to 8."""
    header, offset, payload = {"__metadata__": {"format": "pt"}}, 0, []
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        payload.append(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in payload:
            f.write(raw)


def bf16_rne_numpy(x):
    """float32 array -> uint16 bf16 bits, round to nearest even (NaN not expected here)."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype("<u2")


def bf16_bits(x):
    ref = bf16_rne_numpy(x)
    if torch is not None:
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)
        via_torch = t.view(torch.int16).numpy().view("<u2")
        assert np.array_equal(via_torch, ref), "numpy RNE disagrees with torch.bfloat16"
    return ref


def bf16_to_f32(bits):
    return (bits.astype("<u4") << 16).view("<f4")


def layer_values(rng):
    """name -> (kind, expert, proj, float32 array) for one Mixtral layer, with awkward values mixed in."""
    def mat(rows, cols):
        m = rng.standard_normal((rows, cols)).astype(np.float32) / np.float32(np.sqrt(cols))
        flat = m.reshape(-1)
        specials = np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 3.0e38, -1.0e-40, 65504.0, 6.0e-8],
                            dtype=np.float32)  # ties for bf16, subnormal, f16 limits
        flat[: len(specials)] = specials
        return m
    out = {}
    p = f"model.layers.{LAYER}.block_sparse_moe."
    out[p + "gate.weight"] = ("router", None, None, mat(EXPERTS, HIDDEN))
    for e in range(EXPERTS):
        out[p + f"experts.{e}.w1.weight"] = ("expert", e, "w1", mat(FF, HIDDEN))
        out[p + f"experts.{e}.w3.weight"] = ("expert", e, "w3", mat(FF, HIDDEN))
        out[p + f"experts.{e}.w2.weight"] = ("expert", e, "w2", mat(HIDDEN, FF))
    return out


def main():
    checker = sys.argv[1]
    rng = np.random.default_rng(2024)
    values = layer_values(rng)
    with tempfile.TemporaryDirectory(prefix="moe_io_py_") as tmp:
        manifests = []

        def dump(name, tag, raw):
            path = os.path.join(tmp, f"{tag}.{name}.bin")
            with open(path, "wb") as f:
                f.write(raw)
            return path

        def case(tag, storage, expect_storage, expected):
            """expected: name -> (dtype string, raw bytes)."""
            tensors = []
            for name, (kind, e, proj, _) in values.items():
                dtype, raw = expected[name]
                entry = {"name": name, "kind": kind, "dtype": dtype, "raw": dump(name, tag, raw)}
                if kind == "expert":
                    entry.update(expert=e, proj=proj)
                tensors.append(entry)
            return {"storage": storage, "expect_storage": expect_storage, "tensors": tensors}

        def manifest(file, cases):
            return {"file": file, "arch": "mixtral", "layer": LAYER,
                    "shape": {"hidden": HIDDEN, "expert_ff": FF, "num_experts": EXPERTS}, "cases": cases}

        f32 = {n: v[3].astype("<f4") for n, v in values.items()}
        bf = {n: bf16_bits(a) for n, a in f32.items()}

        # 1. f32 file: native view; bf16 storage (router gate stays f32).
        path = os.path.join(tmp, "f32.safetensors")
        write_safetensors(path, [(n, "F32", a.shape, a.tobytes()) for n, a in f32.items()])
        router = lambda n: values[n][0] == "router"
        manifests.append(manifest(path, [
            case("f32_native", None, "f32", {n: ("f32", a.tobytes()) for n, a in f32.items()}),
            case("f32_as_bf16", "bf16", "bf16",
                 {n: ("f32", f32[n].tobytes()) if router(n) else ("bf16", bf[n].tobytes()) for n in f32}),
        ]))

        # 2. bf16 file (torch writes it when available): native view; f32 storage is exact widening.
        path = os.path.join(tmp, "bf16.safetensors")
        if torch is not None:
            raws = {n: torch.from_numpy(f32[n]).to(torch.bfloat16).view(torch.int16).numpy().tobytes() for n in f32}
        else:
            raws = {n: bf[n].tobytes() for n in f32}
        write_safetensors(path, [(n, "BF16", f32[n].shape, raws[n]) for n in f32])
        widened = {n: bf16_to_f32(bf[n]) for n in f32}
        if torch is not None:
            for n in f32:
                t = torch.from_numpy(f32[n]).to(torch.bfloat16).float().numpy()
                assert np.array_equal(t.view("<u4"), widened[n].view("<u4"))
        manifests.append(manifest(path, [
            case("bf16_native", None, "bf16",
                 {n: ("f32", widened[n].tobytes()) if router(n) else ("bf16", bf[n].tobytes()) for n in f32}),
            case("bf16_as_f32", "f32", "f32", {n: ("f32", widened[n].tobytes()) for n in f32}),
        ]))

        # 3. f16 file (numpy float16; 3e38 becomes inf): loads as f32 by default, exact widening.
        path = os.path.join(tmp, "f16.safetensors")
        with np.errstate(over="ignore"):
            halves = {n: f32[n].astype("<f2") for n in f32}
        write_safetensors(path, [(n, "F16", h.shape, h.tobytes()) for n, h in halves.items()])
        half_f32 = {n: h.astype("<f4") for n, h in halves.items()}
        half_bf = {n: bf16_rne_numpy(half_f32[n]) for n in f32}
        manifests.append(manifest(path, [
            case("f16_native", None, "f32", {n: ("f32", half_f32[n].tobytes()) for n in f32}),
            case("f16_as_bf16", "bf16", "bf16",
                 {n: ("f32", half_f32[n].tobytes()) if router(n) else ("bf16", half_bf[n].tobytes()) for n in f32}),
        ]))

        failures = 0
        for i, m in enumerate(manifests):
            mpath = os.path.join(tmp, f"manifest{i}.json")
            with open(mpath, "w") as f:
                json.dump(m, f)
            r = subprocess.run([checker, mpath], capture_output=True, text=True)
            sys.stdout.write(f"{os.path.basename(m['file'])}: {r.stdout}")
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                failures += 1
        print(f"torch: {'yes ' + torch.__version__ if torch is not None else 'no (numpy-only bf16 reference)'}")
        if failures:
            print(f"FAILED: {failures} of {len(manifests)} files")
            return 1
        print("OK")
        return 0


if __name__ == "__main__":
    sys.exit(main())

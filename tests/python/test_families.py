"""Every MoE family from a checkpoint directory alone, through Python: moe.Layer.from_pretrained on the checkpoints
tests/tools/write_family_checkpoints writes (each family's published layout: config.json keys, tensor names,
bf16 / f32 / FP8 / MXFP4, sharded), against the float64 reference of the family's MoE block it writes next to
them (dropless; rel. error <= 1e-5 per row); the same through moe.torch_module.MoEBlock built from the layer's
tensors and the config.json (hf_config=), for the unquantized checkpoints; dense layers and unsupported keys
raise ValueError naming them. The directory comes from MOE_FAMILY_DIR (ctest's family_checkpoints_setup)."""
import json
import os
import struct
import unittest

import numpy as np
import torch

import moe
from moe.torch_module import MoEBlock

FAMILY_DIR = os.environ.get("MOE_FAMILY_DIR", "")


def families():
    with open(os.path.join(FAMILY_DIR, "families.txt")) as f:
        for line in f:
            name, model_type, quant, layer, tokens, hidden, tolerance = line.split()
            yield name, model_type, quant, int(layer), int(tokens), int(hidden), float(tolerance)


def read_safetensors(path):
    """{name: torch tensor} of a safetensors file (F32, BF16, U8, F8_E4M3 as uint8), read with the format's
    own definition: an 8-byte header length, the JSON header, the data area."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = np.frombuffer(data[base + begin:base + end], dtype=np.uint8)
        if info["dtype"] == "F32":
            t = torch.from_numpy(raw.view(np.float32).copy())
        elif info["dtype"] == "BF16":
            t = torch.from_numpy(raw.view(np.int16).copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(raw.copy())
        out[name] = t.reshape(info["shape"])
    return out


def tensors(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(directory, f)))
    return out


def worst_row_error(y, ref, ties):
    y = np.asarray(y, dtype=np.float64)
    worst = 0.0
    for t in range(y.shape[0]):
        if ties[t]:
            continue
        worst = max(worst, np.linalg.norm(y[t] - ref[t]) / np.linalg.norm(ref[t]))
    return worst


@unittest.skipUnless(FAMILY_DIR and os.path.isdir(FAMILY_DIR),
                     "MOE_FAMILY_DIR is not set (ctest's family_checkpoints_setup writes it)")
class FamiliesTest(unittest.TestCase):
    def load(self, name, tokens, hidden):
        d = os.path.join(FAMILY_DIR, name)
        x = np.fromfile(os.path.join(d, "x.bin"), dtype=np.float32).reshape(tokens, hidden)
        y_stored = np.fromfile(os.path.join(d, "y_stored.bin"), dtype=np.float64).reshape(tokens, hidden)
        y_exact = np.fromfile(os.path.join(d, "y_exact.bin"), dtype=np.float64).reshape(tokens, hidden)
        ties = np.fromfile(os.path.join(d, "ties.bin"), dtype=np.uint8)
        ids = (np.arange(tokens) % 6).astype(np.uint64)
        pos = (np.arange(tokens) // 6).astype(np.uint32)
        return d, x, y_stored, y_exact, ties, ids, pos

    def test_from_pretrained_matches_the_family_block(self):
        ran = 0
        for name, model_type, quant, layer, tokens, hidden, tolerance in families():
            with self.subTest(family=name):
                d, x, y_stored, y_exact, ties, ids, pos = self.load(name, tokens, hidden)
                cfg = moe._moe.pretrained_config(d)
                self.assertIn(layer, cfg["moe_layers"])
                # None: a quantized file as stored (its kernels' activation rule: families.txt's tolerance)
                for storage, ref, bound in ((None, y_stored, tolerance), ("f32", y_exact, 1e-5)):
                    for preset in ("deterministic", "greedy"):
                        layer_obj = moe.Layer.from_pretrained(d, layer=layer, storage=storage, preset=preset,
                                                              scope="none")
                        err = worst_row_error(layer_obj.forward(x, ids, pos), ref, ties)
                        self.assertLessEqual(err, bound, "%s storage %s %s: %g" % (name, storage, preset, err))
                print("\n  %s (%s, %s): moe.Layer.from_pretrained within %g (as stored) and 1e-5 (f32) of the "
                      "family's float64 block" % (name, model_type, quant, tolerance), end="")
                ran += 1
        self.assertEqual(ran, 19)

    def test_dense_layers_and_bad_keys_are_named(self):
        d = os.path.join(FAMILY_DIR, "deepseek_v2_bf16")
        with self.assertRaises(ValueError) as cm:
            moe.Layer.from_pretrained(d, layer=0)
        self.assertIn("is a dense MLP layer, not an MoE layer", str(cm.exception))
        self.assertIn("the MoE layers of this deepseek_v2 checkpoint are 1-3", str(cm.exception))
        cfg = moe._moe.pretrained_config(d)
        self.assertEqual((cfg["group_score"], cfg["num_groups"], cfg["topk_groups"]), ("max", 4, 2))
        self.assertAlmostEqual(cfg["routed_scaling_factor"], 16.0)
        gpt = moe._moe.pretrained_config(os.path.join(FAMILY_DIR, "gpt_oss_mxfp4"))
        self.assertEqual((gpt["activation"], gpt["scoring"], gpt["quantization"]),
                         ("clamped_swiglu", "softmax_topk", "mxfp4"))
        self.assertTrue(moe._moe.pretrained_config(os.path.join(FAMILY_DIR, "llama4_bf16"))["weight_on_input"])

    def test_moeblock_from_the_state_dict_and_config(self):
        """MoEBlock built from a layer's tensors (the published names) and config.json (hf_config=): the same
        function as the family's block, for every unquantized checkpoint (bf16 blocks compute in bf16 by default:
        compute="fp32" here, to compare against float64 at 1e-5)."""
        ran = 0
        for name, model_type, quant, layer, tokens, hidden, _ in families():
            if quant != "none":
                continue
            with self.subTest(family=name):
                d, x, y_stored, _, ties, ids, pos = self.load(name, tokens, hidden)
                config = json.load(open(os.path.join(d, "config.json")))
                root = "language_model.model." if model_type == "llama4" else "model."
                block = {"mixtral": "block_sparse_moe", "llama4": "feed_forward", "llama4_text": "feed_forward"}
                prefix = "%slayers.%d.%s" % (root, layer, block.get(model_type, "mlp"))
                moe_block = MoEBlock.from_state_dict(tensors(d), prefix=prefix, hf_config=config, compute="fp32")
                y, logits = moe_block(torch.from_numpy(x), request_ids=ids, positions=pos)
                err = worst_row_error(y.numpy(), y_stored, ties)
                self.assertLessEqual(err, 1e-5, "%s: %g" % (name, err))
                self.assertEqual(tuple(logits.shape), (tokens, moe_block.num_experts))
                ran += 1
        self.assertGreaterEqual(ran, 13)


def gguf_families():
    with open(os.path.join(FAMILY_DIR, "gguf", "gguf.txt")) as f:
        for line in f:
            name, arch, ttype, layer, tokens, hidden, tolerance, file = line.split()
            yield name, arch, ttype, int(layer), int(tokens), int(hidden), float(tolerance), file


@unittest.skipUnless(FAMILY_DIR and os.path.isdir(FAMILY_DIR),
                     "MOE_FAMILY_DIR is not set (ctest's family_checkpoints_setup writes it)")
class GgufFamiliesTest(unittest.TestCase):
    """Every GGUF family file (tests/support/family_gguf.h: llama.cpp's names, keys and tensor types) through
    moe.Layer.from_pretrained and moe.torch_module.MoEBlock.from_pretrained, against the float64 reference of the
    family's block on the stored weights' exact values."""

    def test_from_pretrained_matches_the_family_block(self):
        ran = 0
        for name, arch, ttype, layer, tokens, hidden, tolerance, file in gguf_families():
            with self.subTest(family=name):
                d = os.path.join(FAMILY_DIR, "gguf", name)
                path = os.path.join(d, file)
                x = np.fromfile(os.path.join(d, "x.bin"), dtype=np.float32).reshape(tokens, hidden)
                ref = np.fromfile(os.path.join(d, "y_exact.bin"), dtype=np.float64).reshape(tokens, hidden)
                ties = np.fromfile(os.path.join(d, "ties.bin"), dtype=np.uint8)
                ids = (np.arange(tokens) % 6).astype(np.uint64)
                pos = (np.arange(tokens) // 6).astype(np.uint32)
                cfg = moe._moe.pretrained_config(path)
                self.assertEqual((cfg["format"], cfg["model_type"]), ("gguf", arch))
                self.assertIn(layer, cfg["moe_layers"])
                for storage, bound in ((None, tolerance), ("f32", 1e-5)):  # as stored; dequantized exactly
                    layer_obj = moe.Layer.from_pretrained(path, layer=layer, storage=storage, scope="none")
                    err = worst_row_error(layer_obj.forward(x, ids, pos), ref, ties)
                    self.assertLessEqual(err, bound, "%s storage %s: %g" % (name, storage, err))
                block = MoEBlock.from_pretrained(path, layer=layer, compute="fp32")
                y, logits = block(torch.from_numpy(x), request_ids=ids, positions=pos)
                err = worst_row_error(y.numpy(), ref, ties)
                self.assertLessEqual(err, tolerance, "%s MoEBlock: %g" % (name, err))
                self.assertEqual(tuple(logits.shape), (tokens, cfg["num_experts"]))
                ran += 1
        self.assertEqual(ran, 12)

    def test_dense_layers_and_malformed_files_are_named(self):
        path = os.path.join(FAMILY_DIR, "gguf", "deepseek2_v2_f16", "tiny-deepseek2_v2_f16.gguf")
        with self.assertRaises(ValueError) as cm:
            moe.Layer.from_pretrained(path, layer=0)
        self.assertIn("the MoE layers of this deepseek2 checkpoint are 1-2", str(cm.exception))
        cfg = moe._moe.pretrained_config(path)
        self.assertEqual((cfg["architecture"], cfg["group_score"], cfg["num_groups"]), ("deepseek-v2", "max", 4))
        with open(path, "rb") as f:
            head = f.read(100)
        bad = os.path.join(FAMILY_DIR, "gguf", "truncated.gguf")
        with open(bad, "wb") as f:
            f.write(head)
        with self.assertRaises(ValueError) as cm:
            moe.Layer.from_pretrained(bad, layer=1)
        self.assertIn("truncated.gguf: says it has", str(cm.exception))
        os.remove(bad)


if __name__ == "__main__":
    unittest.main()

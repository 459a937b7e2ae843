"""moe.Layer.from_pretrained(dir, layer=i): the trained checkpoint models/kjv-moe loaded without shape arguments
(config.json read and checked against the tensors), its layer output against a float64 reference of the same
weights, and clear errors for configs that do not match the tensors."""
import json
import os
import shutil
import tempfile
import unittest

import numpy as np

import moe
from reference import moe_reference, rel_error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KJV = os.path.join(ROOT, "models", "kjv-moe")


def read_tensors(path):
    """A minimal safetensors reader (F32 only), independent of the module under test."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(t["shape"])
    return out


class PretrainedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(KJV, "config.json")) as f:
            cls.config = json.load(f)

    def scratch(self, **changes):
        d = tempfile.mkdtemp(prefix="moe_pretrained_")
        self.addCleanup(shutil.rmtree, d)
        c = dict(self.config, **changes)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f)
        os.symlink(os.path.join(KJV, "model.safetensors"), os.path.join(d, "model.safetensors"))
        return d

    def test_config_and_shape(self):
        c = moe._moe.pretrained_config(KJV)
        self.assertEqual((c["hidden"], c["expert_ff"], c["num_experts"], c["num_layers"], c["top_k"]),
                         (256, 88, 8, 4, 2))
        w = moe.Weights.load_pretrained(KJV, 2)
        self.assertEqual(w.shape["hidden"], 256)
        self.assertEqual(w.shape["expert_ff"], 88)
        self.assertEqual(w.shape["num_experts"], 8)
        same = moe.Weights.load(os.path.join(KJV, "model.safetensors"), "mixtral", 2, 256, 88, 8)
        self.assertEqual(w.content_hash, same.content_hash)

    def test_layer_matches_float64_reference(self):
        t = read_tensors(os.path.join(KJV, "model.safetensors"))
        p = "model.layers.1.block_sparse_moe."
        layer = moe.Layer.from_pretrained(KJV, layer=1, scope="none")
        x = np.random.default_rng(3).standard_normal((40, 256)).astype(np.float32)
        ids = np.repeat(np.arange(4), 10).astype(np.uint64)
        pos = np.tile(np.arange(10), 4).astype(np.uint32)
        y = layer.forward(x, ids, pos)
        want, _ = moe_reference(x, t[p + "gate.weight"], [t[p + "experts.%d.w1.weight" % e] for e in range(8)],
                                [t[p + "experts.%d.w3.weight" % e] for e in range(8)],
                                [t[p + "experts.%d.w2.weight" % e] for e in range(8)], top_k=2, renormalize=True)
        self.assertLess(rel_error(y, want), 1e-5)

    def test_top_k_override(self):
        layer = moe.Layer.from_pretrained(KJV, layer=0, top_k=1, scope="none")
        x = np.random.default_rng(4).standard_normal((8, 256)).astype(np.float32)
        y1 = layer.forward(x, np.zeros(8, np.uint64), np.arange(8, dtype=np.uint32))
        y2 = moe.Layer.from_pretrained(KJV, layer=0, scope="none").forward(
            x, np.zeros(8, np.uint64), np.arange(8, dtype=np.uint32))
        self.assertFalse(np.array_equal(y1, y2))

    def test_mismatched_configs_are_named(self):
        cases = [({"intermediate_size": 96}, "intermediate_size = 96 but model.layers.0.block_sparse_moe.experts.0"),
                 ({"num_local_experts": 4}, "num_local_experts = 4 but"),
                 ({"hidden_size": 128}, "hidden_size = 128 but model.embed_tokens.weight has shape [1024, 256]"),
                 ({"num_hidden_layers": 5}, "lacks model.layers.4"),
                 ({"model_type": "jamba"}, "model_type 'jamba' is not supported")]
        for changes, message in cases:
            d = self.scratch(**changes)
            with self.assertRaises(ValueError) as cm:
                moe.Layer.from_pretrained(d, layer=0)
            self.assertIn(message, str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            moe.Layer.from_pretrained(KJV, layer=4)
        self.assertIn("num_hidden_layers = 4", str(cm.exception))
        with self.assertRaises(Exception) as cm:
            moe.Layer.from_pretrained(os.path.join(KJV, "no-such-dir"), layer=0)
        self.assertIn("config.json", str(cm.exception))


if __name__ == "__main__":
    unittest.main()

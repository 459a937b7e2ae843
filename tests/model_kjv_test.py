#!/usr/bin/python3
"""The trained checkpoint models/kjv-moe against the training side (python/train, docs/training.md).

  * the files: config.json is a MixtralConfig of the trained shape, model.safetensors has the Hugging Face Mixtral
    names and shapes (F32) and the SHA-256 that training.json records, the directory fits in 16 MB;
  * the tokenizer: tokenizer.json reloads to the same merges, equals a fresh deterministic training on the train
    text, its pre-tokenisation equals the documented regular expression, encode/decode round-trips;
  * the forward: the torch forward (dropless, fp32) reproduces reference_logits.npy within 1e-5 relative
    (max |diff| / max |logit|; on the machine that trained it, bit for bit);
  * held-out perplexity: equals what training.json reports (the same evaluation, 1e-6 relative).

Usage: /usr/bin/python3 tests/model_kjv_test.py [MODEL_DIR [CORPUS_DIR]]
  CORPUS_DIR (default data/kjv) is built by scripts/fetch-corpus.sh when it lacks the text.
"""
import json
import math
import os
import random
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "train"))

import train_moe  # noqa: E402  (first: it pins the thread variables before torch is imported)
import bpe  # noqa: E402
import tokenizer_cases  # noqa: E402
import safetensors_io  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

MODEL_DIR = os.path.join(ROOT, "models", "kjv-moe")
CORPUS_DIR = os.path.join(ROOT, "data", "kjv")


def setUpModule():
    train_moe.setup_torch()


class Files(unittest.TestCase):
    def test_config_is_mixtral(self):
        with open(os.path.join(MODEL_DIR, "config.json")) as f:
            c = json.load(f)
        self.assertEqual(c["model_type"], "mixtral")
        self.assertEqual(c["architectures"], ["MixtralForCausalLM"])
        for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "num_local_experts", "num_experts_per_tok", "vocab_size",
                    "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings"):
            self.assertIn(key, c)
        self.assertEqual(c["num_key_value_heads"], c["num_attention_heads"])
        self.assertFalse(c["tie_word_embeddings"])
        report = train_moe.committed_report(MODEL_DIR)
        self.assertEqual(c, train_moe.hf_config(report["config"]))

    def test_safetensors_layout_and_hash(self):
        path = os.path.join(MODEL_DIR, "model.safetensors")
        report = train_moe.committed_report(MODEL_DIR)
        self.assertEqual(train_moe.sha256_file(path), report["model_safetensors_sha256"])
        tensors, meta = safetensors_io.read(path)
        with open(os.path.join(MODEL_DIR, "config.json")) as f:
            c = json.load(f)
        d, ff, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        want = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,), "lm_head.weight": (V, d)}
        for i in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % i
            want[p + "input_layernorm.weight"] = (d,)
            want[p + "post_attention_layernorm.weight"] = (d,)
            for n in "qkvo":
                want[p + "self_attn.%s_proj.weight" % n] = (d, d)
            want[p + "block_sparse_moe.gate.weight"] = (c["num_local_experts"], d)
            for e in range(c["num_local_experts"]):
                q = p + "block_sparse_moe.experts.%d." % e
                want[q + "w1.weight"] = (ff, d)
                want[q + "w3.weight"] = (ff, d)
                want[q + "w2.weight"] = (d, ff)
        self.assertEqual({k: tuple(v.shape) for k, v in tensors.items()}, want)
        self.assertTrue(all(v.dtype == np.float32 for v in tensors.values()))
        self.assertEqual(meta["format"], "pt")

    def test_directory_fits(self):
        total = sum(os.path.getsize(os.path.join(MODEL_DIR, n)) for n in os.listdir(MODEL_DIR))
        self.assertLessEqual(total, 16_000_000)


class Tokenizer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = bpe.Tokenizer.load(os.path.join(MODEL_DIR, "tokenizer.json"))
        cls.train_text, cls.held_text = train_moe.load_corpus(CORPUS_DIR)

    def test_reload_and_retrain(self):
        with open(os.path.join(MODEL_DIR, "tokenizer.json"), encoding="utf-8") as f:
            committed = f.read()
        self.assertEqual(self.tok.to_json(), committed)
        with open(os.path.join(MODEL_DIR, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        self.assertEqual(self.tok.vocab_size, vocab)
        self.assertEqual(bpe.Tokenizer(bpe.train_bpe(self.train_text, vocab)).to_json(), committed)

    def test_pieces_match_the_documented_regex(self):
        rx = re.compile(rb" ?[A-Za-z]+|[\x00-\xff]", re.DOTALL)
        rng = random.Random(7)
        alphabet = b"ab Z,\n\x00\xc3\xa9'  "
        cases = [self.held_text, b"", b" ", b"  a", b"a  b ", b" \n x", "caf\u00e9 na\u00efve".encode()]
        cases += [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(200)]
        for data in cases:
            self.assertEqual(bpe.pieces(data), rx.findall(data), data[:60])

    def test_round_trip_and_fixed_encodings(self):
        ids = self.tok.encode(self.held_text)
        self.assertEqual(self.tok.decode_bytes(ids), self.held_text)
        text = "Na\u00efve \u00e9t\u00e9 -- 3:16 \u2018quoted\u2019\n"
        self.assertEqual(self.tok.decode(self.tok.encode(text)), text)
        # Bytes that are not letters are tokens by themselves.
        self.assertEqual(self.tok.encode(",\n!"), [ord(","), ord("\n"), ord("!")])
        # The recorded samples begin with the prompt's encoding.
        for s in train_moe.committed_report(MODEL_DIR)["samples"]:
            self.assertEqual(s["tokens"][:s["prompt_tokens"]], self.tok.encode(s["prompt"]))


    def test_cpp_reference_encodings_are_current(self):
        # tests/data/kjv_tokenizer_cases.json (the C++ tokenizer's oracle, model_tokenizer_test) equals a fresh
        # run of bpe.py: the committed reference cannot go stale.
        path = os.path.join(ROOT, "tests", "data", "kjv_tokenizer_cases.json")
        with open(path) as f:
            committed = f.read()
        self.assertEqual(tokenizer_cases.dumps(tokenizer_cases.build(MODEL_DIR, CORPUS_DIR)), committed)


class Forward(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model, cls.tok, cls.config = train_moe.load_checkpoint(MODEL_DIR)
        cls.report = train_moe.committed_report(MODEL_DIR)

    def test_reference_logits(self):
        ref = torch.from_numpy(np.load(os.path.join(MODEL_DIR, "reference_tokens.npy")).astype(np.int64))
        want = np.load(os.path.join(MODEL_DIR, "reference_logits.npy"))
        self.assertEqual(want.shape, (ref.shape[0], ref.shape[1], self.config["vocab_size"]))
        with torch.no_grad():
            got = self.model(ref)[0].numpy()
        rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        print("reference logits: max |diff| / max |logit| = %.3g, bit-identical: %s"
              % (rel, np.array_equal(got, want)))
        self.assertLessEqual(rel, 1e-5)

    def test_heldout_perplexity(self):
        _, held_text = train_moe.load_corpus(CORPUS_DIR)
        stream = torch.tensor(self.tok.encode(held_text), dtype=torch.long)
        loss, count, _ = train_moe.evaluate(self.model, stream, self.config["max_position_embeddings"],
                                            self.report["config"]["batch"])
        want = self.report["heldout"]
        print("held-out loss %.6f (perplexity %.4f); training.json: %.6f (%.4f)"
              % (loss, math.exp(loss), want["loss"], want["perplexity"]))
        self.assertEqual(count, want["tokens"])
        self.assertLessEqual(abs(loss - want["loss"]), 1e-6 * abs(want["loss"]))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        MODEL_DIR = os.path.abspath(sys.argv.pop(1))
    if len(sys.argv) > 1:
        CORPUS_DIR = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)

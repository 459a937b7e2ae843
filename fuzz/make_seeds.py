#!/usr/bin/python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/: small valid inputs of each format
(the files are committed; rerun this after changing a format). Deterministic: the same files every run."""
import json
import os
import random
import shutil
import struct
import sys

import numpy

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "corpus")
sys.path.insert(0, os.path.join(HERE, "..", "python", "train"))

from bpe import bytes_to_unicode  # noqa: E402  (GPT-2's byte table, as the trained tokenizer was written)


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def npy(descr, shape, values, version=(1, 0)):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else ""))
    width = 2 if version[0] == 1 else 4
    pad = (64 - (8 + width + len(header) + 1) % 64) % 64
    header += " " * pad + "\n"
    length = struct.pack("<H" if width == 2 else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + length + header.encode() + values.tobytes()


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes); laid out in order."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs)


# GGUF (ggml's docs/gguf.md, version 3): metadata values as (type, value); tensors as (name, ne, ggml type,
# bytes) with ne[0] the row. Types: 0 u8 ... 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (value: (element
# type, [values])), 10 u64, 12 f64.
GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_value(vtype, value):
    if vtype == 8:
        return struct.pack("<Q", len(value.encode())) + value.encode()
    if vtype == 9:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(gguf_value(etype, v) for v in items)
    return struct.pack(GGUF_SCALARS[vtype], value)


def gguf(kvs, tensors, alignment=32):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs) + 1)
    for key, (vtype, value) in [("general.alignment", (4, alignment))] + list(kvs):
        out += gguf_value(8, key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    offset, blobs = 0, []
    for name, ne, ttype, data in tensors:
        out += gguf_value(8, name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        out += struct.pack("<IQ", ttype, offset)
        padded = data + b"\0" * (-len(data) % alignment)
        blobs.append(padded)
        offset += len(padded)
    out += b"\0" * (-len(out) % alignment)
    return out + b"".join(blobs)


def f16(*shape, seed=0):
    return numpy.random.default_rng(seed).uniform(-0.5, 0.5, size=shape).astype("<f2").tobytes()


def bf16(*shape, seed=0):
    v = numpy.random.default_rng(seed).uniform(-0.5, 0.5, size=shape).astype("<f4")
    return (v.view("<u4") >> 16).astype("<u2").tobytes()


def f32(*shape, seed=0):
    return numpy.random.default_rng(seed).uniform(-0.5, 0.5, size=shape).astype("<f4").tobytes()


def tokenizer_json(merges=(), extra=None, drop_byte=None, add_results=True):
    """A byte-level BPE tokenizer.json as the loader accepts it: the 256 byte tokens (ids 0-255), the merges'
    results after them (unless not add_results), then `extra` entries; drop_byte leaves one byte without a
    token (the ids stay contiguous)."""
    table = bytes_to_unicode()
    vocab = {table[b]: i for i, b in enumerate(b for b in range(256) if b != drop_byte)}
    for m in merges:
        halves = m.split(" ") if isinstance(m, str) else m
        if add_results and len(halves) == 2 and "".join(halves) not in vocab:
            vocab["".join(halves)] = len(vocab)
    vocab.update(extra or {})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    return {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": " ?[A-Za-z]+|[^A-Za-z]"}, "behavior": "Isolated",
                 "invert": False}, byte_level]},
            "decoder": byte_level, "model": {"type": "BPE", "vocab": vocab, "merges": list(merges)}}


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    rng = numpy.random.default_rng(1)

    # .npy logits
    put("npy", "f4_2x3.npy", npy("<f4", (2, 3), rng.normal(size=(2, 3)).astype("<f4")))
    put("npy", "f8_3x2.npy", npy("<f8", (3, 2), rng.normal(size=(3, 2))))
    put("npy", "f2_1x4.npy", npy("<f2", (1, 4), rng.normal(size=(1, 4)).astype("<f2")))
    put("npy", "f4_v2.npy", npy("<f4", (2, 2), rng.normal(size=(2, 2)).astype("<f4"), version=(2, 0)))

    # token metadata CSV
    put("meta_csv", "two_requests.csv", "request_id,position\n0,0\n0,1\n7,0\n")
    put("meta_csv", "comments.csv", "# comment\n\nrequest_id,position\n3,0\r\n3,1\r\n")

    # traces: first byte even = CSV, odd = JSONL
    put("trace", "steps.csv", "0arrival_step,prompt_len,decode_len,request_id\n0,16,4,0\n2,8,0,5\n")
    put("trace", "times.csv", "0# recorded\narrival_time,prompt_len,decode_len\n0.5,3,2\n1.75,1,1\n")
    put("trace", "lines.jsonl", '1{"arrival_step": 0, "prompt_len": 4, "decode_len": 2}\n'
                                '{"arrival_time": 3.5, "prompt_len": 2, "decode_len": 0, "request_id": 9}\n')

    # TOML scenarios
    with open(os.path.join(HERE, "..", "sim", "scenarios", "serving.toml"), "rb") as f:
        put("scenario", "serving.toml", f.read())
    put("scenario", "small.toml", 'experts = 8\ntop-k = 2\nmode = "stable"\nrequests = 4\n'
                                  'prompt-len = "uniform:1,8"\n[sweep]\naxis = ["top-k=1,2", "scope=batch,request"]\n')

    # safetensors
    put("safetensors", "dtypes.safetensors", safetensors(
        [("a", "F32", (2, 2), f32(2, 2)), ("b", "BF16", (3,), b"\x80\x3f" * 3), ("c", "F16", (1, 2), b"\x00\x3c" * 2),
         ("d", "I64", (1,), b"\x01" + b"\x00" * 7)], {"format": "pt"}))
    put("safetensors", "empty_tensor.safetensors", safetensors([("e", "F32", (0, 4), b"")]))

    # GGUF: every metadata type; tiny MoE models of a few architectures (F32 / F16 / BF16 experts, which the
    # normal build loads, and MXFP4 and Q8_0 ones that exercise the rest of the header checks).
    put("gguf", "types.gguf", gguf(
        [("t.u8", (0, 7)), ("t.i8", (1, -7)), ("t.u16", (2, 7)), ("t.i16", (3, -7)), ("t.u32", (4, 7)),
         ("t.i32", (5, -7)), ("t.f32", (6, 0.5)), ("t.bool", (7, True)), ("t.str", (8, "gguf")), ("t.u64", (10, 7)),
         ("t.i64", (11, -7)), ("t.f64", (12, 0.25)), ("t.strs", (9, (8, ["a", "bc"]))),
         ("t.nested", (9, (9, [(4, [1, 2]), (8, ["x"])])))],
        [("a", (4, 2), 0, f32(2, 4)), ("b", (2,), 1, f16(2)), ("c", (32, 1), 8, bytes(range(34)))], alignment=64))

    def moe_kvs(arch, d, ff, E, k, layers, extra=()):
        return [("general.architecture", (8, arch)), (arch + ".block_count", (4, layers)),
                (arch + ".embedding_length", (4, d)), (arch + ".feed_forward_length", (4, ff)),
                (arch + ".expert_feed_forward_length", (4, ff)), (arch + ".expert_count", (4, E)),
                (arch + ".expert_used_count", (4, k))] + list(extra)

    def exps(layer, d, ff, E, ttype, blob, seed):
        p = "blk.%d." % layer
        return [(p + "ffn_gate_inp.weight", (d, E), 0, f32(E, d, seed=seed)),
                (p + "ffn_gate_exps.weight", (d, ff, E), ttype, blob(E, ff, d, seed=seed + 1)),
                (p + "ffn_up_exps.weight", (d, ff, E), ttype, blob(E, ff, d, seed=seed + 2)),
                (p + "ffn_down_exps.weight", (ff, d, E), ttype, blob(E, d, ff, seed=seed + 3))]

    put("gguf", "qwen3moe_f16.gguf", gguf(moe_kvs("qwen3moe", 8, 8, 2, 1, 1), exps(0, 8, 8, 2, 1, f16, 1)))
    legacy = [("blk.0.ffn_gate_inp.weight", (8, 2), 0, f32(2, 8, seed=5))]
    for e in range(2):
        legacy += [("blk.0.ffn_gate.%d.weight" % e, (8, 4), 30, bf16(4, 8, seed=6 + e)),
                   ("blk.0.ffn_up.%d.weight" % e, (8, 4), 30, bf16(4, 8, seed=8 + e)),
                   ("blk.0.ffn_down.%d.weight" % e, (4, 8), 30, bf16(8, 4, seed=10 + e))]
    put("gguf", "mixtral_per_expert_bf16.gguf", gguf(moe_kvs("llama", 8, 4, 2, 2, 1), legacy))
    v3 = moe_kvs("deepseek2", 8, 4, 4, 2, 2, [("deepseek2.leading_dense_block_count", (4, 1)),
                                              ("deepseek2.expert_shared_count", (4, 1)),
                                              ("deepseek2.expert_gating_func", (4, 2)),
                                              ("deepseek2.expert_weights_norm", (7, True)),
                                              ("deepseek2.expert_weights_scale", (6, 2.5)),
                                              ("deepseek2.expert_group_count", (4, 2)),
                                              ("deepseek2.expert_group_used_count", (4, 1))])
    dense = [("blk.0.ffn_gate.weight", (8, 8), 0, f32(8, 8, seed=20)), ("blk.0.ffn_up.weight", (8, 8), 0, f32(8, 8)),
             ("blk.0.ffn_down.weight", (8, 8), 0, f32(8, 8))]
    shexp = [("blk.1.exp_probs_b.bias", (4,), 0, f32(4, seed=21)),
             ("blk.1.ffn_gate_shexp.weight", (8, 4), 0, f32(4, 8)), ("blk.1.ffn_up_shexp.weight", (8, 4), 0, f32(4, 8)),
             ("blk.1.ffn_down_shexp.weight", (4, 8), 0, f32(8, 4))]
    put("gguf", "deepseek2_v3_f32.gguf", gguf(v3, dense + exps(1, 8, 4, 4, 0, f32, 30) + shexp))

    def mxfp4(E, rows, cols, seed=0):
        r = numpy.random.default_rng(seed)
        blocks = E * rows * cols // 32
        scales = r.integers(118, 124, size=(blocks, 1), dtype=numpy.uint8)
        return numpy.concatenate([scales, r.integers(0, 256, size=(blocks, 16), dtype=numpy.uint8)], 1).tobytes()

    oss = exps(0, 32, 32, 2, 39, mxfp4, 40) + [
        ("blk.0.ffn_gate_inp.bias", (2,), 0, f32(2)), ("blk.0.ffn_gate_exps.bias", (32, 2), 0, f32(2, 32)),
        ("blk.0.ffn_up_exps.bias", (32, 2), 0, f32(2, 32)), ("blk.0.ffn_down_exps.bias", (32, 2), 0, f32(2, 32))]
    put("gguf", "gpt_oss_mxfp4.gguf", gguf(moe_kvs("gpt-oss", 32, 32, 2, 2, 1), oss))

    # checkpoint index (the fuzz target's directory holds a.safetensors {x, y} and b.safetensors {z})
    put("checkpoint_index", "index.json", json.dumps(
        {"metadata": {"total_size": 18}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors",
                                                        "z": "b.safetensors"}}))
    put("checkpoint_index", "one_shard.json", json.dumps({"weight_map": {"z": "b.safetensors"}}))

    # a Hugging Face config.json (the trained model's)
    with open(os.path.join(HERE, "..", "models", "kjv-moe", "config.json"), "rb") as f:
        put("hf_config", "kjv_moe.json", f.read())

    # moe-model files and their config (__metadata__)
    shape = dict(vocab_size=4, hidden=2, num_layers=1, num_heads=1, num_experts=2, top_k=1, expert_ff=2,
                 max_positions=8)
    meta = {"format": "moe-model/1", **{k: str(v) for k, v in shape.items()}, "rms_eps": "9.99999975e-06",
            "rope_theta": "10000"}
    put("model_config", "tiny.json", json.dumps(meta))
    put("model_config", "default.json", json.dumps({**meta, "vocab_size": "512", "hidden": "256", "num_layers": "4",
                                                    "num_heads": "4", "num_experts": "8", "top_k": "2",
                                                    "expert_ff": "512", "max_positions": "4096"}))
    V, d, E, ff = shape["vocab_size"], shape["hidden"], shape["num_experts"], shape["expert_ff"]
    tensors = [("model.embed_tokens.weight", "F32", (V, d), f32(V, d, seed=1))]
    p = "model.layers.0."
    tensors += [(p + "input_layernorm.weight", "F32", (d,), f32(d, seed=2))]
    for i, n in enumerate("qkvo"):
        tensors.append((p + "self_attn.%s_proj.weight" % n, "F32", (d, d), f32(d, d, seed=3 + i)))
    tensors.append((p + "post_attention_layernorm.weight", "F32", (d,), f32(d, seed=7)))
    tensors.append((p + "block_sparse_moe.gate.weight", "F32", (E, d), f32(E, d, seed=8)))
    for e in range(E):
        ep = p + "block_sparse_moe.experts.%d." % e
        tensors += [(ep + "w1.weight", "F32", (ff, d), f32(ff, d, seed=10 + e)),
                    (ep + "w3.weight", "F32", (ff, d), f32(ff, d, seed=20 + e)),
                    (ep + "w2.weight", "F32", (d, ff), f32(d, ff, seed=30 + e))]
    tensors += [("model.norm.weight", "F32", (d,), f32(d, seed=40)), ("lm_head.weight", "F32", (V, d), f32(V, d, seed=41))]
    put("model_file", "tiny.safetensors", safetensors(tensors, meta))

    # tokenizer.json: the trained model's, a minimal valid one (the 256 byte tokens and merges in both forms),
    # and malformed ones that each break one rule of the loader.
    with open(os.path.join(HERE, "..", "models", "kjv-moe", "tokenizer.json"), "rb") as f:
        put("tokenizer", "kjv_moe.json", f.read())
    tiny = tokenizer_json(merges=[["t", "h"], "th e", ["Ġ", "the"]])
    put("tokenizer", "tiny.json", json.dumps(tiny))
    put("tokenizer", "truncated.json", json.dumps(tiny)[:300])
    put("tokenizer", "wordpiece.json", json.dumps({**tiny, "model": {**tiny["model"], "type": "WordPiece"}}))
    put("tokenizer", "merge_unknown.json", json.dumps(tokenizer_json(merges=["q z"], add_results=False)))
    put("tokenizer", "merge_three.json", json.dumps(tokenizer_json(merges=["a b c"])))
    put("tokenizer", "id_out_of_range.json", json.dumps(tokenizer_json(extra={"xy": 9999})))
    put("tokenizer", "id_twice.json", json.dumps(tokenizer_json(extra={"xy": 0})))
    put("tokenizer", "id_not_integer.json", json.dumps(tokenizer_json(extra={"xy": "257"})))
    put("tokenizer", "missing_byte.json", json.dumps(tokenizer_json(drop_byte=0x41)))
    put("tokenizer", "not_byte_level.json", json.dumps(tokenizer_json(extra={"\u0100\u4e00": 256})))
    put("tokenizer", "pre_tokenizer.json", json.dumps({**tiny, "pre_tokenizer": {"type": "Whitespace"}}))

    # C API: one input that builds random weights (hidden 5, ff 4, 2 experts) and runs forward passes, and a
    # few random ones.
    walk = bytes([4, 3, 1, 0, 0, 0, 0, 1, 1]) + bytes(8) + bytes([0, 0, 2, 0, 5, 0]) + bytes(range(100, 120)) + \
        bytes([0, 0, 1, 1, 2, 2, 3, 3]) + bytes([0]) + bytes([0, 4, 0, 0, 2, 0, 3]) + bytes(range(20))
    put("c_api", "walk.bin", walk)
    r = random.Random(7)
    for i in range(4):
        put("c_api", "random%d.bin" % i, bytes(r.randrange(256) for _ in range(200)))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes tests/data/kjv_tokenizer_cases.json: the reference encodings of python/train/bpe.py for the C++ tokenizer
(moe/model/tokenizer.h) to match bit for bit.

  cases    byte strings (hex) and their ids: empty, spaces, letters around spaces, newlines, punctuation and
           digits, UTF-8 text (accents, quotes, CJK, emoji), invalid UTF-8 and every byte value, the demo prompts,
           and 200 seeded random strings over an alphabet of letters, spaces and odd bytes;
  heldout  the held-out text's token count and FNV-1a 64 over its ids (int32 little-endian), for the corpus that
           scripts/fetch-corpus.sh builds (the text is not committed).

tests/model_kjv_test.py checks that this file equals a fresh run (so it cannot go stale).
Usage: /usr/bin/python3 python/train/tokenizer_cases.py [MODEL_DIR [CORPUS_DIR [OUT]]]
"""
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bpe  # noqa: E402


def fnv1a64_ids(ids):
    h = 0xCBF29CE484222325
    for b in struct.pack("<%di" % len(ids), *ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def case_strings():
    fixed = [b"", b" ", b"  ", b"a", b" a", b"  a", b"a  b ", b" \n x", b"\n", b"\n\n", b"And God said",
             b"In the beginning", b"The LORD is my shepherd;", b"And Jesus said unto them,",
             b"Vanity of vanities, saith the Preacher;", b"3:16 -- (verse) [note] 'quoted' \"double\"!?",
             b"thethethe the  the\tthe", b"AAAA aaaa aAaA", "caf\u00e9 na\u00efve".encode(),
             "Na\u00efve \u00e9t\u00e9 -- 3:16 \u2018quoted\u2019\n".encode(), "\u4e2d\u6587 \U0001F600 ok".encode(),
             b"\xff\xfe\x80 invalid \xc3 utf8 \xe2\x82", b"\x00\x01 nul", bytes(range(256))]
    rng = random.Random(15)
    alphabet = b"abetZ LORD,.;\n\x00\xc3\xa9'  "
    rand = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(200)]
    return fixed + rand


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "kjv-moe")
    corpus_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "data", "kjv")
    out = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "tests", "data", "kjv_tokenizer_cases.json")
    print(json.dumps(build(model_dir, corpus_dir), indent=1) if out == "-" else write(out, model_dir, corpus_dir))


def build(model_dir, corpus_dir):
    tok = bpe.Tokenizer.load(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(corpus_dir, "heldout.txt"), "rb") as f:
        held = f.read()
    ids = tok.encode(held)
    return {
        "what": "reference encodings of python/train/bpe.py (python/train/tokenizer_cases.py)",
        "cases": [{"hex": s.hex(), "ids": tok.encode(s)} for s in case_strings()],
        "heldout": {"bytes": len(held), "tokens": len(ids), "fnv1a64_ids": "%016x" % fnv1a64_ids(ids)},
    }


def dumps(doc):
    """The file's text: one case per line."""
    lines = ['{"what": %s,' % json.dumps(doc["what"]), '"cases": [']
    lines += [json.dumps(c, separators=(",", ":")) + ("," if i + 1 < len(doc["cases"]) else "")
              for i, c in enumerate(doc["cases"])]
    lines += ["],", '"heldout": %s}' % json.dumps(doc["heldout"])]
    return "\n".join(lines) + "\n"


def write(out, model_dir, corpus_dir):
    doc = build(model_dir, corpus_dir)
    with open(out, "w") as f:
        f.write(dumps(doc))
    return "wrote %s (%d cases, held-out %d tokens)" % (out, len(doc["cases"]), doc["heldout"]["tokens"])


if __name__ == "__main__":
    main()

"""Byte-level BPE for the KJV model: deterministic training, the reference encode/decode, tokenizer.json I/O.

Pure Python (no `tokenizers` package). The algorithm, which a C++ encoder must reproduce bit for bit
(docs/training.md, "Tokenizer"):

Token ids. 0..255 are the single bytes (id = byte value). Merge number r (r = 0, 1, ...) makes token 256 + r,
whose bytes are those of its left token followed by those of its right token. vocab_size = 256 + merges.

Pre-tokenisation (pieces). The input is a byte string (text as UTF-8). Scanning left to right, a piece is
  * a maximal run of ASCII letters [A-Za-z], together with one space byte (0x20) right before it if there is one;
  * otherwise the single byte at the scan position (a space not followed by a letter, punctuation, a digit,
    a newline, any non-ASCII byte).
As a regular expression over bytes: ` ?[A-Za-z]+|[\\x00-\\xff]`, leftmost alternative first. Merges never
cross pieces, so every piece is encoded on its own and the results are concatenated.

Encoding one piece. Start from its bytes as ids. Repeat: among all adjacent pairs find the pair with the lowest
merge rank; stop if no adjacent pair is a merge; otherwise replace every occurrence of that pair, scanning
left to right without overlap (in a run a a a of the pair (a, a) the first two merge), by the merged token.
(This is GPT-2's and Hugging Face tokenizers' BPE; ranks are unique, so there are no ties to break.)

Decoding. Concatenate the tokens' bytes (the text is their UTF-8 decoding; the model only ever saw ASCII).

Training (deterministic). Count the pieces of the training text. Repeat until vocab_size tokens exist: count
every adjacent pair of every piece, weighted by the piece's count; take the pair with the largest count, ties
to the smallest (left id, right id); stop early if the best count is below 2; merge it in every piece as above.
Only pieces of two or more bytes (space + letters or letters) can hold a pair, so merges join letters and a
leading space only.

tokenizer.json is the Hugging Face tokenizers format: model BPE (vocab, merges), pre_tokenizer
Sequence[Split(` ?[A-Za-z]+|[^A-Za-z]`, Isolated), ByteLevel(use_regex false)], decoder ByteLevel; vocab keys
and merges in GPT-2's byte-to-unicode alphabet (bytes_to_unicode below). The Split pattern equals the byte rule
above on any UTF-8 text: a non-ASCII character becomes one piece of several bytes, but no merge applies to
non-letter bytes, so its encoding is its bytes either way.
"""
import collections
import json

LETTERS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
SPACE = 0x20
SPLIT_PATTERN = " ?[A-Za-z]+|[^A-Za-z]"


def pieces(data):
    """bytes -> list of bytes pieces (the pre-tokenisation rule of the module docstring)."""
    out = []
    i, n = 0, len(data)
    while i < n:
        j = i
        if data[i] == SPACE and i + 1 < n and data[i + 1] in LETTERS:
            j = i + 1
        if data[j] in LETTERS:
            k = j
            while k < n and data[k] in LETTERS:
                k += 1
            out.append(data[i:k])
            i = k
        else:
            out.append(data[i:i + 1])
            i += 1
    return out


def merge_pair(ids, a, b, new):
    """Replaces every occurrence of (a, b) in ids, left to right without overlap."""
    out = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_bpe(text_bytes, vocab_size):
    """Returns the merges [(left id, right id), ...] in rank order; merge r makes token 256 + r."""
    if vocab_size < 256:
        raise ValueError("vocab_size must be at least 256")
    counts = collections.Counter(p for p in pieces(text_bytes) if len(p) >= 2)
    words = [list(p) for p in sorted(counts)]  # sorted: a fixed order (results do not depend on it)
    freq = [counts[bytes(p)] for p in words]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)  # pair -> indices of words holding it
    for w, ids in enumerate(words):
        for pair in zip(ids, ids[1:]):
            pair_count[pair] += freq[w]
            where[pair].add(w)
    merges = []
    while 256 + len(merges) < vocab_size:
        best, best_count = None, 1
        for pair, c in pair_count.items():
            if c > best_count or (c == best_count and best is not None and pair < best):
                best, best_count = pair, c
        if best is None:  # no pair occurs twice
            break
        new = 256 + len(merges)
        merges.append(best)
        for w in sorted(where.pop(best, ())):
            ids = words[w]
            for pair in zip(ids, ids[1:]):
                pair_count[pair] -= freq[w]
                if pair_count[pair] == 0:
                    del pair_count[pair]
            ids = merge_pair(ids, best[0], best[1], new)
            words[w] = ids
            for pair in zip(ids, ids[1:]):
                pair_count[pair] += freq[w]
                where[pair].add(w)
        pair_count.pop(best, None)
    return merges


class Tokenizer:
    """Encode/decode with merges [(left, right), ...] (rank order, merge r -> id 256 + r)."""

    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.rank = {m: r for r, m in enumerate(self.merges)}
        self.token_bytes = [bytes([i]) for i in range(256)]
        for a, b in self.merges:
            self.token_bytes.append(self.token_bytes[a] + self.token_bytes[b])
        self.vocab_size = len(self.token_bytes)
        self._cache = {}

    def encode_piece(self, piece):
        ids = list(piece)
        while len(ids) >= 2:
            best, best_rank = None, None
            for pair in zip(ids, ids[1:]):
                r = self.rank.get(pair)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = pair, r
            if best is None:
                break
            ids = merge_pair(ids, best[0], best[1], 256 + best_rank)
        return ids

    def encode(self, text):
        """str (or bytes) -> list of ids."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out = []
        for p in pieces(data):
            ids = self._cache.get(p)
            if ids is None:
                ids = self.encode_piece(p)
                if len(self._cache) < 200000:
                    self._cache[p] = ids
            out.extend(ids)
        return out

    def decode_bytes(self, ids):
        return b"".join(self.token_bytes[i] for i in ids)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # Hugging Face tokenizer.json ----------------------------------------------------------------------------

    def to_json(self):
        u = bytes_to_unicode()
        def name(i):
            return "".join(u[b] for b in self.token_bytes[i])
        vocab = {name(i): i for i in range(self.vocab_size)}
        if len(vocab) != self.vocab_size:
            raise ValueError("two tokens have the same bytes")
        doc = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [],
            "normalizer": None,
            "pre_tokenizer": {
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated",
                     "invert": False},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
                ],
            },
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": False,
                "vocab": vocab,
                "merges": [name(a) + " " + name(b) for a, b in self.merges],
            },
        }
        # One token per line in vocab and merges keeps the file diffable; key order is fixed (insertion order).
        return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"

    def save(self, path):
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(self.to_json())

    @classmethod
    def load(cls, path):
        """Reads a tokenizer.json written by to_json (checks that ids follow this module's scheme)."""
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        model = doc["model"]
        if model["type"] != "BPE":
            raise ValueError("tokenizer.json: model.type is not BPE")
        b = unicode_to_bytes()
        vocab = {i: bytes(b[c] for c in s) for s, i in model["vocab"].items()}
        by_bytes = {v: i for i, v in vocab.items()}
        for i in range(256):
            if vocab.get(i) != bytes([i]):
                raise ValueError("tokenizer.json: id %d is not the byte %d" % (i, i))
        merges = []
        for r, m in enumerate(model["merges"]):
            left, right = m.split(" ") if isinstance(m, str) else m
            a = by_bytes[bytes(b[c] for c in left)]
            c = by_bytes[bytes(b[ch] for ch in right)]
            merges.append((a, c))
            if vocab.get(256 + r) != vocab[a] + vocab[c]:
                raise ValueError("tokenizer.json: merge %d does not make token %d" % (r, 256 + r))
        tok = cls(merges)
        if tok.vocab_size != len(vocab):
            raise ValueError("tokenizer.json: vocab has tokens no merge makes")
        return tok


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character table (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def unicode_to_bytes():
    return {c: b for b, c in bytes_to_unicode().items()}

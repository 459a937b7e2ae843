// The byte-level BPE tokenizer of a Hugging Face tokenizer.json (the trained model's, docs/training.md):
// encodes text to token ids and decodes ids to bytes, bit-identical to python/train/bpe.py.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace moe::model {

// Encoding (GPT-2 / Hugging Face BPE over bytes):
//   1. pieces: scan the bytes left to right; a piece is a maximal run of ASCII letters [A-Za-z] together with
//      the one space (0x20) directly before it if any; any other byte is a piece by itself (the regex
//      " ?[A-Za-z]+|[^A-Za-z]" over bytes, which is the file's Split pre-tokenizer). Merges never cross
//      pieces.
//   2. a piece starts as its bytes' tokens; repeatedly the adjacent pair with the lowest merge rank is
//   replaced
//      at every occurrence, left to right without overlap, by its merged token, until no adjacent pair is a
//      merge.
//   3. the pieces' ids, concatenated. No special tokens are added.
// Every byte string encodes (each of the 256 bytes is a token) and decode(encode(s)) == s.
//
// Thread safety: immutable after load; encode/decode may be called concurrently.
class Tokenizer {
 public:
  // Reads `path` (a tokenizer.json, or a directory holding one). Accepted: model.type "BPE" with a vocab
  // whose keys are GPT-2 byte-to-unicode strings, merges as "A B" strings or [A, B] pairs, no added tokens,
  // no normalizer, the pre-tokenizer above (Split with that regex, then ByteLevel without its own regex), a
  // ByteLevel decoder. Throws std::runtime_error naming the file when it cannot be read, and
  // std::invalid_argument naming the file and the problem otherwise (malformed JSON, another model or
  // pre-tokenizer, a key that is not byte-level, a byte without a token, duplicate ids or byte strings, a
  // merge whose halves or result are not in the vocab).
  static Tokenizer load(const std::filesystem::path& path);

  // Time O(n log n) for n bytes. Throws std::invalid_argument for a text over 2^31 - 1
  // bytes.
  std::vector<int32_t> encode(std::string_view bytes) const;
  // The tokens' bytes, concatenated. Throws std::invalid_argument for an id outside [0, vocab_size).
  std::string decode(std::span<const int32_t> ids) const;
  // The bytes of one token.
  const std::string& token_bytes(int32_t id) const;
  int vocab_size() const { return static_cast<int>(bytes_.size()); }
  int num_merges() const { return static_cast<int>(merge_rank_.size()); }

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> bytes_;  // id -> bytes
  int32_t byte_token_[256] = {};    // byte -> its single-byte token
  // (left id, right id) -> (rank, merged id), keyed by left << 32 | right.
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  std::unordered_map<uint64_t, Merge> merge_rank_;
};

// A byte string shown on one line for tables: printable ASCII as is, '\n' as "\\n", '\\' as "\\\\", other
// bytes as "\\xHH".
std::string printable(std::string_view bytes);

}  // namespace moe::model

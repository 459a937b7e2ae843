// The text a quality run scores: a token stream (a text file encoded with the model's tokenizer, or a token
// file), cut into windows the way python/train/train_moe.py's evaluate() cuts the held-out text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/model/tokenizer.h"

namespace moe::sim::quality {

// The tokens of a text file, encoded with `tokenizer`. Throws DataError naming the file when it is missing,
// unreadable or encodes to fewer than 2 tokens (nothing to predict).
std::vector<int32_t> read_text_tokens(const std::string& path, const model::Tokenizer& tokenizer);

// The token ids of a token file: a .npy array of int32 (any shape, read in C order), or any other file as
// decimal ids separated by whitespace or commas. Throws DataError naming the file and the problem: missing,
// another dtype (int64 named, with the numpy conversion), a word that is not an id, fewer than 2 tokens.
std::vector<int32_t> read_token_file(const std::string& path);

// Throws DataError naming `where`, the index and the value of the first token outside [0, vocab_size).
void check_vocabulary(const std::vector<int32_t>& tokens, int vocab_size, const std::string& where);

// One scored request: inputs stream[start, start + length), each predicting the next token of the stream
// (targets stream[start + 1, start + length + 1)).
struct Window {
  int64_t start = 0;
  int32_t length = 0;
};

// The windows of a stream of `stream_size` tokens: `window` inputs at stride `window`, every token but the
// first predicted exactly once, the last window shorter (evaluate()'s cut). With max_tokens > 0, an evenly
// spread subset of ceil(max_tokens / window) of them (window i * n / count for i < count, n windows in
// all), so that a sample covers the whole text; 0: every window. Throws std::invalid_argument for
// stream_size < 2, window < 1 or max_tokens < 0.
std::vector<Window> select_windows(int64_t stream_size, int window, int64_t max_tokens);

}  // namespace moe::sim::quality

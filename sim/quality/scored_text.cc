#include "sim/quality/scored_text.h"

#include <charconv>
#include <cstring>
#include <stdexcept>

#include "sim/errors.h"
#include "sim/input_file.h"
#include "sim/npy.h"

namespace moe::sim::quality {
namespace {

void check_length(const std::vector<int32_t>& tokens, const std::string& what) {
  if (tokens.size() < 2) {
    throw DataError(what + " holds " + std::to_string(tokens.size()) +
                    " token(s): at least 2 are needed (every token but the first is predicted)");
  }
}

std::vector<int32_t> npy_tokens(const std::string& bytes, const std::string& path) {
  // parse_npy knows float32 and int32; name int64 (numpy's default integer) here, with its conversion.
  const std::string head = bytes.substr(0, std::min<size_t>(bytes.size(), 256));
  if (head.find("'<i8'") != std::string::npos || head.find("\"<i8\"") != std::string::npos) {
    throw DataError("token file '" + path +
                    "' holds int64 ids ('<i8'); token ids must be int32. Convert with: python3 -c \"import "
                    "numpy; numpy.save('" +
                    path + "', numpy.load('" + path + "').astype('<i4'))\"");
  }
  const NpyArray a = parse_npy(bytes, path);
  if (a.dtype != "i4" || !a.converted_from.empty()) {
    throw DataError("token file '" + path + "' holds " +
                    (a.converted_from.empty() ? a.dtype : a.converted_from) +
                    " values; token ids must be int32 ('<i4')");
  }
  std::vector<int32_t> out(a.words.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = a.i32(i);
  return out;
}

std::vector<int32_t> text_ids(const std::string& bytes, const std::string& path) {
  std::vector<int32_t> out;
  size_t i = 0;
  int64_t line = 1;
  auto separator = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ','; };
  while (i < bytes.size()) {
    if (separator(bytes[i])) {
      line += bytes[i] == '\n';
      ++i;
      continue;
    }
    size_t end = i;
    while (end < bytes.size() && !separator(bytes[end])) ++end;
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(bytes.data() + i, bytes.data() + end, v);
    if (ec != std::errc() || ptr != bytes.data() + end || v < INT32_MIN || v > INT32_MAX) {
      std::string word = bytes.substr(i, std::min<size_t>(end - i, 40));
      for (char& c : word) {
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
      }
      throw DataError(
          "token file '" + path + "', line " + std::to_string(line) + ": '" + word +
          "' is not a token id (a token file holds decimal ids separated by whitespace or commas, "
          "or is an int32 .npy array; give a text file with --text)");
    }
    out.push_back(static_cast<int32_t>(v));
    i = end;
  }
  return out;
}

}  // namespace

std::vector<int32_t> read_text_tokens(const std::string& path, const model::Tokenizer& tokenizer) {
  const std::string bytes = read_input_file(path, "text file");
  std::vector<int32_t> tokens = tokenizer.encode(bytes);
  check_length(tokens, "text file '" + path + "'");
  return tokens;
}

std::vector<int32_t> read_token_file(const std::string& path) {
  const std::string bytes = read_input_file(path, "token file");
  const bool npy = bytes.size() >= 6 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0;
  std::vector<int32_t> tokens = npy ? npy_tokens(bytes, path) : text_ids(bytes, path);
  check_length(tokens, "token file '" + path + "'");
  return tokens;
}

void check_vocabulary(const std::vector<int32_t>& tokens, int vocab_size, const std::string& where) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      throw DataError(where + ": token " + std::to_string(i) + " is " + std::to_string(tokens[i]) +
                      ", outside the model's vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
}

std::vector<Window> select_windows(int64_t stream_size, int window, int64_t max_tokens) {
  if (stream_size < 2) throw std::invalid_argument("select_windows: a stream of fewer than 2 tokens");
  if (window < 1) throw std::invalid_argument("select_windows: window must be >= 1");
  if (max_tokens < 0) throw std::invalid_argument("select_windows: max_tokens must be >= 0");
  std::vector<Window> all;
  for (int64_t s = 0; s < stream_size - 1; s += window) {
    all.push_back(Window{s, static_cast<int32_t>(std::min<int64_t>(window, stream_size - 1 - s))});
  }
  const int64_t n = static_cast<int64_t>(all.size());
  const int64_t count = max_tokens == 0 ? n : std::min<int64_t>(n, (max_tokens + window - 1) / window);
  if (count == n) return all;
  std::vector<Window> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(all[static_cast<size_t>(i * n / count)]);
  return out;
}

}  // namespace moe::sim::quality

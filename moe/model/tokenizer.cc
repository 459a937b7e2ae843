#include "moe/model/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace moe::model {
namespace {

using nlohmann::json;

constexpr const char* kSplitPattern = " ?[A-Za-z]+|[^A-Za-z]";

bool is_letter(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

// GPT-2's bytes_to_unicode: printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves, the
// other 68 bytes, in increasing order, for U+0100, U+0101, ...
std::array<uint32_t, 256> byte_to_unicode() {
  std::array<uint32_t, 256> table{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? b : next++;
  }
  return table;
}

// Decodes UTF-8 `s` to code points; false on malformed input.
bool utf8_code_points(std::string_view s, std::vector<uint32_t>& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    out.push_back(cp);
    i += len;
  }
  return true;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path_in) {
  const std::filesystem::path path =
      std::filesystem::is_directory(path_in) ? path_in / "tokenizer.json" : path_in;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("tokenizer: cannot open " + path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string where = "tokenizer " + path.string() + ": ";
  auto fail = [&](const std::string& what) { throw std::invalid_argument(where + what); };
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    fail(std::string("not valid JSON (") + e.what() + ")");
  }
  try {
    const json& model = j.at("model");
    if (model.value("type", "") != "BPE") fail("model.type must be \"BPE\" (byte-level BPE)");
    if (j.contains("added_tokens") && !j["added_tokens"].empty())
      fail("added (special) tokens are not supported");
    if (j.contains("normalizer") && !j["normalizer"].is_null()) fail("a normalizer is not supported");
    // The pre-tokenizer must be exactly the piece rule encode() implements.
    const json& pre = j.at("pre_tokenizer");
    bool pre_ok = pre.value("type", "") == "Sequence" && pre.at("pretokenizers").size() == 2;
    if (pre_ok) {
      const json& split = pre["pretokenizers"][0];
      const json& byte_level = pre["pretokenizers"][1];
      pre_ok = split.value("type", "") == "Split" &&
               split.at("pattern").value("Regex", "") == kSplitPattern &&
               split.value("behavior", "") == "Isolated" && !split.value("invert", false) &&
               byte_level.value("type", "") == "ByteLevel" && !byte_level.value("use_regex", true) &&
               !byte_level.value("add_prefix_space", true);
    }
    if (!pre_ok) {
      fail(std::string("pre_tokenizer must be Sequence[Split(Regex \"") + kSplitPattern +
           "\", Isolated), ByteLevel(use_regex false, add_prefix_space false)]");
    }
    if (j.contains("decoder") && !j["decoder"].is_null() && j["decoder"].value("type", "") != "ByteLevel") {
      fail("decoder must be ByteLevel");
    }

    const auto to_byte = byte_to_unicode();
    std::unordered_map<uint32_t, unsigned char> from_unicode;
    for (int b = 0; b < 256; ++b) from_unicode[to_byte[b]] = static_cast<unsigned char>(b);
    auto key_bytes = [&](const std::string& key) {
      std::vector<uint32_t> cps;
      if (!utf8_code_points(key, cps)) fail("vocab key is not valid UTF-8");
      std::string out;
      for (uint32_t cp : cps) {
        auto it = from_unicode.find(cp);
        if (it == from_unicode.end()) fail("vocab key '" + key + "' is not in the byte-level alphabet");
        out.push_back(static_cast<char>(it->second));
      }
      if (out.empty()) fail("empty vocab key");
      return out;
    };

    const json& vocab = model.at("vocab");
    if (!vocab.is_object() || vocab.empty()) fail("model.vocab must be a non-empty object");
    Tokenizer t;
    t.bytes_.assign(vocab.size(), std::string());
    std::vector<bool> seen(vocab.size(), false);
    std::unordered_map<std::string, int32_t> id_of;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer()) fail("vocab id of '" + it.key() + "' is not an integer");
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(vocab.size())) {
        fail("vocab id " + std::to_string(id) + " of '" + it.key() + "' is outside [0, " +
             std::to_string(vocab.size()) + ")");
      }
      if (seen[id]) fail("vocab id " + std::to_string(id) + " is used twice");
      seen[id] = true;
      std::string b = key_bytes(it.key());
      if (!id_of.emplace(b, static_cast<int32_t>(id)).second) fail("two vocab entries have the same bytes");
      t.bytes_[id] = std::move(b);
    }
    for (int b = 0; b < 256; ++b) {
      auto it = id_of.find(std::string(1, static_cast<char>(b)));
      if (it == id_of.end())
        fail("byte " + std::to_string(b) + " has no token (byte-level BPE needs all 256)");
      t.byte_token_[b] = it->second;
    }

    const json& merges = model.at("merges");
    if (!merges.is_array()) fail("model.merges must be an array");
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string left, right;
      const json& m = merges[r];
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          fail("merge " + std::to_string(r) + " '" + s + "' is not two halves separated by one space");
        }
        left = s.substr(0, sp);
        right = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        fail("merge " + std::to_string(r) + " is neither \"A B\" nor [A, B]");
      }
      auto lookup = [&](const std::string& key) {
        auto it = vocab.find(key);
        if (it == vocab.end()) fail("merge " + std::to_string(r) + ": '" + key + "' is not in the vocab");
        return it.value().get<int32_t>();
      };
      const int32_t a = lookup(left), b = lookup(right), c = lookup(left + right);
      if (!t.merge_rank_.emplace(pair_key(a, b), Merge{static_cast<int32_t>(r), c}).second) {
        fail("merge " + std::to_string(r) + " repeats an earlier pair");
      }
    }
    return t;
  } catch (const json::exception& e) {
    fail(std::string("unexpected structure (") + e.what() + ")");
  }
  return {};
}

// The merge loop of the header's rule 2 in O(n log n) for a piece of n bytes (the plain loop rescans the
// piece once per merge it applies, O(merges x n): 3.5 s for a megabyte of random letters with the trained
// model's 768 merges, against 0.1 s here, and in proportion to the merges of a larger vocabulary). The piece
// is a linked list of symbols; a min-heap holds (rank, position) for every adjacent pair that is a merge,
// stale entries included. A round takes every entry of the lowest rank - all current occurrences of that one
// pair - and merges them in position order, skipping those an earlier merge of the round consumed: the
// header's "every occurrence, left to right without overlap". A merged symbol (A+B) is longer than A and B,
// so a round never creates an occurrence of its own pair; the pairs it creates are pushed and compete in
// later rounds, whatever their rank, as in the plain loop.
void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(piece.size());
  struct Symbol {
    int32_t id;
    int32_t prev;  // -1: first
    int32_t next;  // n: last
  };
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_token_[static_cast<unsigned char>(piece[i])], i - 1, i + 1};
  struct Candidate {
    int32_t rank;
    int32_t pos;   // the pair's left symbol
    int32_t left;  // the ids it was pushed for (an entry is stale once either symbol changed)
    int32_t right;
    int32_t result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Candidate> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next >= n) return;
    const int32_t left = sym[pos].id, right = sym[sym[pos].next].id;
    auto it = merge_rank_.find(pair_key(left, right));
    if (it == merge_rank_.end()) return;
    heap.push_back({it->second.rank, pos, left, right, it->second.result});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  auto current = [&](const Candidate& c) {
    return sym[c.pos].id == c.left && sym[c.pos].next < n && sym[sym[c.pos].next].id == c.right;
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<Candidate> round;
  while (!heap.empty()) {
    // Popped in position order within the rank (the heap's tie-break).
    const int32_t rank = heap.front().rank;
    round.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      round.push_back(heap.back());
      heap.pop_back();
    }
    for (const Candidate& c : round) {
      if (!current(c)) continue;  // stale, or consumed by the merge just before it
      const int32_t gone = sym[c.pos].next;
      sym[c.pos].id = c.result;
      sym[c.pos].next = sym[gone].next;
      if (sym[gone].next < n) sym[sym[gone].next].prev = c.pos;
      sym[gone].id = -1;  // removed: never current again
      push(sym[c.pos].prev);
      push(c.pos);
    }
  }
  for (int32_t i = 0; i < n; i = sym[i].next) out.push_back(sym[i].id);  // position 0 is never removed
}

std::vector<int32_t> Tokenizer::encode(std::string_view data) const {
  if (data.size() > static_cast<size_t>(INT32_MAX)) {
    throw std::invalid_argument("tokenizer: a text of " + std::to_string(data.size()) +
                                " bytes; encode takes at most 2^31 - 1");
  }
  std::vector<int32_t> out;
  out.reserve(data.size() / 2 + 1);
  const size_t n = data.size();
  for (size_t i = 0; i < n;) {
    size_t j = i;
    if (data[i] == ' ' && i + 1 < n && is_letter(static_cast<unsigned char>(data[i + 1]))) j = i + 1;
    if (is_letter(static_cast<unsigned char>(data[j]))) {
      size_t k = j;
      while (k < n && is_letter(static_cast<unsigned char>(data[k]))) ++k;
      encode_piece(data.substr(i, k - i), out);
      i = k;
    } else {
      out.push_back(byte_token_[static_cast<unsigned char>(data[i])]);
      ++i;
    }
  }
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw std::invalid_argument("tokenizer: token id " + std::to_string(id) + " is outside [0, " +
                                std::to_string(vocab_size()) + ")");
  }
  return bytes_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

std::string printable(std::string_view bytes) {
  std::string out;
  char buf[8];
  for (char ch : bytes) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7F) {
      out.push_back(ch);
    } else {
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace moe::model

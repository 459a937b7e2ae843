// The C++ byte-level BPE tokenizer (moe/model/tokenizer.h) against the Python reference
// (python/train/bpe.py): the committed reference encodings tests/data/kjv_tokenizer_cases.json (empty,
// spaces, unicode, invalid UTF-8, every byte, random strings; tests/model_kjv_test.py checks the file equals
// a fresh Python run), the whole held-out text (its token count and FNV-1a hash over the ids), round trips,
// and bad tokenizer files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/model/tokenizer.h"

namespace moe::model {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = MOE_SOURCE_DIR;
const fs::path kCorpus = MOE_KJV_CORPUS;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

uint64_t fnv1a64_ids(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids) {
    const uint32_t u = static_cast<uint32_t>(id);
    for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xFF)) * 0x100000001B3ull;
  }
  return h;
}

// The encoding rule of tokenizer.h written plainly, from a tokenizer.json document: the pieces, then per
// piece the lowest-rank adjacent pair merged at every occurrence, left to right without overlap, until none
// is a merge (quadratic; the reference for Tokenizer::encode's heap). The bytes' own tokens are taken from
// `loaded` (the document loaded; its byte table is checked against Python by the tests above).
class PlainBpe {
 public:
  PlainBpe(const nlohmann::json& doc, const Tokenizer& loaded) {
    for (int32_t id = 0; id < loaded.vocab_size(); ++id) {
      const std::string& bytes = loaded.token_bytes(id);
      if (bytes.size() == 1) byte_id_[static_cast<unsigned char>(bytes[0])] = id;
    }
    const auto& vocab = doc["model"]["vocab"];
    int32_t rank = 0;
    for (const auto& m : doc["model"]["merges"]) {
      const std::string text = m.get<std::string>();
      const size_t sp = text.find(' ');
      const std::string left = text.substr(0, sp), right = text.substr(sp + 1);
      merges_[{vocab.at(left).get<int32_t>(), vocab.at(right).get<int32_t>()}] = {rank++,
                                                                                  vocab.at(left + right)};
    }
  }

  std::vector<int32_t> encode(const std::string& text) const {
    auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
    std::vector<int32_t> out;
    for (size_t i = 0; i < text.size();) {
      size_t k = i + (text[i] == ' ' && i + 1 < text.size() && letter(text[i + 1]) ? 1 : 0);
      if (!letter(text[k])) {
        out.push_back(byte_id_[static_cast<unsigned char>(text[i])]);
        ++i;
        continue;
      }
      while (k < text.size() && letter(text[k])) ++k;
      std::vector<int32_t> sym;
      for (size_t j = i; j < k; ++j) sym.push_back(byte_id_[static_cast<unsigned char>(text[j])]);
      for (;;) {
        const std::pair<const std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>>* best = nullptr;
        for (size_t j = 0; j + 1 < sym.size(); ++j) {
          auto it = merges_.find({sym[j], sym[j + 1]});
          if (it != merges_.end() && (!best || it->second.first < best->second.first)) best = &*it;
        }
        if (!best) break;
        std::vector<int32_t> merged;
        for (size_t j = 0; j < sym.size();) {
          if (j + 1 < sym.size() && std::pair{sym[j], sym[j + 1]} == best->first) {
            merged.push_back(best->second.second);
            j += 2;
          } else {
            merged.push_back(sym[j++]);
          }
        }
        sym = std::move(merged);
      }
      out.insert(out.end(), sym.begin(), sym.end());
      i = k;
    }
    return out;
  }

 private:
  int32_t byte_id_[256] = {};
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>>
      merges_;  // (left, right) -> (rank, result)
};

// Letters mostly, with spaces, punctuation and newlines: long pieces, pieces with a leading space.
std::string random_text(std::mt19937& rng, size_t n, int letters_in_32) {
  const std::string other = " .,;:\n'!?0";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int>(rng() % 32) < letters_in_32) {
      const char base = rng() % 5 == 0 ? 'A' : 'a';
      // Skewed towards a few letters, so that long merges apply.
      s.push_back(static_cast<char>(base + (rng() % 3 == 0 ? rng() % 26 : "etaoinshr"[rng() % 9] - 'a')));
    } else {
      s.push_back(other[rng() % other.size()]);
    }
  }
  return s;
}

// A tokenizer loaded from a document (written to a temporary directory and read back).
Tokenizer load_document(const nlohmann::json& doc) {
  const fs::path dir = fs::temp_directory_path() / ("moe_tok_doc_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << doc.dump();
  Tokenizer t = Tokenizer::load(dir);
  fs::remove_all(dir);
  return t;
}

const Tokenizer& kjv() {
  static const Tokenizer t = Tokenizer::load(kSource / "models" / "kjv-moe");
  return t;
}

TEST(Tokenizer, LoadsTheCommittedFile) {
  EXPECT_EQ(kjv().vocab_size(), 1024);
  EXPECT_EQ(kjv().num_merges(), 768);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(kjv().token_bytes(b), std::string(1, static_cast<char>(b)));
  EXPECT_EQ(kjv().token_bytes(258), " the");
}

TEST(Tokenizer, MatchesThePythonReference) {
  const auto doc = nlohmann::json::parse(read_file(kSource / "tests" / "data" / "kjv_tokenizer_cases.json"));
  int n = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string text = from_hex(c.at("hex").get<std::string>());
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(kjv().encode(text), want) << printable(text);
    EXPECT_EQ(kjv().decode(want), text);
    ++n;
  }
  EXPECT_GE(n, 200);
}

TEST(Tokenizer, EncodesTheHeldOutTextLikePython) {
  const fs::path held = kCorpus / "heldout.txt";
  ASSERT_TRUE(fs::exists(held)) << held << " is missing: run scripts/fetch-corpus.sh " << kCorpus.string()
                                << " (packages from scripts/install-deps.sh)";
  const auto doc = nlohmann::json::parse(read_file(kSource / "tests" / "data" / "kjv_tokenizer_cases.json"));
  const std::string text = read_file(held);
  ASSERT_EQ(text.size(), doc["heldout"]["bytes"].get<size_t>());
  const std::vector<int32_t> ids = kjv().encode(text);
  EXPECT_EQ(ids.size(), doc["heldout"]["tokens"].get<size_t>());
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fnv1a64_ids(ids)));
  EXPECT_EQ(hex, doc["heldout"]["fnv1a64_ids"].get<std::string>());
  EXPECT_EQ(kjv().decode(ids), text);
}

// The heap-based merge loop against the plain one: the trained tokenizer on random text (pieces up to
// thousands of letters), and the same vocabulary with its merges shuffled, where a merge often needs a token
// that a later-ranked merge makes (rank order unlike training's; the rule still says what happens).
TEST(Tokenizer, HeapMergesEqualThePlainRule) {
  const auto doc = nlohmann::json::parse(read_file(kSource / "models" / "kjv-moe" / "tokenizer.json"));
  const PlainBpe plain(doc, kjv());
  std::mt19937 rng(7);
  for (int t = 0; t < 55; ++t) {
    const std::string text = random_text(rng, 1 + rng() % (t < 50 ? 300 : 2000),
                                         t % 3 == 0   ? 32
                                         : t % 3 == 1 ? 31
                                                      : 24);
    ASSERT_EQ(kjv().encode(text), plain.encode(text)) << printable(text.substr(0, 200));
  }
  auto shuffled = doc;
  std::shuffle(shuffled["model"]["merges"].begin(), shuffled["model"]["merges"].end(), rng);
  const Tokenizer tok = load_document(shuffled);
  const PlainBpe plain_shuffled(shuffled, tok);
  for (int t = 0; t < 60; ++t) {
    const std::string text = random_text(rng, 1 + rng() % 400, t % 2 ? 32 : 28);
    ASSERT_EQ(tok.encode(text), plain_shuffled.encode(text)) << printable(text.substr(0, 200));
  }
  // Only a pair of equal halves (the trained merges "l l", "c c", "p p") can overlap itself, so only runs of
  // them tell "left to right" from any other order.
  std::vector<std::string> texts = {"lll", "lllll", " llll", "ccc", "ppppppp", "allll", " the the the"};
  for (int t = 0; t < 40; ++t) {
    std::string run;
    for (size_t n = 1 + rng() % 60; run.size() < n;) run.push_back("lllccpa"[rng() % 7]);
    texts.push_back(run);
  }
  for (const std::string& text : texts) {
    EXPECT_EQ(kjv().encode(text), plain.encode(text)) << text;
    EXPECT_EQ(tok.encode(text), plain_shuffled.encode(text)) << text;
  }
}

// A merge ranked before the merge that makes its left half ("ab a" before "a b"): in "abab" the plain rule
// merges both "a b" first (ab ab); a loop that let the new pair (ab, a) jump ahead would give (aba b).
TEST(Tokenizer, EveryOccurrenceOfARankBeforeTheNextRank) {
  auto doc = nlohmann::json::parse(read_file(kSource / "models" / "kjv-moe" / "tokenizer.json"));
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [key, id] : doc["model"]["vocab"].items()) {
    if (id.get<int>() < 256) vocab[key] = id;
  }
  vocab["ab"] = 256;
  vocab["aba"] = 257;
  doc["model"]["vocab"] = vocab;
  doc["model"]["merges"] = nlohmann::json::array({"ab a", "a b"});
  const Tokenizer tok = load_document(doc);
  const PlainBpe plain(doc, tok);
  EXPECT_EQ(tok.encode("abab"), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(tok.encode("aba"), (std::vector<int32_t>{257}));  // ab a, then aba
  std::mt19937 rng(11);
  for (int t = 0; t < 50; ++t) {
    std::string text;
    for (size_t n = 1 + rng() % 40; text.size() < n;) text.push_back("ab"[rng() % 2]);
    EXPECT_EQ(tok.encode(text), plain.encode(text)) << text;
  }
}

// A megabyte-long run of letters (one piece) encodes and round-trips.
TEST(Tokenizer, LongPiecesRoundTrip) {
  std::mt19937 rng(3);
  const std::string text = random_text(rng, 1 << 20, 32);
  const std::vector<int32_t> ids = kjv().encode(text);
  EXPECT_LT(ids.size(), text.size());
  EXPECT_EQ(kjv().decode(ids), text);
}

TEST(Tokenizer, EdgeCases) {
  EXPECT_TRUE(kjv().encode("").empty());
  EXPECT_EQ(kjv().decode({}), "");
  // Every byte value round-trips, one token per non-letter byte.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(kjv().decode(kjv().encode(all)), all);
  EXPECT_EQ(kjv().encode(",\n!"), (std::vector<int32_t>{',', '\n', '!'}));
  const std::vector<int32_t> bad = {1, 1024};
  EXPECT_THROW(kjv().decode(bad), std::invalid_argument);
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(kjv().decode(negative), std::invalid_argument);
  EXPECT_EQ(printable("a\nb\\\x01\xff"), "a\\nb\\\\\\x01\\xFF");
}

TEST(Tokenizer, BadFilesAreNamed) {
  const fs::path dir = fs::temp_directory_path() / ("moe_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto good = nlohmann::json::parse(read_file(kSource / "models" / "kjv-moe" / "tokenizer.json"));
  auto expect_error = [&](const nlohmann::json& doc, const std::string& part) {
    std::ofstream(dir / "tokenizer.json") << doc.dump();
    try {
      Tokenizer::load(dir);
      ADD_FAILURE() << "no error, expected " << part;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto d = good;
  d["model"]["type"] = "WordPiece";
  expect_error(d, "model.type must be \"BPE\"");
  d = good;
  d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  expect_error(d, "pre_tokenizer must be");
  d = good;
  d["model"]["merges"].push_back("Ġthe zzzz");
  expect_error(d, "'zzzz' is not in the vocab");
  d = good;
  d["model"]["vocab"].erase("A");
  expect_error(d, "vocab id");
  d = good;
  d["added_tokens"] = nlohmann::json::array({{{"id", 0}, {"content", "<s>"}}});
  expect_error(d, "added (special) tokens");
  std::ofstream(dir / "tokenizer.json") << "{\"model\":";
  EXPECT_THROW(Tokenizer::load(dir), std::invalid_argument);
  fs::remove_all(dir);
  EXPECT_THROW(Tokenizer::load(dir), std::runtime_error);
}

}  // namespace
}  // namespace moe::model

// The C++ byte-level BPE tokenizer (moe/model/tokenizer.h) against the Python reference
// (python/train/bpe.py): the committed reference encodings tests/data/kjv_tokenizer_cases.json (empty,
// spaces, unicode, invalid UTF-8, every byte, random strings; tests/model_kjv_test.py checks the file equals
// a fresh Python run), the whole held-out text (its token count and FNV-1a hash over the ids), round trips,
// and bad tokenizer files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

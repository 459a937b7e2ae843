// A Hugging Face tokenizer.json (moe/model/tokenizer.h, Tokenizer::load): a byte-level BPE tokenizer whose
// vocab holds every byte and whose encode/decode round-trip any bytes with ids in range, or
// std::invalid_argument naming the problem.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "moe/model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = moe::fuzz::write_scratch("tokenizer.json", moe::fuzz::as_string(data, size));
  try {
    const moe::model::Tokenizer t = moe::model::Tokenizer::load(path);
    MOE_FUZZ_CHECK(t.vocab_size() >= 256);
    // Every byte, then text whose letter runs the merges can join (the loader accepted them).
    std::string text;
    for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
    text +=
        "In the beginning God created the heaven and the earth.\n And the earth was without form, and void;";
    const std::vector<int32_t> ids = t.encode(text);
    for (int32_t id : ids) MOE_FUZZ_CHECK(id >= 0 && id < t.vocab_size());
    MOE_FUZZ_CHECK(t.decode(ids) == text);
    MOE_FUZZ_CHECK(ids.size() <= text.size());
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

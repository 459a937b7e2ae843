// A Hugging Face config.json (moe/io/pretrained.h, read_pretrained_config): a config whose layer shape is
// valid and whose top_k fits its experts, or std::invalid_argument / io::IoError naming the key.
#include <stdexcept>

#include "fuzz/fuzz_util.h"
#include "moe/io/pretrained.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = moe::fuzz::write_scratch("config.json", moe::fuzz::as_string(data, size));
  try {
    const moe::io::PretrainedConfig c = moe::io::read_pretrained_config(path);
    bool valid = true;
    try {
      c.layer.validate_for(c.architecture);
    } catch (const std::invalid_argument&) {
      valid = false;
    }
    MOE_FUZZ_CHECK(valid);
    MOE_FUZZ_CHECK(c.top_k >= 1 && c.top_k <= c.layer.num_experts);
    MOE_FUZZ_CHECK(c.num_layers >= 1 && c.vocab_size >= 1 && c.num_heads >= 1);
  } catch (const std::invalid_argument&) {
  } catch (const moe::io::IoError&) {
  }
  return 0;
}

// A Hugging Face config.json (moe/io/pretrained.h, read_pretrained_config): a config whose layer shape is
// valid, whose top_k fits its experts and whose MoE layers are layers, or std::invalid_argument /
// io::IoError naming the key.
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
    MOE_FUZZ_CHECK(c.router.top_k >= 1 && c.router.top_k <= c.layer.num_experts);
    MOE_FUZZ_CHECK(!c.moe_layers.empty() && c.moe_layers.front() >= 0 && c.moe_layers.back() < c.num_layers);
    MOE_FUZZ_CHECK(c.num_layers >= 1 && c.vocab_size >= 1 && c.num_heads >= 1);
  } catch (const std::invalid_argument&) {
  } catch (const moe::io::IoError&) {
  }
  return 0;
}

// A whole moe-model weights file (moe/model/model_weights.h, load_model): weights that fit their shape, or
// std::invalid_argument / io::IoError. Nothing is allocated for a tensor before its shape is checked against
// the metadata and its bytes against the file.
#include <stdexcept>

#include "fuzz/fuzz_util.h"
#include "moe/model/model_weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = moe::fuzz::write_scratch("fuzz.moe-model.safetensors", moe::fuzz::as_string(data, size));
  try {
    const auto w = moe::model::load_model(path);
    w->validate();
    MOE_FUZZ_CHECK(static_cast<int>(w->layers.size()) == w->shape.num_layers);
  } catch (const std::invalid_argument&) {
  } catch (const moe::io::IoError&) {
  }
  return 0;
}

// GGUF files (moe/io/gguf.h, gguf_config.h, gguf_layer.h) through the real entry points (a file, mapped):
// the header is refused with std::invalid_argument (contents) / io::IoError (the OS), or every tensor it
// lists lies inside the file with ne[0] a multiple of its type's block and blocks x block bytes bytes, no two
// overlapping, and every metadata value decodes. A file that also reads as an MoE model has a valid layer
// shape, and its first MoE layer loads (as stored and dequantized to f32) or is refused by name.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "moe/io/gguf.h"
#include "moe/io/gguf_config.h"
#include "moe/io/gguf_layer.h"
#include "moe/io/gguf_model.h"

namespace {

void visit(const moe::io::GgufValue& v, int depth) {
  MOE_FUZZ_CHECK(depth <= 8);
  (void)v.describe();
  if (v.type() != moe::io::GgufValueType::kArray) return;
  const std::vector<moe::io::GgufValue> elements = v.elements();
  MOE_FUZZ_CHECK(elements.size() == v.size());
  for (const moe::io::GgufValue& e : elements) {
    MOE_FUZZ_CHECK(e.type() == v.element_type());
    visit(e, depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = moe::fuzz::write_scratch("fuzz.gguf", moe::fuzz::as_string(data, size));
  try {
    const auto model = moe::io::GgufModel::open(path);
    const moe::io::GgufFile& file = model->shards().front();
    for (const moe::io::GgufFile::Entry& e : file.metadata()) {
      MOE_FUZZ_CHECK(!e.key.empty());
      MOE_FUZZ_CHECK(file.find(e.key) != nullptr);
      visit(e.value, 0);
    }
    std::vector<const moe::io::GgufTensorInfo*> order;
    for (const moe::io::GgufTensorInfo& t : file.tensors()) {
      MOE_FUZZ_CHECK(file.tensor(t.name) == &t);
      MOE_FUZZ_CHECK(t.ne[0] % t.type_info.block_elements == 0);
      MOE_FUZZ_CHECK(t.nbytes == static_cast<uint64_t>(t.elements() / t.type_info.block_elements) *
                                     static_cast<uint64_t>(t.type_info.block_bytes));
      MOE_FUZZ_CHECK(t.offset % file.alignment() == 0 && t.offset >= file.data_offset());
      MOE_FUZZ_CHECK(t.offset + t.nbytes <= size);
      if (t.nbytes > 0) {
        volatile std::byte first = t.data[0], last = t.data[t.nbytes - 1];
        (void)first;
        (void)last;
        order.push_back(&t);
      }
    }
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < order.size(); ++i)
      MOE_FUZZ_CHECK(order[i - 1]->offset + order[i - 1]->nbytes <= order[i]->offset);
    const moe::io::PretrainedConfig config = moe::io::read_gguf_config(*model);
    config.layer.validate_for(config.architecture);
    MOE_FUZZ_CHECK(config.router.top_k <= config.layer.num_experts && !config.moe_layers.empty());
    moe::io::check_gguf(config, *model);
    // As stored (views of the blocks, every scale checked), then dequantized to f32.
    const moe::io::LayerWeights stored = moe::io::load_gguf_layer(model, config, config.moe_layers.front());
    MOE_FUZZ_CHECK(static_cast<int>(stored.experts().size()) == config.layer.num_experts);
    const moe::io::LayerWeights w =
        moe::io::load_gguf_layer(model, config, config.moe_layers.front(), moe::kernels::DType::kF32);
    MOE_FUZZ_CHECK(w.content_hash() == w.content_hash() && w.storage() == moe::kernels::DType::kF32);
  } catch (const std::invalid_argument&) {
  } catch (const moe::io::IoError&) {
  } catch (const moe::io::OutOfMemory&) {
  }
  return 0;
}

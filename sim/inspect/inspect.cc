#include "sim/inspect/inspect.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "moe/io/checkpoint.h"
#include "moe/io/io_error.h"
#include "moe/io/memory.h"
#include "moe/io/pretrained.h"
#include "sim/inspect/config_text.h"
#include "sim/inspect/inspect_gguf.h"

namespace moe::sim {
namespace {

// The tensors of one layer's block (their names start with `prefix`): count, bytes as stored, dtypes.
struct LayerFiles {
  int tensors = 0;
  uint64_t bytes = 0;
  std::map<std::string, int> dtypes;
};

LayerFiles layer_files(const io::Checkpoint& ckpt, const std::string& prefix) {
  LayerFiles f;
  for (const std::string& name : ckpt.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::optional<io::RawTensor> t = ckpt.raw(name);
    if (!t) continue;
    ++f.tensors;
    f.bytes += t->nbytes;
    ++f.dtypes[*t->dtype];
  }
  return f;
}

std::string dtypes_text(const std::map<std::string, int>& dtypes) {
  std::string out;
  for (const auto& [dtype, n] : dtypes) out += (out.empty() ? "" : ", ") + dtype + " x" + std::to_string(n);
  return out;
}

// A summary of a checkpoint's files when its config is refused: what the tensors are.
void describe_files(const std::filesystem::path& dir, std::ostream& out) {
  try {
    const io::Checkpoint ckpt(dir);
    std::map<std::string, int> dtypes;
    uint64_t bytes = 0;
    const std::vector<std::string> names = ckpt.names();
    for (const std::string& n : names) {
      const std::optional<io::RawTensor> t = ckpt.raw(n);
      if (!t) continue;
      ++dtypes[*t->dtype];
      bytes += t->nbytes;
    }
    out << "weights     " << ckpt.shards().size() << " file(s), " << names.size() << " tensors, "
        << io::format_bytes(bytes) << " (" << dtypes_text(dtypes) << ")\n";
  } catch (const std::exception& e) {
    out << "weights     " << e.what() << "\n";
  }
}

}  // namespace

int inspect_checkpoint(const std::filesystem::path& dir_or_config, std::ostream& out) {
  if (io::is_gguf_path(dir_or_config)) return inspect_gguf(dir_or_config, out);
  const std::filesystem::path dir = io::pretrained_dir(dir_or_config);
  out << "checkpoint  " << dir.string() << "\n";
  io::PretrainedConfig c;
  try {
    c = io::read_pretrained_config(dir_or_config);
  } catch (const std::invalid_argument& e) {
    // What config.json says it is, and why it does not load here.
    std::ifstream f(dir / "config.json");
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    const std::string mt = j.is_object() && j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>()
                               : std::string("?");
    out << "family      " << mt << ": not loadable here\n";
    out << "refused     " << e.what() << "\n";
    describe_files(dir, out);
    return 1;
  }
  out << "family      " << c.model_type << " (" << io::display_name(c.architecture) << ")";
  if (!c.torch_dtype.empty()) out << ", torch_dtype " << c.torch_dtype;
  out << "\n";
  out << "layers      " << layers_text(c) << "\n";
  const io::LayerShape& s = c.layer;
  out << "MoE layer   " << layer_text(c) << "\n";
  out << "router      " << scoring_text(c) << "\n";
  out << "experts     " << expert_text(c) << "\n";
  out << "quantized   " << io::to_string(c.quantization);
  if (c.quantization == io::Quantization::kFp8Block) {
    out << ", weight_block_size [" << c.fp8_block.rows << ", " << c.fp8_block.cols << "]";
  }
  if (c.quantization != io::Quantization::kNone) out << ": dequantized exactly on load to the storage dtype";
  out << "\n";
  const uint64_t gate_bytes = static_cast<uint64_t>(s.num_experts) * static_cast<uint64_t>(s.hidden) * 4;
  const uint64_t elements = s.expert_bytes(kernels::DType::kF32) / 4;
  out << "memory      per MoE layer, expert matrices: ";
  if (c.quantization == io::Quantization::kFp8Block) {  // a byte per element + an f32 scale per block
    out << io::format_bytes(elements +
                            4 * elements / static_cast<uint64_t>(c.fp8_block.rows * c.fp8_block.cols))
        << " in FP8 as stored, ";
  } else if (c.quantization == io::Quantization::kMxfp4) {  // half a byte per element + a byte per 32
    out << io::format_bytes(elements / 2 + elements / 32) << " in MXFP4 as stored, ";
  }
  out << io::format_bytes(s.expert_bytes(kernels::DType::kBF16)) << " in bf16, "
      << io::format_bytes(s.expert_bytes(kernels::DType::kF32)) << " in f32 (+ router gate "
      << io::format_bytes(gate_bytes) << " f32); all " << c.moe_layers.size() << " MoE layers in bf16: "
      << io::format_bytes(s.expert_bytes(kernels::DType::kBF16) * c.moe_layers.size()) << "\n";
  int status = 0;
  try {
    const io::Pretrained p = io::open_pretrained(dir_or_config);
    const int layer = c.moe_layers.front();
    const char* block = c.architecture == io::Architecture::kMixtral  ? "block_sparse_moe."
                        : c.architecture == io::Architecture::kLlama4 ? "feed_forward."
                                                                      : "mlp.";
    const std::string root = c.model_type == "llama4" ? "language_model.model." : "model.";
    const LayerFiles f = layer_files(*p.checkpoint, root + "layers." + std::to_string(layer) + "." + block);
    out << "weights     " << p.checkpoint->shards().size() << " file(s), " << p.checkpoint->names().size()
        << " tensors; MoE layer " << layer << ": " << f.tensors << " tensors, " << io::format_bytes(f.bytes)
        << " as stored (" << dtypes_text(f.dtypes) << ")\n";
    if (const auto avail = io::available_memory_bytes()) {
      out << "this host   " << io::format_bytes(*avail) << " available: one MoE layer "
          << (s.expert_bytes(kernels::DType::kBF16) <= *avail ? "fits" : "does NOT fit") << " in bf16, "
          << (s.expert_bytes(kernels::DType::kF32) <= *avail ? "fits" : "does NOT fit") << " in f32\n";
    }
  } catch (const io::IoError& e) {
    out << "weights     none readable here (" << e.what() << ")\n";
    status = 1;
  } catch (const std::invalid_argument& e) {
    out << "weights     do not match config.json: " << e.what() << "\n";
    status = 1;
  }
  out << "supported   every MoE layer (" << c.moe_layer_list()
      << ") loads from this directory alone: MoELayer::from_pretrained(dir, i), moe_layer_create_pretrained, "
         "moe.Layer.from_pretrained(dir, layer=i), on the CPU, the GPU and expert-parallel layers; "
         "attention, "
         "norms, embeddings and the dense MLP layers are the serving engine's ("
      << (c.architecture == io::Architecture::kMixtral ? "moe::model runs whole Mixtral decoders"
                                                       : "moe::model runs whole Mixtral decoders only")
      << ")\n";
  return status;
}

std::shared_ptr<int> add_inspect_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto status = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "what a checkpoint (a Hugging Face directory or a GGUF file) holds: family, layers and which are MoE, "
      "router semantics, shapes, dtypes, memory per layer, and what this project supports of it (config.json "
      "and the safetensors headers, or the GGUF header, only)");
  cmd->add_option("checkpoint", *dir,
                  "checkpoint directory (or its config.json), or a .gguf file (any shard of "
                  "a split one)")
      ->required()
      ->type_name("PATH");
  cmd->callback([dir, status] { *status = inspect_checkpoint(*dir, std::cout); });
  return status;
}

}  // namespace moe::sim

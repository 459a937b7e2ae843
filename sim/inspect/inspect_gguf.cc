#include "sim/inspect/inspect_gguf.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "moe/io/gguf_config.h"
#include "moe/io/gguf_layer.h"
#include "moe/io/gguf_model.h"
#include "moe/io/gguf_names.h"
#include "moe/io/io_error.h"
#include "moe/io/memory.h"
#include "sim/inspect/config_text.h"

namespace moe::sim {
namespace {

// The tensors of one MoE layer that the loader reads: names, and whether each is an expert matrix (stored in
// the layer's storage dtype once loaded) or a router / bias vector (fp32).
struct LayerTensor {
  const io::GgufTensorInfo* info;
  bool matrix;
};

std::vector<LayerTensor> layer_tensors(const io::GgufModel& m, const io::PretrainedConfig& c, int layer) {
  const io::GgufLayerNames n(layer);
  std::vector<LayerTensor> out;
  auto add = [&](const std::string& name, bool matrix) {
    if (const io::GgufTensorInfo* t = m.tensor(name)) out.push_back({t, matrix});
  };
  add(n.router(), false);
  add(n.router_bias(), false);
  add(n.score_bias(), false);
  add(n.gate_up_exps(), true);
  add(n.gate_exps(), true);
  add(n.up_exps(), true);
  add(n.down_exps(), true);
  add(n.gate_exps_bias(), false);
  add(n.up_exps_bias(), false);
  add(n.down_exps_bias(), false);
  if (!m.tensor(n.gate_exps()) && !m.tensor(n.gate_up_exps())) {
    for (int e = 0; e < c.layer.num_experts; ++e) {
      add(n.gate_expert(e), true);
      add(n.up_expert(e), true);
      add(n.down_expert(e), true);
    }
  }
  add(n.gate_shexp(), true);
  add(n.up_shexp(), true);
  add(n.down_shexp(), true);
  add(n.shexp_gate(), false);
  return out;
}

// A layer's bytes as stored and in each storage dtype, and its tensor types.
struct LayerBytes {
  uint64_t stored = 0, bf16 = 0, f32 = 0;
  std::map<std::string, int> types;
  bool operator==(const LayerBytes&) const = default;
};

LayerBytes layer_bytes(const std::vector<LayerTensor>& tensors) {
  LayerBytes b;
  for (const LayerTensor& t : tensors) {
    const uint64_t n = static_cast<uint64_t>(t.info->elements());
    b.stored += t.info->nbytes;
    b.bf16 += t.matrix ? 2 * n : 4 * n;
    b.f32 += 4 * n;
    ++b.types[std::string(t.info->type_info.name)];
  }
  return b;
}

std::string types_text(const std::map<std::string, int>& types) {
  std::string out;
  for (const auto& [type, n] : types) out += (out.empty() ? "" : ", ") + type + " x" + std::to_string(n);
  return out;
}

std::string layer_range(int first, int last) {
  return first == last ? "layer " + std::to_string(first)
                       : "layers " + std::to_string(first) + "-" + std::to_string(last);
}

void describe_file(const io::GgufModel& m, std::ostream& out) {
  std::map<std::string, std::pair<int, uint64_t>> types;
  uint64_t bytes = 0;
  for (const io::GgufFile& s : m.shards()) {
    for (const io::GgufTensorInfo& t : s.tensors()) {
      auto& [count, total] = types[std::string(t.type_info.name)];
      ++count;
      total += t.nbytes;
    }
    bytes += s.file_bytes();
  }
  out << "format      GGUF v" << m.shards().front().version() << ", " << m.shards().size()
      << (m.shards().size() == 1 ? " file, " : " files, ") << m.tensor_count() << " tensors, "
      << io::format_bytes(bytes) << " (";
  bool first = true;
  for (const auto& [type, ct] : types) {
    out << (first ? "" : ", ") << type << " x" << ct.first;
    first = false;
  }
  out << ")";
  if (const io::GgufValue* ft = m.find("general.file_type")) {
    if (const auto v = ft->as_int()) out << "; general.file_type " << io::llama_ftype_name(*v);
  }
  out << "\n";
}

}  // namespace

int inspect_gguf(const std::filesystem::path& path, std::ostream& out) {
  out << "checkpoint  " << path.string() << "\n";
  std::shared_ptr<const io::GgufModel> model;
  try {
    model = io::GgufModel::open(path);
  } catch (const std::invalid_argument& e) {
    out << "refused     " << e.what() << "\n";
    return 1;
  }
  const io::GgufModel& m = *model;
  describe_file(m, out);
  io::PretrainedConfig c;
  try {
    c = io::read_gguf_config(m);
  } catch (const std::invalid_argument& e) {
    const io::GgufValue* arch = m.find("general.architecture");
    out << "family      "
        << (arch && arch->as_string() ? io::gguf_printable(*arch->as_string()) : std::string("?"))
        << ": not loadable here\n";
    out << "refused     " << e.what() << "\n";
    return 1;
  }
  out << "family      " << c.model_type << " (" << io::display_name(c.architecture)
      << "), llama.cpp's names and keys\n";
  out << "layers      " << layers_text(c) << "\n";
  out << "MoE layer   " << layer_text(c) << "\n";
  out << "router      " << scoring_text(c) << "\n";
  out << "experts     " << expert_text(c) << "\n";
  int status = 0;
  try {
    io::check_gguf(c, m);
  } catch (const std::invalid_argument& e) {
    out << "refused     the tensors do not match the metadata: " << e.what() << "\n";
    return 1;
  }
  const int first = c.moe_layers.front();
  const std::vector<LayerTensor> tensors = layer_tensors(m, c, first);
  out << "tensors     MoE layer " << first << " (blk." << first << "):\n";
  const size_t prefix = io::GgufLayerNames(first).prefix.size();
  size_t width = 0;
  for (const LayerTensor& t : tensors) width = std::max(width, t.info->name.size() - prefix);
  const size_t shown = std::min<size_t>(tensors.size(), 12);
  for (size_t i = 0; i < shown; ++i) {
    const io::GgufTensorInfo& t = *tensors[i].info;
    const std::string name(t.name.substr(prefix));
    out << "              " << std::left << std::setw(static_cast<int>(width)) << name << "  " << std::setw(5)
        << t.type_info.name << "  " << std::setw(16) << t.shape_text() << " " << std::right
        << io::format_bytes(t.nbytes) << "\n";
  }
  if (tensors.size() > shown) out << "              ... (" << tensors.size() - shown << " more)\n";
  // Each MoE layer's bytes, consecutive layers of the same sizes and types on one line.
  std::vector<std::pair<std::pair<int, int>, LayerBytes>> groups;
  uint64_t stored_total = 0;
  for (int layer : c.moe_layers) {
    const LayerBytes b = layer_bytes(layer_tensors(m, c, layer));
    stored_total += b.stored;
    if (!groups.empty() && groups.back().second == b && groups.back().first.second + 1 == layer) {
      groups.back().first.second = layer;
    } else {
      groups.push_back({{layer, layer}, b});
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& [range, b] = groups[g];
    out << (g == 0 ? "memory      " : "            ") << layer_range(range.first, range.second) << ": "
        << io::format_bytes(b.stored) << " as stored (" << types_text(b.types) << "), "
        << io::format_bytes(b.bf16) << " in bf16 storage, " << io::format_bytes(b.f32) << " in f32 storage\n";
  }
  out << "            all " << c.moe_layers.size() << " MoE layers: " << io::format_bytes(stored_total)
      << " as stored\n";
  if (const auto avail = io::available_memory_bytes()) {
    const LayerBytes& b = groups.front().second;
    out << "this host   " << io::format_bytes(*avail) << " available: one MoE layer "
        << (b.stored <= *avail ? "fits" : "does NOT fit") << " as stored, "
        << (b.bf16 <= *avail ? "fits" : "does NOT fit") << " in bf16, "
        << (b.f32 <= *avail ? "fits" : "does NOT fit") << " in f32\n";
  }
  for (int layer : c.moe_layers) {
    try {
      io::check_gguf_layer(m, c, layer);
    } catch (const std::invalid_argument& e) {
      out << "refused     MoE layer " << layer << ": " << e.what() << "\n";
      status = 1;
      break;
    }
  }
  if (status == 0) {
    out << "supported   every MoE layer (" << c.moe_layer_list()
        << ") loads from this file alone: MoELayer::from_pretrained(file, i), moe_layer_create_pretrained, "
           "moe.Layer.from_pretrained(file, layer=i), on the CPU, the GPU and expert-parallel layers; "
           "attention, norms, embeddings and the dense MLP layers are the serving engine's\n";
  }
  return status;
}

}  // namespace moe::sim

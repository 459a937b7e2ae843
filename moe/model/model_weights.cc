#include "moe/model/model_weights.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "base/splitmix64.h"
#include "moe/io/checkpoint.h"
#include "moe/io/pretrained.h"
#include "moe/io/safetensors.h"

namespace moe::model {
namespace {

constexpr const char* kFormat = "moe-model/1";

std::string layer_prefix(int i) {
  return "model.layers." + std::to_string(i) + ".";
}

// Uniform in [-a, a) from the tensor's own stream.
std::vector<float> uniform_tensor(uint64_t seed, const std::string& name, size_t count, float a) {
  SplitMix64 rng(stream_key(seed, name));
  std::vector<float> out(count);
  for (auto& v : out) v = (2.0f * rng.uniform_float() - 1.0f) * a;
  return out;
}

void check_size(const std::vector<float>& t, size_t expected, const std::string& name) {
  if (t.size() != expected) {
    throw std::invalid_argument("ModelWeights: " + name + " has " + std::to_string(t.size()) +
                                " elements but the shape needs " + std::to_string(expected));
  }
}

// Rows of a MatrixView (fp32 storage) copied contiguously.
std::vector<float> copy_matrix(const kernels::MatrixView& m) {
  if (m.dtype != kernels::DType::kF32) throw std::invalid_argument("save_model: MoE weights must be fp32");
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  const float* src = static_cast<const float*>(m.data);
  for (int64_t r = 0; r < m.rows; ++r) {
    std::memcpy(out.data() + r * m.cols, src + r * m.row_stride, sizeof(float) * m.cols);
  }
  return out;
}

const std::string& meta_text(const std::map<std::string, std::string>& meta, const std::string& key,
                             const std::string& where) {
  auto it = meta.find(key);
  if (it == meta.end()) throw std::invalid_argument("load_model: " + where + " lacks metadata '" + key + "'");
  return it->second;
}

int meta_int(const std::map<std::string, std::string>& meta, const std::string& key,
             const std::string& where) {
  const std::string& text = meta_text(meta, key, where);
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw std::invalid_argument("load_model: " + where + ": metadata '" + key + "' = '" + text +
                                "' is not an integer in [-2^31, 2^31)");
  }
  return v;
}

float meta_float(const std::map<std::string, std::string>& meta, const std::string& key,
                 const std::string& where) {
  const std::string& text = meta_text(meta, key, where);
  char* end = nullptr;
  errno = 0;
  const float v = text.empty() ? 0.0f : std::strtof(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v)) {
    throw std::invalid_argument("load_model: " + where + ": metadata '" + key + "' = '" + text +
                                "' is not a finite float");
  }
  return v;
}

std::string float_text(float v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
  return buf;
}

std::vector<float> read_dense(const io::Checkpoint& ckpt, const std::string& name,
                              std::vector<int64_t> expected_shape) {
  const io::TensorInfo& t = ckpt.get(name);
  if (t.shape != expected_shape) {
    auto text = [](const std::vector<int64_t>& s) {
      std::string out = "[";
      for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
      return out + "]";
    };
    throw std::invalid_argument("load_model: " + name + ": shape " + text(t.shape) + " but expected " +
                                text(expected_shape));
  }
  size_t count = 1;
  for (int64_t d : expected_shape) count *= static_cast<size_t>(d);
  if (t.dtype != kernels::DType::kF32) {
    throw std::invalid_argument("load_model: " + name + " has dtype " +
                                std::string(io::safetensors_dtype_name(t.dtype)) + " but F32 is required");
  }
  std::vector<float> out(count);
  std::memcpy(out.data(), t.data, count * sizeof(float));
  return out;
}

// The tensors of a model of shape `s` (validated) from `ckpt` (the layout of save_model).
std::shared_ptr<const ModelWeights> read_model(const std::shared_ptr<const io::Checkpoint>& ckpt_ptr,
                                               const ModelShape& s) {
  const io::Checkpoint& ckpt = *ckpt_ptr;
  auto w = std::make_shared<ModelWeights>();
  w->shape = s;
  const int64_t d = s.hidden;
  w->embedding = read_dense(ckpt, "model.embed_tokens.weight", {s.vocab_size, d});
  for (int i = 0; i < s.num_layers; ++i) {
    const std::string p = layer_prefix(i);
    BlockWeights b;
    b.attn_norm = read_dense(ckpt, p + "input_layernorm.weight", {d});
    b.wq = read_dense(ckpt, p + "self_attn.q_proj.weight", {d, d});
    b.wk = read_dense(ckpt, p + "self_attn.k_proj.weight", {d, d});
    b.wv = read_dense(ckpt, p + "self_attn.v_proj.weight", {d, d});
    b.wo = read_dense(ckpt, p + "self_attn.o_proj.weight", {d, d});
    b.moe_norm = read_dense(ckpt, p + "post_attention_layernorm.weight", {d});
    b.moe = std::make_shared<const io::LayerWeights>(io::load_layer(
        ckpt_ptr, io::Architecture::kMixtral, i, ModelWeights::moe_shape(s), kernels::DType::kF32));
    w->layers.push_back(std::move(b));
  }
  w->final_norm = read_dense(ckpt, "model.norm.weight", {d});
  w->lm_head = read_dense(ckpt, "lm_head.weight", {s.vocab_size, d});
  w->validate();
  return w;
}

}  // namespace

io::LayerShape ModelWeights::moe_shape(const ModelShape& shape) {
  io::LayerShape s;
  s.hidden = shape.hidden;
  s.expert_ff = shape.expert_ff;
  s.num_experts = shape.num_experts;
  return s;
}

void ModelWeights::validate() const {
  shape.validate();
  const size_t d = shape.hidden;
  const size_t v = shape.vocab_size;
  check_size(embedding, v * d, "model.embed_tokens.weight");
  check_size(final_norm, d, "model.norm.weight");
  check_size(lm_head, v * d, "lm_head.weight");
  if (layers.size() != static_cast<size_t>(shape.num_layers)) {
    throw std::invalid_argument("ModelWeights: " + std::to_string(layers.size()) +
                                " layers but the shape has " + std::to_string(shape.num_layers));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = layer_prefix(static_cast<int>(i));
    const BlockWeights& b = layers[i];
    check_size(b.attn_norm, d, p + "input_layernorm.weight");
    check_size(b.wq, d * d, p + "self_attn.q_proj.weight");
    check_size(b.wk, d * d, p + "self_attn.k_proj.weight");
    check_size(b.wv, d * d, p + "self_attn.v_proj.weight");
    check_size(b.wo, d * d, p + "self_attn.o_proj.weight");
    check_size(b.moe_norm, d, p + "post_attention_layernorm.weight");
    if (!b.moe) throw std::invalid_argument("ModelWeights: " + p + "block_sparse_moe is missing");
    if (!(b.moe->shape() == moe_shape(shape))) {
      throw std::invalid_argument("ModelWeights: " + p + "block_sparse_moe does not fit the model shape");
    }
    if (b.moe->storage() != kernels::DType::kF32) {
      throw std::invalid_argument("ModelWeights: " + p + "block_sparse_moe must have fp32 storage");
    }
  }
}

std::shared_ptr<const ModelWeights> random_model(const ModelShape& shape, uint64_t seed,
                                                 const RandomInit& init) {
  shape.validate();
  auto w = std::make_shared<ModelWeights>();
  w->shape = shape;
  const size_t d = shape.hidden;
  const size_t v = shape.vocab_size;
  const float dense_a = std::sqrt(3.0f / static_cast<float>(d));
  w->embedding = uniform_tensor(seed, "model.embed_tokens.weight", v * d, std::sqrt(3.0f));
  w->final_norm.assign(d, 1.0f);
  w->lm_head = uniform_tensor(seed, "lm_head.weight", v * d, init.lm_head_gain * dense_a);
  for (int i = 0; i < shape.num_layers; ++i) {
    const std::string p = layer_prefix(i);
    BlockWeights b;
    b.attn_norm.assign(d, 1.0f);
    b.wq = uniform_tensor(seed, p + "self_attn.q_proj.weight", d * d, dense_a);
    b.wk = uniform_tensor(seed, p + "self_attn.k_proj.weight", d * d, dense_a);
    b.wv = uniform_tensor(seed, p + "self_attn.v_proj.weight", d * d, dense_a);
    b.wo = uniform_tensor(seed, p + "self_attn.o_proj.weight", d * d, dense_a);
    b.moe_norm.assign(d, init.moe_norm_gain);
    b.moe = std::make_shared<const io::LayerWeights>(io::random_layer(
        ModelWeights::moe_shape(shape), kernels::DType::kF32, mix64(seed ^ mix64(1000 + i))));
    w->layers.push_back(std::move(b));
  }
  w->validate();
  return w;
}

void save_model(const ModelWeights& weights, const std::filesystem::path& path) {
  weights.validate();
  const ModelShape& s = weights.shape;
  const int64_t d = s.hidden;
  // Owned copies of the MoE tensors (views may have strides); dense tensors are written from the weights.
  std::vector<std::vector<float>> moe_buffers;
  std::vector<io::TensorToWrite> tensors;
  auto add = [&](const std::string& name, const std::vector<float>& data, std::vector<int64_t> shape) {
    tensors.push_back({name, "F32", std::move(shape),
                       std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()),
                                                  data.size() * sizeof(float))});
  };
  moe_buffers.reserve(static_cast<size_t>(s.num_layers) * (1 + 3 * s.num_experts));
  add("model.embed_tokens.weight", weights.embedding, {s.vocab_size, d});
  for (int i = 0; i < s.num_layers; ++i) {
    const std::string p = layer_prefix(i);
    const BlockWeights& b = weights.layers[i];
    add(p + "input_layernorm.weight", b.attn_norm, {d});
    add(p + "self_attn.q_proj.weight", b.wq, {d, d});
    add(p + "self_attn.k_proj.weight", b.wk, {d, d});
    add(p + "self_attn.v_proj.weight", b.wv, {d, d});
    add(p + "self_attn.o_proj.weight", b.wo, {d, d});
    add(p + "post_attention_layernorm.weight", b.moe_norm, {d});
    const std::string m = p + "block_sparse_moe.";
    moe_buffers.push_back(copy_matrix(b.moe->router_gate()));
    add(m + "gate.weight", moe_buffers.back(), {s.num_experts, d});
    for (int e = 0; e < s.num_experts; ++e) {
      const io::ExpertTensors& x = b.moe->experts()[e];
      const std::string ep = m + "experts." + std::to_string(e) + ".";
      moe_buffers.push_back(copy_matrix(x.gate_proj));
      add(ep + "w1.weight", moe_buffers.back(), {s.expert_ff, d});
      moe_buffers.push_back(copy_matrix(x.up_proj));
      add(ep + "w3.weight", moe_buffers.back(), {s.expert_ff, d});
      moe_buffers.push_back(copy_matrix(x.down_proj));
      add(ep + "w2.weight", moe_buffers.back(), {d, s.expert_ff});
    }
  }
  add("model.norm.weight", weights.final_norm, {d});
  add("lm_head.weight", weights.lm_head, {s.vocab_size, d});
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"vocab_size", std::to_string(s.vocab_size)},
      {"hidden", std::to_string(s.hidden)},
      {"num_layers", std::to_string(s.num_layers)},
      {"num_heads", std::to_string(s.num_heads)},
      {"num_experts", std::to_string(s.num_experts)},
      {"top_k", std::to_string(s.top_k)},
      {"expert_ff", std::to_string(s.expert_ff)},
      {"max_positions", std::to_string(s.max_positions)},
      {"rms_eps", float_text(s.rms_eps)},
      {"rope_theta", float_text(s.rope_theta)},
  };
  io::write_safetensors(path, tensors, meta);
}

ModelShape shape_from_metadata(const std::map<std::string, std::string>& meta, const std::string& where) {
  auto fmt = meta.find("format");
  if (fmt == meta.end() || fmt->second != kFormat) {
    throw std::invalid_argument("load_model: " + where + " is not a " + kFormat +
                                " file (metadata 'format' missing or different)");
  }
  ModelShape s;
  s.vocab_size = meta_int(meta, "vocab_size", where);
  s.hidden = meta_int(meta, "hidden", where);
  s.num_layers = meta_int(meta, "num_layers", where);
  s.num_heads = meta_int(meta, "num_heads", where);
  s.num_experts = meta_int(meta, "num_experts", where);
  s.top_k = meta_int(meta, "top_k", where);
  s.expert_ff = meta_int(meta, "expert_ff", where);
  s.max_positions = meta_int(meta, "max_positions", where);
  s.rms_eps = meta_float(meta, "rms_eps", where);
  s.rope_theta = meta_float(meta, "rope_theta", where);
  s.validate();
  return s;
}

std::shared_ptr<const ModelWeights> load_model(const std::filesystem::path& path) {
  auto ckpt = io::Checkpoint::open(path);
  if (ckpt->shards().size() != 1) {
    throw std::invalid_argument("load_model: " + path.string() + " must be a single safetensors file");
  }
  const ModelShape s = shape_from_metadata(ckpt->shards()[0].metadata(), path.string());

  return read_model(ckpt, s);
}

ModelShape shape_from_pretrained(const io::PretrainedConfig& c, const std::filesystem::path& dir) {
  auto reject = [&](const std::string& what) {
    throw std::invalid_argument("load_pretrained: " + (dir / "config.json").string() + ": " + what +
                                " (moe::model runs Mixtral with multi-head attention, untied embeddings, "
                                "SiLU experts, no sliding window)");
  };
  if (c.architecture != io::Architecture::kMixtral) {
    reject("model_type is '" + c.model_type + "' (load its MoE layers with moe::MoELayer::from_pretrained)");
  }
  if (c.num_kv_heads != c.num_heads) {
    reject("num_key_value_heads (" + std::to_string(c.num_kv_heads) + ") differs from num_attention_heads (" +
           std::to_string(c.num_heads) + ")");
  }
  if (c.tie_word_embeddings) reject("tie_word_embeddings is true");
  if (c.hidden_act != "silu") reject("hidden_act is '" + c.hidden_act + "', not 'silu'");
  if (c.sliding_window) reject("sliding_window is " + std::to_string(*c.sliding_window) + ", not null");
  if (static_cast<int64_t>(c.head_dim) * c.num_heads != c.layer.hidden) {
    reject("head_dim (" + std::to_string(c.head_dim) + ") x num_attention_heads (" +
           std::to_string(c.num_heads) + ") differs from hidden_size (" + std::to_string(c.layer.hidden) +
           ")");
  }
  ModelShape s;
  s.vocab_size = c.vocab_size;
  s.hidden = static_cast<int>(c.layer.hidden);
  s.num_layers = c.num_layers;
  s.num_heads = c.num_heads;
  s.num_experts = c.layer.num_experts;
  s.top_k = c.router.top_k;
  s.expert_ff = static_cast<int>(c.layer.expert_ff);
  s.max_positions = c.max_positions;
  s.rms_eps = static_cast<float>(c.rms_eps);
  s.rope_theta = static_cast<float>(c.rope_theta);
  s.validate();
  return s;
}

std::shared_ptr<const ModelWeights> load_pretrained(const std::filesystem::path& dir) {
  const io::Pretrained p = io::open_pretrained(dir);
  return read_model(p.checkpoint, shape_from_pretrained(p.config, io::pretrained_dir(dir)));
}

std::shared_ptr<const ModelWeights> load_model_any(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path) || path.filename() == "config.json") return load_pretrained(path);
  return load_model(path);
}

}  // namespace moe::model

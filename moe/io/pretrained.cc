#include "moe/io/pretrained.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/io/io_error.h"

namespace moe::io {
namespace {

using nlohmann::json;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Typed access to config.json keys; every error names the file and the key.
class ConfigReader {
 public:
  ConfigReader(const json& j, std::string file) : j_(j), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const { throw std::invalid_argument(file_ + ": " + what); }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t min = 1) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail("lacks '" + std::string(key) + "'");
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer()) fail("'" + std::string(key) + "' must be an integer (got " + v.dump() + ")");
    const int64_t x = v.get<int64_t>();
    if (x < min || x > (int64_t{1} << 40)) {
      fail("'" + std::string(key) + "' = " + std::to_string(x) +
           " is out of range (>= " + std::to_string(min) + ")");
    }
    return x;
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number()) fail("'" + std::string(key) + "' must be a number (got " + v.dump() + ")");
    const double x = v.get<double>();
    if (!(x > 0) || !std::isfinite(x)) fail("'" + std::string(key) + "' = " + v.dump() + " must be > 0");
    return x;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail("'" + std::string(key) + "' must be true or false (got " + v.dump() + ")");
    return v.get<bool>();
  }
  std::string text(const char* key, const char* fallback) const {
    if (!has(key)) {
      if (fallback) return fallback;
      fail("lacks '" + std::string(key) + "'");
    }
    const json& v = j_.at(key);
    if (!v.is_string()) fail("'" + std::string(key) + "' must be a string (got " + v.dump() + ")");
    return v.get<std::string>();
  }

 private:
  const json& j_;
  std::string file_;
};

std::filesystem::path config_path(const std::filesystem::path& dir_or_config) {
  if (dir_or_config.filename() == "config.json") return dir_or_config;
  return dir_or_config / "config.json";
}

}  // namespace

std::filesystem::path pretrained_dir(const std::filesystem::path& dir_or_config) {
  return config_path(dir_or_config).parent_path();
}

PretrainedConfig read_pretrained_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = config_path(dir);
  std::ifstream f(path);
  if (!f) throw IoError("cannot open " + path.string() + " (a checkpoint directory needs config.json)");
  std::stringstream ss;
  ss << f.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    throw std::invalid_argument(path.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::invalid_argument(path.string() + ": not a JSON object");
  const ConfigReader r(j, path.string());

  PretrainedConfig c;
  c.model_type = r.text("model_type", nullptr);
  if (c.model_type != "mixtral") {
    r.fail("model_type '" + c.model_type + "' is not supported (supported: mixtral)");
  }
  c.architecture = Architecture::kMixtral;
  c.layer.hidden = r.integer("hidden_size");
  c.layer.expert_ff = r.integer("intermediate_size");
  c.layer.num_experts = static_cast<int>(r.integer("num_local_experts"));
  c.num_layers = static_cast<int>(r.integer("num_hidden_layers"));
  c.top_k = static_cast<int>(r.integer("num_experts_per_tok"));
  if (c.top_k > c.layer.num_experts) {
    r.fail("num_experts_per_tok (" + std::to_string(c.top_k) + ") exceeds num_local_experts (" +
           std::to_string(c.layer.num_experts) + ")");
  }
  c.renormalize = true;
  c.vocab_size = static_cast<int>(r.integer("vocab_size"));
  c.num_heads = static_cast<int>(r.integer("num_attention_heads"));
  c.num_kv_heads = static_cast<int>(r.integer("num_key_value_heads", c.num_heads));
  if (c.layer.hidden % c.num_heads != 0 && !r.has("head_dim")) {
    r.fail("hidden_size (" + std::to_string(c.layer.hidden) + ") is not a multiple of num_attention_heads (" +
           std::to_string(c.num_heads) + ")");
  }
  c.head_dim = static_cast<int>(r.integer("head_dim", c.layer.hidden / c.num_heads));
  c.max_positions = static_cast<int>(r.integer("max_position_embeddings", int64_t{4096} * 32));
  c.rms_eps = r.number("rms_norm_eps", 1e-5);
  c.rope_theta = r.number("rope_theta", 1e6);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.hidden_act = r.text("hidden_act", "silu");
  if (r.has("sliding_window")) c.sliding_window = static_cast<int>(r.integer("sliding_window"));
  try {
    c.layer.validate_for(c.architecture);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  return c;
}

void check_pretrained(const PretrainedConfig& c, const Checkpoint& ckpt) {
  const int64_t d = c.layer.hidden;
  auto mismatch = [&](const std::string& key, int64_t value, const std::string& tensor,
                      const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
    throw std::invalid_argument("config.json says " + key + " = " + std::to_string(value) + " but " + tensor +
                                " has shape " + shape_text(got) + " (expected " + shape_text(want) + ") in " +
                                ckpt.path().string());
  };
  auto need = [&](const std::string& name, const std::string& why) -> const TensorInfo& {
    const TensorInfo* t = ckpt.find(name);
    if (!t) {
      throw std::invalid_argument("config.json says " + why + " but " + ckpt.path().string() + " lacks " +
                                  name);
    }
    return *t;
  };
  const TensorInfo& embed = need("model.embed_tokens.weight", "vocab_size = " + std::to_string(c.vocab_size));
  if (embed.shape.size() != 2 || embed.shape[1] != d) {
    mismatch("hidden_size", d, "model.embed_tokens.weight", embed.shape, {c.vocab_size, d});
  }
  if (embed.shape[0] != c.vocab_size) {
    mismatch("vocab_size", c.vocab_size, "model.embed_tokens.weight", embed.shape, {c.vocab_size, d});
  }
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".block_sparse_moe.";
    const std::string layers = "num_hidden_layers = " + std::to_string(c.num_layers);
    const TensorInfo& gate = need(p + "gate.weight", layers);
    const std::vector<int64_t> gate_want = {c.layer.num_experts, d};
    if (gate.shape.size() != 2 || gate.shape[1] != d)
      mismatch("hidden_size", d, p + "gate.weight", gate.shape, gate_want);
    if (gate.shape[0] != c.layer.num_experts) {
      mismatch("num_local_experts", c.layer.num_experts, p + "gate.weight", gate.shape, gate_want);
    }
    const std::string extra = p + "experts." + std::to_string(c.layer.num_experts) + ".w1.weight";
    if (ckpt.contains(extra)) {
      throw std::invalid_argument(
          "config.json says num_local_experts = " + std::to_string(c.layer.num_experts) + " but " +
          ckpt.path().string() + " has " + extra);
    }
    const std::string w1 = p + "experts.0.w1.weight";
    const TensorInfo& t = need(w1, "num_local_experts = " + std::to_string(c.layer.num_experts));
    const std::vector<int64_t> w1_want = {c.layer.expert_ff, d};
    if (t.shape.size() != 2 || t.shape[1] != d) mismatch("hidden_size", d, w1, t.shape, w1_want);
    if (t.shape[0] != c.layer.expert_ff)
      mismatch("intermediate_size", c.layer.expert_ff, w1, t.shape, w1_want);
  }
  const std::string beyond = "model.layers." + std::to_string(c.num_layers) + ".block_sparse_moe.gate.weight";
  if (ckpt.contains(beyond)) {
    throw std::invalid_argument("config.json says num_hidden_layers = " + std::to_string(c.num_layers) +
                                " but " + ckpt.path().string() + " has " + beyond);
  }
}

Pretrained open_pretrained(const std::filesystem::path& dir) {
  Pretrained p;
  p.config = read_pretrained_config(dir);
  p.checkpoint = Checkpoint::open(pretrained_dir(dir));
  check_pretrained(p.config, *p.checkpoint);
  return p;
}

LayerWeights load_pretrained_layer(const Pretrained& p, int layer_index,
                                   std::optional<kernels::DType> storage) {
  if (layer_index < 0 || layer_index >= p.config.num_layers) {
    throw std::invalid_argument("layer " + std::to_string(layer_index) +
                                " is out of range: config.json says " +
                                "num_hidden_layers = " + std::to_string(p.config.num_layers) + " (" +
                                p.checkpoint->path().string() + ")");
  }
  return load_layer(p.checkpoint, p.config.architecture, layer_index, p.config.layer, storage);
}

LayerWeights load_pretrained_layer(const std::filesystem::path& dir, int layer_index,
                                   std::optional<kernels::DType> storage) {
  return load_pretrained_layer(open_pretrained(dir), layer_index, storage);
}

}  // namespace moe::io

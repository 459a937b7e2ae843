// Loading a Hugging Face checkpoint directory without shape arguments (moe/io/pretrained.h,
// moe::model::load_pretrained, MoELayer::from_pretrained) on the trained model models/kjv-moe: config.json
// read and checked against the tensors (each mismatch named), and the C++ forward against the torch twin's
// reference logits (dropless, fp32) within 1e-5 relative.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/io/io_error.h"
#include "moe/io/pretrained.h"
#include "moe/layer/moe_layer.h"
#include "moe/model/model.h"
#include "sim/npy.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(MOE_SOURCE_DIR) / "models" / "kjv-moe";

nlohmann::json committed_config() {
  std::ifstream f(kModel / "config.json");
  return nlohmann::json::parse(f);
}

// A scratch checkpoint directory: `config` as config.json and a symlink to the committed weights.
class ScratchDir {
 public:
  explicit ScratchDir(const nlohmann::json& config, const std::string& text = "") {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("moe_pretrained_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
    fs::create_symlink(fs::absolute(kModel / "model.safetensors"), dir_ / "model.safetensors");
    std::ofstream(dir_ / "config.json") << (text.empty() ? config.dump(2) : text);
  }
  ~ScratchDir() { fs::remove_all(dir_); }
  const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
};

// The message of what `fn` throws as E (empty if it throws nothing).
template <class E, class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(Pretrained, ReadsTheMixtralConfig) {
  const io::PretrainedConfig c = io::read_pretrained_config(kModel);
  EXPECT_EQ(c.architecture, io::Architecture::kMixtral);
  EXPECT_EQ(c.layer.hidden, 256);
  EXPECT_EQ(c.layer.expert_ff, 88);
  EXPECT_EQ(c.layer.num_experts, 8);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.router.top_k, 2);
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_positions, 256);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(io::read_pretrained_config(kModel / "config.json").layer, c.layer);
  const model::ModelShape s = model::shape_from_pretrained(c, kModel);
  EXPECT_EQ(s.vocab_size, 1024);
  EXPECT_EQ(s.expert_ff, 88);
  EXPECT_EQ(s.max_positions, 256);
  EXPECT_FLOAT_EQ(s.rope_theta, 10000.0f);
}

TEST(Pretrained, MismatchedConfigsNameTheMismatch) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expect;  // a part of the message
  };
  const std::vector<Case> cases = {
      {"intermediate_size", 96,
       "intermediate_size = 96 but model.layers.0.block_sparse_moe.experts.0.w1.weight has shape [88, 256] "
       "(expected [96, 256])"},
      {"hidden_size", 128, "hidden_size = 128 but model.embed_tokens.weight has shape [1024, 256]"},
      {"vocab_size", 512, "vocab_size = 512 but model.embed_tokens.weight has shape [1024, 256]"},
      {"num_local_experts", 4, "num_local_experts = 4 but model.layers.0.block_sparse_moe.gate.weight"},
      {"num_local_experts", 16, "num_local_experts = 16 but model.layers.0.block_sparse_moe.gate.weight"},
      {"num_hidden_layers", 3, "num_hidden_layers = 3 but"},
      {"num_hidden_layers", 5, "lacks model.layers.4.block_sparse_moe.gate.weight"},
      {"num_experts_per_tok", 9, "num_experts_per_tok (9) exceeds num_local_experts (8)"},
      {"model_type", "jamba", "model_type 'jamba' is not supported (supported: mixtral, qwen2_moe"},
      {"hidden_size", "256", "'hidden_size' must be an integer"},
      {"intermediate_size", 0, "'intermediate_size' = 0 is out of range"},
  };
  for (const Case& c : cases) {
    nlohmann::json config = committed_config();
    config[c.key] = c.value;
    ScratchDir dir(config);
    const std::string layer_error =
        error_of<std::invalid_argument>([&] { io::load_pretrained_layer(dir.path(), 0); });
    EXPECT_NE(layer_error.find(c.expect), std::string::npos) << c.key << ": " << layer_error;
    const std::string model_error =
        error_of<std::invalid_argument>([&] { model::load_pretrained(dir.path()); });
    EXPECT_NE(model_error.find(c.expect), std::string::npos) << c.key << ": " << model_error;
    EXPECT_NE(error_of<std::invalid_argument>([&] { MoELayer::from_pretrained(dir.path(), 0); }), "");
  }
  // A missing required key.
  nlohmann::json config = committed_config();
  config.erase("num_local_experts");
  ScratchDir missing(config);
  EXPECT_NE(error_of<std::invalid_argument>([&] {
              io::read_pretrained_config(missing.path());
            }).find("lacks 'num_local_experts'"),
            std::string::npos);
  ScratchDir malformed({}, "{\"model_type\": \"mixtral\",");
  EXPECT_NE(error_of<std::invalid_argument>([&] {
              io::read_pretrained_config(malformed.path());
            }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of<io::IoError>([&] {
              io::read_pretrained_config(fs::temp_directory_path() / "no_such_dir");
            }).find("config.json"),
            std::string::npos);
}

TEST(Pretrained, ModelRejectsWhatItCannotRun) {
  // The MoE layers load (they do not depend on these keys), the model refuses by name.
  const std::vector<std::pair<const char*, nlohmann::json>> cases = {
      {"num_key_value_heads", 2}, {"tie_word_embeddings", true}, {"sliding_window", 128}};
  for (const auto& [key, value] : cases) {
    nlohmann::json config = committed_config();
    config[key] = value;
    ScratchDir dir(config);
    EXPECT_NO_THROW(io::load_pretrained_layer(dir.path(), 0)) << key;
    const std::string e = error_of<std::invalid_argument>([&] { model::load_pretrained(dir.path()); });
    EXPECT_NE(e.find(key), std::string::npos) << key << ": " << e;
  }
  // hidden_act is the experts' activation (act(w1 x) * w3 x): a Mixtral with another one would compute a
  // different function, so the layer refuses it by name too.
  nlohmann::json config = committed_config();
  config["hidden_act"] = "gelu";
  ScratchDir dir(config);
  for (const std::string& e :
       {error_of<std::invalid_argument>([&] { io::load_pretrained_layer(dir.path(), 0); }),
        error_of<std::invalid_argument>([&] { model::load_pretrained(dir.path()); })}) {
    EXPECT_NE(e.find("'hidden_act' = 'gelu' is not supported"), std::string::npos) << e;
  }
}

TEST(Pretrained, LayerFromPretrained) {
  auto weights = model::load_pretrained(kModel);
  for (int l = 0; l < 4; ++l) {
    auto layer = MoELayer::from_pretrained(kModel, l);
    EXPECT_EQ(layer->weights().content_hash(), weights->layers[l].moe->content_hash()) << l;
    EXPECT_EQ(layer->hidden(), 256);
    EXPECT_EQ(layer->config().router.num_experts, 8);
    EXPECT_EQ(layer->config().router.top_k, 2);
    EXPECT_TRUE(layer->config().router.renormalize);
  }
  EXPECT_NE(error_of<std::invalid_argument>([&] {
              MoELayer::from_pretrained(kModel, 4);
            }).find("layer 4 is out of range: config.json says num_hidden_layers = 4"),
            std::string::npos);
  EXPECT_NE(error_of<std::invalid_argument>([&] { MoELayer::from_pretrained(kModel, -1); }), "");
  EXPECT_EQ(MoELayer::from_pretrained(kModel, 0, "greedy")->config().policy.scope,
            DispatchPolicy::mode("greedy").scope);
}

// Every position's logits of reference_tokens.npy ([2, 32] int32) against reference_logits.npy ([2, 32,
// 1024] float32, the torch forward): max |diff| / max |logit| <= 1e-5, for both kernel kinds, whole
// sequences in one pass and token by token through the KV cache.
TEST(Pretrained, ForwardMatchesTheTorchReference) {
  const sim::NpyArray tokens = sim::read_npy((kModel / "reference_tokens.npy").string());
  const sim::NpyArray want = sim::read_npy((kModel / "reference_logits.npy").string());
  ASSERT_EQ(tokens.dtype, "i4");
  ASSERT_EQ(want.dtype, "f4");
  ASSERT_EQ(tokens.shape.size(), 2u);
  const int64_t B = tokens.shape[0], T = tokens.shape[1];
  ASSERT_EQ(want.shape, (std::vector<int64_t>{B, T, 1024}));
  float max_ref = 0;
  for (size_t i = 0; i < want.words.size(); ++i) max_ref = std::max(max_ref, std::fabs(want.f32(i)));
  auto weights = model::load_pretrained(kModel);
  for (auto kernel : {kernels::KernelKind::kInvariant, kernels::KernelKind::kFast}) {
    for (bool one_pass : {true, false}) {
      model::ModelOptions o;
      o.kernel = kernel;
      o.policy = model::ModelOptions::dispatch_mode("dropless", 1.0);
      model::Model m(weights, o);
      double max_diff = 0;
      int argmax_equal = 0;
      for (int64_t b = 0; b < B; ++b) {
        std::vector<model::BatchRow> rows;
        for (int64_t t = 0; t < T; ++t) {
          rows.push_back({static_cast<uint64_t>(b + 1), static_cast<uint32_t>(t), tokens.i32(b * T + t)});
        }
        std::vector<int32_t> out_rows;
        std::vector<float> logits, all;
        if (one_pass) {
          m.forward(rows, out_rows, all, nullptr, model::LogitRows::kEvery);
          ASSERT_EQ(out_rows.size(), static_cast<size_t>(T));
        } else {
          for (const auto& row : rows) {
            m.forward(std::span(&row, 1), out_rows, logits);
            all.insert(all.end(), logits.begin(), logits.end());
          }
        }
        for (int64_t t = 0; t < T; ++t) {
          const float* got = all.data() + t * 1024;
          const size_t base = static_cast<size_t>((b * T + t) * 1024);
          int32_t want_arg = 0;
          for (int v = 0; v < 1024; ++v) {
            max_diff = std::max(max_diff, std::fabs(double(got[v]) - double(want.f32(base + v))));
            if (want.f32(base + v) > want.f32(base + want_arg)) want_arg = v;
          }
          argmax_equal += model::Model::argmax(got, 1024) == want_arg;
        }
      }
      const double rel = max_diff / max_ref;
      std::printf("%s kernels, %s: max |diff| %.3g, / max |logit| %.3g; argmax equal %d/%lld\n",
                  std::string(kernels::to_string(kernel)).c_str(), one_pass ? "one pass" : "token by token",
                  max_diff, rel, argmax_equal, static_cast<long long>(B * T));
      EXPECT_LE(rel, 1e-5);
      EXPECT_EQ(argmax_equal, B * T);
    }
  }
}

TEST(Pretrained, LoadModelAnyTakesDirectoriesAndFiles) {
  auto a = model::load_model_any(kModel);
  auto b = model::load_model_any(kModel / "config.json");
  EXPECT_EQ(a->shape, b->shape);
  // model.safetensors itself is not a moe-model/1 file (format = pt): load_model says so.
  EXPECT_NE(error_of<std::invalid_argument>([&] {
              model::load_model_any(kModel / "model.safetensors");
            }).find("moe-model/1"),
            std::string::npos);
}

}  // namespace
}  // namespace moe

// moe/model weights: seeded init, safetensors round trip, and the sensitivity the divergence lab needs.
#include "moe/model/model_weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/splitmix64.h"
#include "moe/io/safetensors.h"
#include "moe/model/model.h"

namespace moe::model {
namespace {

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".safetensors");
}

std::vector<int32_t> random_prompt(int length, int vocab, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int32_t> p(length);
  for (auto& t : p) t = static_cast<int32_t>(rng.uniform_int(0, vocab - 1));
  return p;
}

std::vector<float> last_logits(Model& m, const std::vector<int32_t>& prompt, uint64_t id = 1) {
  std::vector<BatchRow> rows;
  for (size_t p = 0; p < prompt.size(); ++p) rows.push_back({id, static_cast<uint32_t>(p), prompt[p]});
  std::vector<int32_t> out_rows;
  std::vector<float> logits;
  m.admit(id, static_cast<uint32_t>(prompt.size()));
  m.forward(rows, out_rows, logits);
  m.release(id);
  return logits;
}

TEST(ModelWeights, RandomIsSeeded) {
  auto a = random_model(ModelShape::tiny(), 7);
  auto b = random_model(ModelShape::tiny(), 7);
  auto c = random_model(ModelShape::tiny(), 8);
  EXPECT_EQ(a->embedding, b->embedding);
  EXPECT_EQ(a->layers[1].wo, b->layers[1].wo);
  EXPECT_EQ(a->layers[1].moe->content_hash(), b->layers[1].moe->content_hash());
  EXPECT_NE(a->embedding, c->embedding);
  EXPECT_NE(a->layers[0].moe->content_hash(), c->layers[0].moe->content_hash());
  EXPECT_NE(a->layers[0].moe->content_hash(), a->layers[1].moe->content_hash());
}

TEST(ModelWeights, SaveLoadRoundTripGivesTheSameLogits) {
  auto w = random_model(ModelShape::tiny(), 3);
  const auto path = temp_path("model_roundtrip");
  save_model(*w, path);
  auto loaded = load_model(path);
  EXPECT_EQ(loaded->shape, w->shape);
  EXPECT_EQ(loaded->lm_head, w->lm_head);
  for (int l = 0; l < w->shape.num_layers; ++l) {
    EXPECT_EQ(loaded->layers[l].moe->content_hash(), w->layers[l].moe->content_hash());
    EXPECT_EQ(loaded->layers[l].wq, w->layers[l].wq);
  }
  Model a(w, ModelOptions{});
  Model b(loaded, ModelOptions{});
  const std::vector<int32_t> prompt = {1, 5, 9, 77, 3, 3, 120};
  auto la = last_logits(a, prompt);
  auto lb = last_logits(b, prompt);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
  std::filesystem::remove(path);
}

TEST(ModelWeights, LoadRejectsForeignFiles) {
  const auto path = temp_path("model_foreign");
  std::vector<float> data(4, 1.0f);
  io::TensorToWrite t{
      "x", "F32", {4}, std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), 16)};
  io::write_safetensors(path, std::span<const io::TensorToWrite>(&t, 1));
  EXPECT_THROW(load_model(path), std::invalid_argument);
  std::filesystem::remove(path);
}

// The config a moe-model file's metadata holds: every field in full, strictly parsed, and a valid shape.
TEST(ModelWeights, ShapeFromMetadataIsStrict) {
  const ModelShape tiny = ModelShape::tiny();
  std::map<std::string, std::string> meta = {
      {"format", "moe-model/1"}, {"vocab_size", "128"}, {"hidden", "64"},       {"num_layers", "2"},
      {"num_heads", "2"},        {"num_experts", "8"},  {"top_k", "2"},         {"expert_ff", "128"},
      {"max_positions", "4096"}, {"rms_eps", "1e-05"},  {"rope_theta", "10000"}};
  EXPECT_EQ(shape_from_metadata(meta, "m"), tiny);
  auto message = [&](const std::string& key, const std::string& value) {
    auto m = meta;
    if (value == "<absent>") {
      m.erase(key);
    } else {
      m[key] = value;
    }
    try {
      shape_from_metadata(m, "m.safetensors");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("top_k", "2 experts").find("metadata 'top_k' = '2 experts' is not an integer"),
            std::string::npos);
  EXPECT_NE(
      message("hidden", "99999999999").find("'hidden' = '99999999999' is not an integer in [-2^31, 2^31)"),
      std::string::npos);
  EXPECT_NE(message("hidden", "").find("is not an integer"), std::string::npos);
  EXPECT_NE(message("rms_eps", "1e-5x").find("'rms_eps' = '1e-5x' is not a finite float"), std::string::npos);
  EXPECT_NE(message("rope_theta", "inf").find("is not a finite float"), std::string::npos);
  EXPECT_NE(message("rope_theta", "1e39").find("is not a finite float"), std::string::npos);
  EXPECT_NE(message("num_layers", "<absent>").find("m.safetensors lacks metadata 'num_layers'"),
            std::string::npos);
  EXPECT_NE(message("format", "moe-model/2").find("is not a moe-model/1 file"), std::string::npos);
  EXPECT_NE(message("top_k", "9").find("top_k (9) exceeds num_experts (8)"), std::string::npos);
}

// The lab needs logits that are not flat and a model whose argmax moves when pairs are dropped.
void check_sensitivity(const ModelShape& shape, int num_prompts, int prompt_length) {
  auto w = random_model(shape, 0);
  ModelOptions dropless;
  dropless.policy = ModelOptions::dispatch_mode("dropless", 1.0);
  ModelOptions starved;  // request scope at cf 0.5: most tokens lose a pair
  starved.policy = ModelOptions::dispatch_mode("request", 0.5);
  Model full(w, dropless), dropping(w, starved);
  int flips = 0;
  double mean_std = 0;
  for (int i = 0; i < num_prompts; ++i) {
    auto prompt = random_prompt(prompt_length, shape.vocab_size, 1000 + i);
    auto a = last_logits(full, prompt);
    auto b = last_logits(dropping, prompt);
    double mean = 0, sq = 0;
    for (float v : a) mean += v;
    mean /= a.size();
    for (float v : a) sq += (v - mean) * (v - mean);
    mean_std += std::sqrt(sq / a.size()) / num_prompts;
    flips += Model::argmax(a.data(), shape.vocab_size) != Model::argmax(b.data(), shape.vocab_size);
  }
  EXPECT_GT(mean_std, 1.0) << "logits are too flat";
  EXPECT_GT(flips, 0) << "dropping pairs never changed the argmax";
  EXPECT_LT(flips, num_prompts)
      << "dropping pairs always changed the argmax (the MoE branch swamps the rest)";
  std::printf("sensitivity (vocab %d, d %d): logit std %.2f, argmax changed by drops in %d of %d prompts\n",
              shape.vocab_size, shape.hidden, mean_std, flips, num_prompts);
}

TEST(ModelWeights, DefaultModelIsSensitiveToDrops) {
  check_sensitivity(ModelShape{}, 24, 8);
}
TEST(ModelWeights, TinyModelIsSensitiveToDrops) {
  check_sensitivity(ModelShape::tiny(), 48, 8);
}

}  // namespace
}  // namespace moe::model

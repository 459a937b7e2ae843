// Every MoE family from a checkpoint directory alone (io::read_pretrained_config, MoELayer::from_pretrained):
// for each family case (tests/support/family_checkpoints.h: every model type, bf16 and f32, FP8 and MXFP4
// where the family ships them, sharded) the layer matches the float64 reference of the family's published
// MoE block (tests/support/family_reference.h, which routes in double on its own) within 1e-5 per row,
// dropless, under both presets and with both kernel kinds; the config's keys are read as published; FP8 and
// MXFP4 weights are dequantized bit-exactly against the reference dequantizer; unsupported values, dense
// layers and weights too large for the memory are refused by name.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "moe/io/io_error.h"
#include "moe/io/pretrained.h"
#include "moe/io/quantized.h"
#include "moe/layer/moe_layer.h"
#include "tests/io_test_util.h"
#include "tests/support/family_accuracy.h"
#include "tests/support/family_checkpoints.h"
#include "tests/support/family_reference.h"
#include "tests/support/layer_fixtures.h"
#include "tests/support/layer_reference.h"

namespace moe::testing {
namespace {

using io::testing::TempDir;
using io::testing::thrown_message;
using kernels::DType;
using nlohmann::json;

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  for (const FamilyCase& c : family_cases()) names.push_back(c.name);
  return names;
}

class Family : public ::testing::TestWithParam<std::string> {};

TEST_P(Family, MatchesTheFloat64ReferenceOfItsPublishedBlock) {
  const FamilyCase& c = family_case(GetParam());
  TempDir dir;
  const WrittenCheckpoint w = write_family_checkpoint(c, dir.path());
  // Quantized weights in fp32 storage: the exact dequantized values rounded once, 2^-24 (bf16 storage would
  // add bf16's own rounding of each weight, ~2^-9, which is not the layer's error).
  const std::optional<DType> storage =
      c.quant == io::Quantization::kNone ? std::nullopt : std::optional<DType>(DType::kF32);
  const Batch b = FamilyTokens(w.ref.d);
  int near_ties = 0;
  double worst = 0.0;
  auto weights =
      std::make_shared<const io::LayerWeights>(io::load_pretrained_layer(dir.path(), w.layer, storage));
  for (const char* preset : {"deterministic", "greedy"}) {
    for (int threads : {1, 2}) {
      // from_pretrained's layer: the config it built and its weights; then the same config dropless (the
      // published blocks never drop), on the same weights.
      auto layer = MoELayer::from_pretrained(dir.path(), w.layer, preset, storage);
      EXPECT_EQ(layer->weights().content_hash(), weights->content_hash());
      MoELayerConfig config = layer->config();
      config.policy.scope = CapacityScope::kNone;
      config.num_threads = threads;
      MoELayer dropless(config, weights);
      const double err = ErrorAgainstFamily(dropless, w, b, &near_ties);
      EXPECT_LE(err, 1e-5) << preset << ", " << threads << " threads";
      worst = std::max(worst, err);
    }
  }
  std::printf(
      "  %s (layer %d): max row relative error %.3g against the family's float64 block (%d near-tie "
      "rows skipped of %d)\n",
      c.name.c_str(), w.layer, worst, near_ties, 4 * 48);
  EXPECT_LE(near_ties, 4 * 48 / 20);
}

TEST_P(Family, ConfigIsReadAsPublished) {
  const FamilyCase& c = family_case(GetParam());
  TempDir dir;
  const WrittenCheckpoint w = write_family_checkpoint(c, dir.path());
  const io::PretrainedConfig p = io::read_pretrained_config(dir.path());
  const json& j = w.config.contains("text_config") ? w.config["text_config"] : w.config;
  EXPECT_EQ(p.model_type, c.model_type);
  EXPECT_EQ(p.moe_layers, w.moe_layers);
  EXPECT_EQ(p.router.top_k, j["num_experts_per_tok"].get<int>());
  EXPECT_EQ(p.layer.num_experts, w.ref.num_experts);
  EXPECT_EQ(p.layer.hidden, w.ref.d);
  EXPECT_EQ(p.layer.num_shared_experts > 0, w.ref.shared.has_value());
  EXPECT_EQ(p.layer.score_bias, !w.ref.score_bias.empty());
  EXPECT_EQ(p.layer.router_bias, !w.ref.router_bias.empty());
  EXPECT_FLOAT_EQ(p.router.scaling_factor, static_cast<float>(j.value("routed_scaling_factor", 1.0)));
  EXPECT_EQ(p.quantization, c.quant);
  if (c.model_type == "deepseek_v2") {
    EXPECT_EQ(p.router.group_score, GroupScore::kMax);
    EXPECT_EQ(p.router.num_groups, 4);
    EXPECT_EQ(p.router.topk_groups, 2);
    EXPECT_FALSE(p.router.renormalize);
  }
  if (c.model_type == "gpt_oss") {
    EXPECT_EQ(p.router.scoring, Scoring::kSoftmaxTopK);
    EXPECT_TRUE(p.router.rank_by_logit);
    EXPECT_EQ(p.activation, kernels::Activation::kClampedSwiGLU);
    EXPECT_FLOAT_EQ(p.swiglu_limit, 1.25f);
  }
  if (c.model_type.rfind("llama4", 0) == 0) {
    EXPECT_TRUE(p.weight_on_input);
    EXPECT_TRUE(p.router.rank_by_logit);
    EXPECT_EQ(p.router.scoring, Scoring::kSigmoid);
  }
  if (c.model_type == "deepseek_v3") {
    EXPECT_EQ(p.num_extra_layers, 1);
  }
  if (c.quant == io::Quantization::kFp8Block) {
    EXPECT_EQ(p.fp8_block.rows, 16);
  }
}

// A dense layer asked for as an MoE layer names the MoE layers; so does a layer past the last.
TEST_P(Family, DenseLayersAreRefusedWithTheMoeLayerList) {
  const FamilyCase& c = family_case(GetParam());
  TempDir dir;
  const WrittenCheckpoint w = write_family_checkpoint(c, dir.path());
  const io::PretrainedConfig p = io::read_pretrained_config(dir.path());
  for (int layer = 0; layer < p.num_layers; ++layer) {
    if (p.is_moe_layer(layer)) continue;
    const std::string msg =
        thrown_message<std::invalid_argument>([&] { io::load_pretrained_layer(dir.path(), layer); });
    EXPECT_NE(msg.find("is a dense MLP layer, not an MoE layer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("MoE layers of this " + c.model_type + " checkpoint are " + p.moe_layer_list()),
              std::string::npos)
        << msg;
  }
  const std::string msg =
      thrown_message<std::invalid_argument>([&] { io::load_pretrained_layer(dir.path(), p.num_layers); });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, Family, ::testing::ValuesIn(CaseNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The bits of every stored expert matrix against the reference dequantizer (family_checkpoints.h's exact
// values, rounded here with a rounding written independently of moe/io: the significand scaled to an integer
// and rounded half to even by nearbyint).
double RoundReference(double v, DType to) {
  if (v == 0.0) return v;
  int e = 0;
  const double m = std::frexp(v, &e);  // v = m 2^e, 0.5 <= |m| < 1
  const int bits = to == DType::kF32 ? 24 : 8;
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

TEST(Quantized, DequantizationIsExactAgainstTheReferenceDequantizer) {
  for (const char* name :
       {"qwen3_moe_fp8", "deepseek_v3_fp8", "kimi_k2_fp8", "glm4_moe_fp8", "gpt_oss_mxfp4"}) {
    const FamilyCase& c = family_case(name);
    TempDir dir;
    const WrittenCheckpoint w = write_family_checkpoint(c, dir.path());
    for (DType storage : {DType::kF32, DType::kBF16}) {
      const io::LayerWeights lw = io::load_pretrained_layer(dir.path(), w.layer, storage);
      int64_t checked = 0, mismatched = 0;
      auto compare = [&](const kernels::MatrixView& m, const std::vector<double>& ref) {
        for (int64_t r = 0; r < m.rows; ++r) {
          for (int64_t col = 0; col < m.cols; ++col) {
            const size_t at = static_cast<size_t>(r * m.row_stride + col);
            const double got = m.dtype == DType::kF32
                                   ? static_cast<const float*>(m.data)[at]
                                   : kernels::bf16_to_f32(static_cast<const uint16_t*>(m.data)[at]);
            const double want = RoundReference(ref[static_cast<size_t>(r * m.cols + col)], storage);
            mismatched += got != want;
            ++checked;
          }
        }
      };
      for (size_t e = 0; e < lw.experts().size(); ++e) {
        compare(lw.experts()[e].gate_proj, w.ref.experts[e].gate);
        compare(lw.experts()[e].up_proj, w.ref.experts[e].up);
        compare(lw.experts()[e].down_proj, w.ref.experts[e].down);
      }
      if (lw.shared()) {
        compare(lw.shared()->gate_proj, w.ref.shared->gate);
        compare(lw.shared()->down_proj, w.ref.shared->down);
      }
      EXPECT_EQ(mismatched, 0) << name << " " << kernels::to_string(storage) << ": " << mismatched << " of "
                               << checked;
      EXPECT_GT(checked, 10000);
    }
  }
}

// Every FP8 code and every FP4 code against the format's definition, and the rounding of products that fall
// between two bf16 values (where rounding through an fp32 rounded to nearest would round twice).
TEST(Quantized, EveryCodeAndTheDoubleRoundingCase) {
  for (int b = 0; b < 256; ++b) {
    const double v = io::fp8_e4m3_value(static_cast<uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    const int e = (b >> 3) & 15, m = b & 7;
    const double want = (b & 0x80 ? -1 : 1) * (e == 0 ? m / 512.0 : (8 + m) / 8.0 * std::ldexp(1.0, e - 7));
    EXPECT_EQ(v, want) << b;
  }
  EXPECT_EQ(io::fp8_e4m3_value(0x7e), 448.0);  // the largest e4m3fn value
  const double fp4[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int n = 0; n < 16; ++n) EXPECT_EQ(io::fp4_e2m1_value(static_cast<uint8_t>(n)), fp4[n]) << n;
  EXPECT_EQ(io::e8m0_value(127), 1.0);
  EXPECT_EQ(io::e8m0_value(0), std::ldexp(1.0, -127));
  EXPECT_TRUE(std::isnan(io::e8m0_value(255)));
  // 1 + 2^-8 + 2^-30 is just above the tie between the bf16 values 1 and 1 + 2^-7: bf16 rounds it up. Through
  // an fp32 rounded to nearest it would first become 1 + 2^-8 (the tie) and then round to even, down to 1.
  std::byte out[4];
  const double above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  ASSERT_TRUE(io::store_rounded(above_tie, DType::kBF16, out));
  uint16_t b16;
  std::memcpy(&b16, out, 2);
  EXPECT_EQ(kernels::bf16_to_f32(b16), 1.0f + 0x1p-7f);
  EXPECT_EQ(RoundReference(above_tie, DType::kBF16), 1.0 + std::ldexp(1.0, -7));
  EXPECT_FALSE(io::store_rounded(1e39, DType::kF32, out));  // beyond fp32
}

// Rewrites one tensor of a written checkpoint (single file).
void EditTensor(const std::filesystem::path& dir, const std::string& name,
                const std::function<void(std::vector<std::byte>&)>& edit) {
  const auto path = dir / "model.safetensors";
  std::vector<std::pair<io::TensorToWrite, std::vector<std::byte>>> items;
  {
    io::SafetensorsFile f(path);
    for (const std::string& n : f.names()) {
      const io::RawTensor t = *f.raw(n);
      items.push_back(
          {io::TensorToWrite{n, *t.dtype, *t.shape, {}}, std::vector<std::byte>(t.data, t.data + t.nbytes)});
    }
  }
  std::vector<io::TensorToWrite> list;
  for (auto& [t, bytes] : items) {
    if (t.name == name) edit(bytes);
    t.bytes = bytes;
    list.push_back(t);
  }
  io::write_safetensors(path, list);
}

TEST(Quantized, BadCodesAndMissingScalesAreNamed) {
  TempDir dir;
  const WrittenCheckpoint w = write_family_checkpoint(family_case("qwen3_moe_fp8"), dir.path());
  const std::string weight = "model.layers.3.mlp.experts.2.up_proj.weight";
  EditTensor(dir.path(), weight, [](std::vector<std::byte>& b) { b[5] = std::byte{0x7f}; });
  std::string msg = thrown_message<std::invalid_argument>([&] { io::load_pretrained_layer(dir.path(), 3); });
  EXPECT_NE(msg.find(weight + ": element [0, 5] is the FP8 NaN code"), std::string::npos) << msg;

  TempDir q;
  write_family_checkpoint(family_case("qwen3_moe_fp8"), q.path());
  EditTensor(q.path(), weight + "_scale_inv", [](std::vector<std::byte>& b) {
    b[0] = std::byte{0x80};  // the BF16 scale [0, 0] becomes +inf (0x7f80)
    b[1] = std::byte{0x7f};
  });
  msg = thrown_message<std::invalid_argument>([&] { io::load_pretrained_layer(q.path(), 3); });
  EXPECT_NE(msg.find(weight + ": weight_scale_inv[0, 0] is not finite"), std::string::npos) << msg;
  EXPECT_EQ(w.layer, 3);
}

TEST(Quantized, Mxfp4NanScaleIsNamed) {
  const FamilyCase& c = family_case("gpt_oss_mxfp4");
  TempDir dir;
  FamilyCase single = c;
  single.sharded = false;
  write_family_checkpoint(single, dir.path());
  EditTensor(dir.path(), "model.layers.3.mlp.experts.down_proj_scales",
             [](std::vector<std::byte>& b) { b[1] = std::byte{0xff}; });  // [E, d, ff / 32]: expert 0, row 1
  const std::string msg =
      thrown_message<std::invalid_argument>([&] { io::load_pretrained_layer(dir.path(), 3); });
  EXPECT_NE(msg.find("model.layers.3.mlp.experts.down_proj (expert 0): row 1 group 0 has the NaN scale 0xff"),
            std::string::npos)
      << msg;
}

// Each unsupported value is refused with the key, its value and what is supported.
TEST(Refusals, UnsupportedKeyValuesAreNamed) {
  struct Case {
    const char* family;
    std::function<void(json&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"deepseek_v2_bf16", [](json& j) { j["topk_method"] = "noaux_tc"; },
       "'topk_method' = 'noaux_tc' is not supported for deepseek_v2 (supported: 'greedy', "
       "'group_limited_greedy')"},
      {"deepseek_v2_bf16", [](json& j) { j["norm_topk_prob"] = true; },
       "'norm_topk_prob' = true is not supported"},
      {"deepseek_v2_bf16", [](json& j) { j["scoring_func"] = "sigmoid"; },
       "'scoring_func' = 'sigmoid' is not supported"},
      {"deepseek_v3_bf16", [](json& j) { j["scoring_func"] = "softmax"; },
       "'scoring_func' = 'softmax' is not supported"},
      {"deepseek_v3_bf16", [](json& j) { j["topk_method"] = "greedy"; },
       "'topk_method' = 'greedy' is not supported"},
      {"deepseek_v3_bf16", [](json& j) { j["n_group"] = 3; }, "is not a multiple of n_group (3)"},
      {"qwen3_moe_bf16", [](json& j) { j["hidden_act"] = "gelu"; }, "'hidden_act' = 'gelu' is not supported"},
      {"qwen3_moe_bf16",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "awq"}};
       },
       "'quantization_config.quant_method' = 'awq' is not supported (supported: 'fp8' with "
       "weight_block_size"},
      {"qwen3_moe_fp8", [](json& j) { j["quantization_config"].erase("weight_block_size"); },
       "'quantization_config.weight_block_size' is required"},
      {"qwen3_moe_fp8", [](json& j) { j["quantization_config"]["fmt"] = "e5m2"; },
       "'quantization_config.fmt' = 'e5m2'"},
      {"mixtral_bf16",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "mxfp4"}};
       },
       "'quantization_config.quant_method' = 'mxfp4' is supported for gpt_oss only"},
      {"qwen2_moe_f32", [](json& j) { j["mlp_only_layers"] = {7}; }, "'mlp_only_layers' names layer 7"},
      {"llama4_text_f32", [](json& j) { j["moe_layers"] = {9}; }, "'moe_layers' names layer 9"},
      {"gpt_oss_bf16", [](json& j) { j["swiglu_limit"] = -1.0; }, "'swiglu_limit' = -1.0 must be > 0"},
      // Sizes a list is built from are bounded first (1 << 30 layers was a std::bad_alloc).
      {"mixtral_bf16", [](json& j) { j["num_hidden_layers"] = 1 << 30; },
       "'num_hidden_layers' = 1073741824 is out of range (1-65536)"},
      {"mixtral_bf16", [](json& j) { j["num_local_experts"] = int64_t{1} << 33; },
       "'num_local_experts' = 8589934592 is out of range (1-1048576)"},
      {"mixtral_bf16", [](json& j) { j["model_type"] = "jamba"; },
       "model_type 'jamba' is not supported (supported: mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, "
       "deepseek_v3, glm4_moe, gpt_oss, llama4, llama4_text)"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    FamilyCase fc = family_case(c.family);
    fc.sharded = false;
    write_family_checkpoint(fc, dir.path());
    json config = json::parse(std::ifstream(dir / "config.json"));
    c.edit(config);
    std::ofstream(dir / "config.json") << config.dump();
    const std::string msg =
        thrown_message<std::invalid_argument>([&] { MoELayer::from_pretrained(dir.path(), 3); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.family << ": " << msg;
  }
  // Llama 4 (multimodal) keys live in text_config: a nested key is named with its path.
  TempDir dir;
  write_family_checkpoint(family_case("llama4_bf16"), dir.path());
  json config = json::parse(std::ifstream(dir / "config.json"));
  config["text_config"]["num_experts_per_tok"] = 0;
  std::ofstream(dir / "config.json") << config.dump();
  const std::string msg =
      thrown_message<std::invalid_argument>([&] { io::read_pretrained_config(dir.path()); });
  EXPECT_NE(msg.find("'text_config.num_experts_per_tok' = 0 is out of range"), std::string::npos) << msg;
}

// The converted weights are checked against the memory available before anything is allocated.
TEST(Refusals, WeightsThatDoNotFitTheMemoryAreRefusedBeforeAllocation) {
  TempDir dir;
  write_family_checkpoint(family_case("deepseek_v3_bf16"), dir.path());
  ::setenv("MOE_MEMORY_LIMIT_BYTES", "100000", 1);
  // bf16 storage of a bf16 file maps the file (no allocation of expert matrices): it loads.
  EXPECT_NO_THROW(io::load_pretrained_layer(dir.path(), 3, DType::kBF16));
  const std::string msg =
      thrown_message<io::OutOfMemory>([&] { io::load_pretrained_layer(dir.path(), 3, DType::kF32); });
  ::unsetenv("MOE_MEMORY_LIMIT_BYTES");
  io::LayerShape shape;
  shape.hidden = 64;
  shape.expert_ff = 40;
  shape.num_experts = 16;
  shape.num_shared_experts = 1;
  shape.shared_ff = 40;
  // The expert matrices and the bf16 router gate, converted to fp32.
  const uint64_t need = shape.expert_bytes(DType::kF32) + 16 * 64 * 4;
  EXPECT_NE(msg.find("layer 3 of " + dir.path().string() + " in f32 storage needs"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(std::to_string(need) + " bytes) but 100.0 kB are available"), std::string::npos) << msg;
}

}  // namespace
}  // namespace moe::testing

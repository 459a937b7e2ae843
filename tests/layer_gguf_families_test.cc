// Every MoE architecture llama.cpp writes, from a GGUF file alone (io::read_gguf_config,
// MoELayer::from_pretrained): for each GGUF family case (tests/support/family_gguf.h: every architecture,
// every tensor type, split files, Mixtral's per-expert tensors, fused gate/up experts) the layer matches the
// float64 reference of the family's published block (tests/support/family_reference.h) on the stored weights'
// exact values within 1e-5 per row, dropless, under both presets and with both kernel kinds; the metadata
// keys are read as llama.cpp reads them; dense and MTP layers, unsupported keys and tensor types, and weights
// too large for the memory are refused by name.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "moe/io/gguf_config.h"
#include "moe/io/io_error.h"
#include "moe/io/memory.h"
#include "moe/io/pretrained.h"
#include "moe/layer/moe_layer.h"
#include "tests/io_test_util.h"
#include "tests/support/family_accuracy.h"
#include "tests/support/family_gguf.h"

namespace moe::testing {
namespace {

using io::testing::TempDir;
using io::testing::thrown_message;
using kernels::DType;
using nlohmann::json;

std::vector<std::string> AllCases() {
  std::vector<std::string> names;
  for (const GgufFamilyCase& c : gguf_family_cases()) names.push_back(c.name);
  return names;
}

class GgufFamily : public ::testing::TestWithParam<std::string> {};
class GgufFamilyConfig : public ::testing::TestWithParam<std::string> {};

// The layer as stored (quantized files in their blocks, run by the quantized kernels and their activation
// rule: within gguf_stored_tolerance) and dequantized exactly to f32 (within 1e-5: fp32 roundings only),
// against the family's block on the stored weights' exact values.
TEST_P(GgufFamily, MatchesTheFloat64ReferenceOfItsPublishedBlock) {
  const GgufFamilyCase& c = gguf_family_case(GetParam());
  TempDir dir;
  const WrittenCheckpoint w = write_family_gguf(c, dir.path());
  const Batch b = FamilyTokens(w.ref.d);
  int near_ties = 0;
  double worst[2] = {0, 0};
  const std::optional<DType> storages[2] = {std::nullopt, DType::kF32};
  for (int s = 0; s < 2; ++s) {
    auto weights =
        std::make_shared<const io::LayerWeights>(io::load_pretrained_layer(w.dir, w.layer, storages[s]));
    if (s == 0) {
      EXPECT_EQ(weights->storage(), gguf_stored_dtype(c.type));
      EXPECT_EQ(weights->zero_copy(), c.type != ggml_type::F16);
    }
    const double bound = s == 0 ? gguf_stored_tolerance(c) : 1e-5;
    for (const char* preset : {"deterministic", "greedy"}) {
      for (int threads : {1, 2}) {
        auto layer = MoELayer::from_pretrained(w.dir, w.layer, preset, storages[s]);
        EXPECT_EQ(layer->weights().content_hash(), weights->content_hash());
        MoELayerConfig config = layer->config();
        config.policy.scope = CapacityScope::kNone;  // the published blocks never drop
        config.num_threads = threads;
        MoELayer dropless(config, weights);
        const double err = ErrorAgainstFamily(dropless, w, b, &near_ties);
        EXPECT_LE(err, bound) << preset << ", " << threads << " threads, storage "
                              << (s == 0 ? "as stored" : "f32");
        worst[s] = std::max(worst[s], err);
      }
    }
  }
  std::printf(
      "  %s (layer %d): max row relative error %.3g as stored, %.3g dequantized to f32, against the "
      "family's float64 block (%d near-tie rows skipped of %d)\n",
      c.name.c_str(), w.layer, worst[0], worst[1], near_ties, 8 * 48);
  EXPECT_LE(near_ties, 8 * 48 / 20);
}

INSTANTIATE_TEST_SUITE_P(Files, GgufFamily, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// What read_gguf_config makes of each file: the family, its layers and its router, as llama.cpp's graph runs
// them (and as the equivalent config.json says).
TEST_P(GgufFamilyConfig, IsReadAsLlamaCppReadsIt) {
  const GgufFamilyCase& c = gguf_family_case(GetParam());
  TempDir dir;
  const WrittenCheckpoint w = write_family_gguf(c, dir.path());
  const io::Pretrained p = io::open_pretrained(w.dir);  // config + check_gguf
  const io::PretrainedConfig& g = p.config;
  const json& j = w.config;
  EXPECT_EQ(g.format, io::CheckpointFormat::kGguf);
  EXPECT_EQ(g.model_type, c.arch);
  const std::string mt = j["model_type"];
  const io::Architecture want = mt == "mixtral"       ? io::Architecture::kMixtral
                                : mt == "qwen2_moe"   ? io::Architecture::kQwen2Moe
                                : mt == "qwen3_moe"   ? io::Architecture::kQwen3Moe
                                : mt == "olmoe"       ? io::Architecture::kOlmoe
                                : mt == "deepseek_v2" ? io::Architecture::kDeepseekV2
                                : mt == "deepseek_v3" ? io::Architecture::kDeepseekV3
                                : mt == "glm4_moe"    ? io::Architecture::kGlm4Moe
                                : mt == "gpt_oss"     ? io::Architecture::kGptOss
                                                      : io::Architecture::kLlama4;
  EXPECT_EQ(g.architecture, want);
  EXPECT_EQ(g.moe_layers, w.moe_layers);
  EXPECT_EQ(g.router.top_k, j["num_experts_per_tok"].get<int>());
  EXPECT_EQ(g.layer.num_experts, w.ref.num_experts);
  EXPECT_EQ(g.layer.hidden, w.ref.d);
  EXPECT_EQ(g.layer.expert_ff, w.ref.experts[0].ff);
  EXPECT_EQ(g.layer.num_shared_experts > 0, w.ref.shared.has_value());
  if (w.ref.shared) {
    EXPECT_EQ(g.layer.shared_ff, w.ref.shared->ff);
  }
  EXPECT_EQ(g.layer.shared_expert_gate, !w.ref.shared_gate.empty());
  EXPECT_EQ(g.layer.score_bias, !w.ref.score_bias.empty());
  EXPECT_EQ(g.layer.router_bias, !w.ref.router_bias.empty());
  EXPECT_EQ(g.layer.expert_bias, !w.ref.experts[0].gate_bias.empty());
  EXPECT_FLOAT_EQ(g.router.scaling_factor, static_cast<float>(j.value("routed_scaling_factor", 1.0)));
  EXPECT_EQ(g.router.num_groups,
            j.value("n_group", 1) == j.value("topk_group", 1) ? 1 : j.value("n_group", 1));
  if (mt == "deepseek_v2") {
    EXPECT_EQ(g.router.group_score, GroupScore::kMax);
    EXPECT_EQ(g.router.topk_groups, 2);
    EXPECT_FALSE(g.router.renormalize);
    EXPECT_EQ(g.router.scoring, Scoring::kSoftmax);
  }
  if (mt == "deepseek_v3" || mt == "glm4_moe") {
    EXPECT_EQ(g.router.scoring, Scoring::kSigmoid);
    EXPECT_EQ(g.router.group_score, GroupScore::kTopTwoSum);
    EXPECT_TRUE(g.router.renormalize);
  }
  if (mt == "glm4_moe") {
    EXPECT_EQ(g.num_extra_layers, 1);
  }
  if (mt == "qwen3_moe" || mt == "mixtral") {
    EXPECT_TRUE(g.router.renormalize);
  }
  if (mt == "qwen2_moe" || mt == "olmoe") {
    EXPECT_FALSE(g.router.renormalize);
  }
  if (mt == "gpt_oss") {
    EXPECT_EQ(g.router.scoring, Scoring::kSoftmaxTopK);
    EXPECT_TRUE(g.router.rank_by_logit);
    EXPECT_EQ(g.activation, kernels::Activation::kClampedSwiGLU);
    EXPECT_FLOAT_EQ(g.swiglu_limit, 7.0f);
    EXPECT_FLOAT_EQ(g.swiglu_alpha, 1.702f);
    EXPECT_EQ(g.sliding_window, 128);
  }
  if (mt == "llama4_text") {
    EXPECT_TRUE(g.weight_on_input);
    EXPECT_TRUE(g.router.rank_by_logit);
    EXPECT_EQ(g.router.scoring, Scoring::kSigmoid);
  }
  EXPECT_EQ(g.vocab_size, 32);
  EXPECT_EQ(g.num_heads, 4);
  EXPECT_EQ(g.max_positions, 4096);
  EXPECT_FLOAT_EQ(static_cast<float>(g.rms_eps), 1e-6f);
  EXPECT_FALSE(g.file_type.empty());
  EXPECT_EQ(p.gguf->shards().size(), static_cast<size_t>(c.shards));
  // The layers that are not MoE layers: refused with the MoE layer list; past the last: out of range.
  for (int layer = 0; layer < g.num_layers; ++layer) {
    if (g.is_moe_layer(layer)) continue;
    const std::string msg =
        thrown_message<std::invalid_argument>([&] { io::load_pretrained_layer(p, layer); });
    EXPECT_NE(msg.find("is a dense MLP layer, not an MoE layer; the MoE layers of this " + c.arch +
                       " checkpoint are " + g.moe_layer_list()),
              std::string::npos)
        << msg;
  }
  const std::string msg =
      thrown_message<std::invalid_argument>([&] { io::load_pretrained_layer(p, g.num_layers); });
  EXPECT_NE(msg.find("is out of range: " + c.arch + ".block_count = "), std::string::npos) << msg;
  if (g.num_extra_layers > 0) {
    EXPECT_NE(msg.find("MTP layers after the last"), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, GgufFamilyConfig, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Matrices whose type is the storage dtype are views into the mapping; the others are converted.
TEST(GgufLayer, MatchingTypesAreZeroCopyViewsIntoTheMapping) {
  TempDir dir;
  const WrittenCheckpoint w = write_family_gguf(gguf_family_case("kimi_k2_bf16"), dir.path());
  const io::Pretrained p = io::open_pretrained(w.dir);
  const io::GgufTensorInfo& gate = *p.gguf->tensor("blk.2.ffn_gate_exps.weight");
  const io::LayerWeights bf16 = io::load_pretrained_layer(p, w.layer, DType::kBF16);
  EXPECT_TRUE(bf16.zero_copy());
  EXPECT_EQ(bf16.experts()[0].gate_proj.data, gate.data);
  EXPECT_EQ(bf16.experts()[3].gate_proj.data, gate.data + 3 * gate.ne[1] * gate.row_bytes());
  EXPECT_EQ(bf16.shared()->down_proj.data, p.gguf->tensor("blk.2.ffn_down_shexp.weight")->data);
  const io::LayerWeights f32 = io::load_pretrained_layer(p, w.layer, DType::kF32);
  EXPECT_FALSE(f32.zero_copy());
  EXPECT_NE(f32.experts()[0].gate_proj.data, gate.data);
  EXPECT_EQ(static_cast<const float*>(f32.experts()[0].gate_proj.data)[5],
            static_cast<float>(w.ref.experts[0].gate[5]));
}

// A rank's part (expert parallelism): the router and the shared expert, and only the listed experts, with the
// hashes the whole layer gives them; the memory check counts only what is read.
TEST(GgufLayer, APartHoldsOnlyItsExperts) {
  TempDir dir;
  for (const char* name : {"kimi_k2_bf16", "llama_per_expert_bf16"}) {
    const WrittenCheckpoint w = write_family_gguf(gguf_family_case(name), dir / name);
    const io::Pretrained p = io::open_pretrained(w.dir);
    const io::LayerWeights whole = io::load_pretrained_layer(p, w.layer, DType::kF32);
    const io::LayerWeights part =
        io::load_pretrained_layer(p, w.layer, DType::kF32, io::ExpertSet::only({5, 2}));
    EXPECT_EQ(part.held().list(), (std::vector<int>{2, 5})) << name;
    EXPECT_TRUE(part.holds_expert(5));
    EXPECT_FALSE(part.holds_expert(0));
    EXPECT_EQ(part.replicated_hash(), whole.replicated_hash()) << name;
    EXPECT_EQ(part.expert_hash(2), whole.expert_hash(2)) << name;
    EXPECT_EQ(part.expert_hash(5), whole.expert_hash(5)) << name;
    // f32 copies of 2 of 8 (or 16) experts fit where the whole layer's do not.
    const uint64_t one_expert = 3 * 32 * 64 * 4;
    ::setenv("MOE_MEMORY_LIMIT_BYTES", std::to_string(3 * one_expert + 16 * 64 * 4).c_str(), 1);
    EXPECT_NO_THROW(io::load_pretrained_layer(p, w.layer, DType::kF32, io::ExpertSet::only({1, 3})));
    EXPECT_THROW(io::load_pretrained_layer(p, w.layer, DType::kF32), io::OutOfMemory);
    ::unsetenv("MOE_MEMORY_LIMIT_BYTES");
  }
  const WrittenCheckpoint w = write_family_gguf(gguf_family_case("olmoe_f32"), dir / "olmoe");
  const std::string msg = thrown_message<std::invalid_argument>(
      [&] { io::load_pretrained_layer(w.dir, w.layer, std::nullopt, io::ExpertSet::only({8})); });
  EXPECT_NE(msg.find("8"), std::string::npos) << msg;
}

// A split model loads the same layer as the single file, from whichever shard it is named by.
TEST(GgufLayer, SplitFilesLoadTheSameLayer) {
  TempDir dir;
  GgufFamilyCase c = gguf_family_case("llama_f16");
  const WrittenCheckpoint single = write_family_gguf(c, dir / "single");
  c.shards = 2;
  const WrittenCheckpoint split = write_family_gguf(c, dir / "split");
  const uint64_t hash = io::load_pretrained_layer(single.dir, single.layer).content_hash();
  EXPECT_EQ(io::load_pretrained_layer(split.dir, split.layer).content_hash(), hash);
  EXPECT_EQ(io::load_pretrained_layer(dir / "split" / "tiny-llama_f16-00002-of-00002.gguf", split.layer)
                .content_hash(),
            hash);
}

struct Refusal {
  const char* family;
  std::function<void(GgufWriter&)> edit;
  const char* expect;
};

// Each unsupported or inconsistent file is refused with the key or tensor, its value and what is supported.
TEST(GgufRefusals, UnsupportedOrInconsistentFilesAreNamed) {
  const std::vector<Refusal> cases = {
      {"olmoe_f32", [](GgufWriter& w) { w.set("general.architecture", gguf_str("falcon")); },
       "general.architecture 'falcon' is not supported (supported MoE architectures: llama, qwen2moe, "
       "qwen3moe, "
       "olmoe, deepseek2, glm4moe, gpt-oss, llama4)"},
      {"llama_f16", [](GgufWriter& w) { w.erase("llama.expert_count"); },
       "is a dense llama model (llama.expert_count is absent): this project loads MoE layers only"},
      {"olmoe_f32", [](GgufWriter& w) { w.erase("olmoe.block_count"); }, "lacks olmoe.block_count"},
      {"olmoe_f32", [](GgufWriter& w) { w.set("olmoe.expert_count", gguf_str("8")); },
       "olmoe.expert_count must be an integer (got string '8')"},
      {"olmoe_f32", [](GgufWriter& w) { w.set("olmoe.expert_used_count", gguf_u32(9)); },
       "olmoe.expert_used_count (9) exceeds olmoe.expert_count (8)"},
      {"olmoe_f32", [](GgufWriter& w) { w.add("olmoe.expert_group_scale", gguf_f32(2)); },
       "olmoe.expert_group_scale (f32 2) is not supported: group-scaled routing weights"},
      {"olmoe_f32",
       [](GgufWriter& w) { w.add("olmoe.swiglu_clamp_exp", gguf_array(GgufType::F32, {gguf_f32(7)})); },
       "olmoe.swiglu_clamp_exp (array of 1 f32) is not supported"},
      {"olmoe_f32", [](GgufWriter& w) { w.add("olmoe.expert_weights_norm", gguf_bool(true)); },
       "olmoe.expert_weights_norm = true is not supported for olmoe (llama.cpp's graph never renormalises"},
      {"llama_f16", [](GgufWriter& w) { w.add("llama.expert_gating_func", gguf_u32(2)); },
       "llama.expert_gating_func = 2 is not supported for llama (llama.cpp's llama graph uses 1: softmax)"},
      {"llama_f16", [](GgufWriter& w) { w.add("llama.expert_group_count", gguf_u32(2)); },
       "llama.expert_group_count > 1 is not supported for llama"},
      {"deepseek2_v2_f16", [](GgufWriter& w) { w.add("deepseek2.expert_gating_func", gguf_u32(3)); },
       "deepseek2.expert_gating_func = 3 is not supported for deepseek2 (supported: 1 softmax - DeepSeek-V2 "
       "- and 2 "
       "sigmoid"},
      {"deepseek2_v2_f16",
       [](GgufWriter& w) {
         w.add_tensor("blk.1.exp_probs_b.bias", {16}, ggml_type::F32, std::string(64, '\0'));
       },
       "has exp_probs_b tensors with deepseek2.expert_gating_func softmax"},
      {"deepseek2_v2_f16", [](GgufWriter& w) { w.set("deepseek2.expert_group_count", gguf_u32(3)); },
       "deepseek2.expert_count (16) is not a multiple of deepseek2.expert_group_count (3)"},
      {"deepseek2_v2_f16", [](GgufWriter& w) { w.set("deepseek2.expert_group_used_count", gguf_u32(5)); },
       "deepseek2.expert_group_used_count (5) exceeds deepseek2.expert_group_count (4)"},
      {"kimi_k2_bf16",
       [](GgufWriter& w) {
         w.erase_tensor("blk.1.exp_probs_b.bias");
         w.erase_tensor("blk.2.exp_probs_b.bias");
       },
       "blk.2.exp_probs_b.bias missing from"},
      {"qwen2moe_q8_0", [](GgufWriter& w) { w.set("qwen2moe.expert_feed_forward_length", gguf_u32(48)); },
       "qwen2moe.expert_feed_forward_length = 48 but blk.0.ffn_gate_exps.weight has shape [64, 32, 8] "
       "(expected "
       "[64, 48, 8])"},
      {"olmoe_f32", [](GgufWriter& w) { w.set("olmoe.embedding_length", gguf_u32(32)); },
       "olmoe.embedding_length = 32 but blk.0.ffn_gate_inp.weight has shape [64, 8] (expected [32, 8])"},
      {"olmoe_f32", [](GgufWriter& w) { w.set("olmoe.block_count", gguf_u32(1)); },
       "olmoe.block_count = 1 but it has blk.1.ffn_gate_inp.weight"},
      {"olmoe_f32", [](GgufWriter& w) { w.tensor("blk.1.ffn_up_exps.weight")->type = ggml_type::Q4_0; },
       "blk.1.ffn_up_exps.weight: GGUF type Q4_0 is not supported (supported: F32, F16, BF16, Q8_0, Q4_K, "
       "Q6_K, "
       "MXFP4)"},
      {"qwen3moe_q6_k", [](GgufWriter& w) { w.tensor("blk.1.ffn_gate_exps.weight")->type = ggml_type::Q5_K; },
       "blk.1.ffn_gate_exps.weight: GGUF type Q5_K is not supported (supported: F32, F16, BF16, Q8_0, Q4_K, "
       "Q6_K, "
       "MXFP4)"},
      {"olmoe_f32", [](GgufWriter& w) { w.erase_tensor("blk.1.ffn_down_exps.weight"); },
       "blk.1.ffn_down_exps.weight missing from"},
      {"olmoe_f32",
       [](GgufWriter& w) {
         w.tensor("blk.1.ffn_down_exps.weight")->ne = {32, 64, 4};
         w.tensor("blk.1.ffn_down_exps.weight")->data.resize(32 * 64 * 4 * 4);
       },
       "blk.1.ffn_down_exps.weight: shape [32, 64, 4] but expected [32, 64, 8]"},
      {"olmoe_f32", [](GgufWriter& w) { w.set("olmoe.block_count", gguf_u64(uint64_t{1} << 40)); },
       "olmoe.block_count = 1099511627776 is out of range (1-1048576)"},
      {"olmoe_f32", [](GgufWriter& w) { w.set("olmoe.block_count", gguf_u32(100000)); },
       "olmoe.block_count = 100000 but the file has only 14 tensors"},
      {"llama4_bf16", [](GgufWriter& w) { w.set("llama4.interleave_moe_layer_step", gguf_u32(0)); },
       "llama4.interleave_moe_layer_step = 0 is out of range"},
  };
  for (const Refusal& r : cases) {
    TempDir dir;
    const WrittenCheckpoint w = write_family_gguf(gguf_family_case(r.family), dir.path(), r.edit);
    const std::string msg =
        thrown_message<std::invalid_argument>([&] { MoELayer::from_pretrained(w.dir, w.layer); });
    EXPECT_NE(msg.find(r.expect), std::string::npos) << r.family << ": " << msg;
  }
}

// The converted weights are checked against the memory available before anything is allocated; views into
// the mapping (plain matrices of the storage dtype, quantized ones as stored) take none.
TEST(GgufRefusals, WeightsThatDoNotFitTheMemoryAreRefusedBeforeAllocation) {
  TempDir dir;
  const WrittenCheckpoint bf16 = write_family_gguf(gguf_family_case("kimi_k2_bf16"), dir / "bf16");
  const WrittenCheckpoint f16 = write_family_gguf(gguf_family_case("llama_f16"), dir / "f16");
  const WrittenCheckpoint q8 = write_family_gguf(gguf_family_case("qwen2moe_q8_0"), dir / "q8");
  ::setenv("MOE_MEMORY_LIMIT_BYTES", "100000", 1);
  EXPECT_NO_THROW(io::load_pretrained_layer(bf16.dir, bf16.layer));
  EXPECT_NO_THROW(io::load_pretrained_layer(q8.dir, q8.layer));
  const std::string msg =
      thrown_message<io::OutOfMemory>([&] { io::load_pretrained_layer(f16.dir, f16.layer); });
  const std::string q8_msg =
      thrown_message<io::OutOfMemory>([&] { io::load_pretrained_layer(q8.dir, q8.layer, DType::kBF16); });
  ::unsetenv("MOE_MEMORY_LIMIT_BYTES");
  // 8 experts of 3 [32, 64] matrices in f32 (F16 in the file, widened as stored).
  EXPECT_NE(msg.find("layer 1 of " + f16.dir.string() + " as stored needs"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(3 * 8 * 32 * 64 * 4) + " bytes) but 100.0 kB are available"),
            std::string::npos)
      << msg;
  // 8 experts of 3 [32, 64] and the shared expert's 3 [96, 64], dequantized to bf16.
  EXPECT_NE(q8_msg.find("layer 1 of " + q8.dir.string() + " in bf16 storage needs " +
                        io::format_bytes((3 * 8 * 32 * 64 + 3 * 96 * 64) * 2)),
            std::string::npos)
      << q8_msg;
}

}  // namespace
}  // namespace moe::testing

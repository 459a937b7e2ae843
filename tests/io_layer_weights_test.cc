// LayerWeights: random init, save/load round trips for every architecture and dtype, storage conversions,
// sharded checkpoints, validation errors, content hash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "moe/io/dtype_convert.h"
#include "moe/io/layer_weights.h"
#include "tests/io_test_util.h"

namespace moe::io {
namespace {

using kernels::DType;
using kernels::MatrixView;
using testing::TempDir;
using testing::thrown_message;

LayerShape shape_for(Architecture arch) {
  LayerShape s;
  s.hidden = 16;
  s.expert_ff = 12;
  s.num_experts = 4;
  switch (arch) {
    case Architecture::kMixtral:
    case Architecture::kOlmoe:
    case Architecture::kQwen3Moe:
      break;
    case Architecture::kQwen2Moe:
      s.num_shared_experts = 1;
      s.shared_ff = 20;
      s.shared_expert_gate = true;
      break;
    case Architecture::kDeepseekV2:
      s.num_shared_experts = 2;
      s.shared_ff = 24;
      break;
    case Architecture::kDeepseekV3:
    case Architecture::kGlm4Moe:
      s.num_shared_experts = 2;
      s.shared_ff = 24;  // moe_intermediate_size * n_shared_experts
      s.score_bias = true;
      break;
    case Architecture::kGptOss:
      s.router_bias = true;
      s.expert_bias = true;
      break;
    case Architecture::kLlama4:
      s.num_shared_experts = 1;
      s.shared_ff = 12;
      break;
  }
  return s;
}

// Element (r, c) of a view as float.
float at(const MatrixView& v, int64_t r, int64_t c) {
  const auto* p =
      static_cast<const std::byte*>(v.data) + (r * v.row_stride + c) * kernels::dtype_size(v.dtype);
  uint16_t h;
  switch (v.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16:
      std::memcpy(&h, p, 2);
      return kernels::bf16_to_f32(h);
    case DType::kF16:
      std::memcpy(&h, p, 2);
      return internal::f16_to_f32(h);
    default:  // quantized views are compared by tests/kernels_quant_formats_test.cc
      break;
  }
  return NAN;
}

// Calls fn(view_a, view_b) for every pair of corresponding matrices of two layers of equal shape.
void for_each_matrix_pair(const LayerWeights& a, const LayerWeights& b,
                          const std::function<void(const MatrixView&, const MatrixView&)>& fn) {
  fn(a.router_gate(), b.router_gate());
  ASSERT_EQ(a.experts().size(), b.experts().size());
  for (size_t e = 0; e < a.experts().size(); ++e) {
    fn(a.experts()[e].gate_proj, b.experts()[e].gate_proj);
    fn(a.experts()[e].up_proj, b.experts()[e].up_proj);
    fn(a.experts()[e].down_proj, b.experts()[e].down_proj);
  }
  ASSERT_EQ(a.shared().has_value(), b.shared().has_value());
  if (a.shared()) {
    fn(a.shared()->gate_proj, b.shared()->gate_proj);
    fn(a.shared()->up_proj, b.shared()->up_proj);
    fn(a.shared()->down_proj, b.shared()->down_proj);
  }
  ASSERT_EQ(a.shared_gate().has_value(), b.shared_gate().has_value());
  if (a.shared_gate()) fn(*a.shared_gate(), *b.shared_gate());
}

// Rewrites the safetensors file `src` into `dst` after `edit` changed its tensor list; `storage` keeps the
// bytes that edits add alive.
void rewrite(
    const std::filesystem::path& src, const std::filesystem::path& dst,
    const std::function<void(std::vector<TensorToWrite>&, std::vector<std::vector<std::byte>>&)>& edit) {
  SafetensorsFile f(src);
  std::vector<TensorToWrite> tensors;
  for (const auto& name : f.names()) {
    const TensorInfo& t = f.get(name);
    tensors.push_back({name, std::string(safetensors_dtype_name(t.dtype)), t.shape, {t.data, t.nbytes}});
  }
  std::vector<std::vector<std::byte>> storage;
  storage.reserve(64);
  edit(tensors, storage);
  write_safetensors(dst, tensors);
}

constexpr Architecture kAllArchitectures[] = {
    Architecture::kMixtral, Architecture::kQwen2Moe, Architecture::kDeepseekV3,
    Architecture::kOlmoe,   Architecture::kQwen3Moe, Architecture::kDeepseekV2,
    Architecture::kGlm4Moe, Architecture::kGptOss,   Architecture::kLlama4};

TEST(Architecture, ParseAndPrint) {
  for (auto a : kAllArchitectures) EXPECT_EQ(parse_architecture(to_string(a)), a);
  EXPECT_EQ(parse_architecture("Qwen2_MoE"), Architecture::kQwen2Moe);
  EXPECT_EQ(parse_architecture("GPT_OSS"), Architecture::kGptOss);
  const std::string msg = thrown_message<std::invalid_argument>([] { parse_architecture("llama"); });
  EXPECT_NE(msg.find("unknown architecture 'llama'"), std::string::npos) << msg;
  EXPECT_NE(
      msg.find("mixtral, qwen2-moe, deepseek-v3, olmoe, qwen3-moe, deepseek-v2, glm4-moe, gpt-oss, llama4"),
      std::string::npos)
      << msg;
}

TEST(LayerShape, Validation) {
  LayerShape s = shape_for(Architecture::kMixtral);
  EXPECT_NO_THROW(s.validate_for(Architecture::kMixtral));
  s.hidden = 0;
  EXPECT_NE(thrown_message<std::invalid_argument>([&] { s.validate(); }).find("hidden (0) must be positive"),
            std::string::npos);
  s = shape_for(Architecture::kQwen2Moe);
  EXPECT_NE(thrown_message<std::invalid_argument>([&] {
              s.validate_for(Architecture::kMixtral);
            }).find("mixtral layers have no shared expert"),
            std::string::npos);
  s = shape_for(Architecture::kDeepseekV3);
  s.score_bias = false;
  EXPECT_NE(thrown_message<std::invalid_argument>([&] {
              s.validate_for(Architecture::kDeepseekV3);
            }).find("e_score_correction_bias"),
            std::string::npos);
  s = shape_for(Architecture::kMixtral);
  s.shared_expert_gate = true;
  EXPECT_NE(thrown_message<std::invalid_argument>([&] { s.validate(); }).find("shared_expert_gate requires"),
            std::string::npos);
}

TEST(RandomLayer, ShapesDtypesAndBounds) {
  const LayerShape s = shape_for(Architecture::kQwen2Moe);
  const LayerWeights w = random_layer(s, DType::kBF16, 7);
  EXPECT_EQ(w.shape(), s);
  EXPECT_EQ(w.storage(), DType::kBF16);
  EXPECT_EQ(w.router_gate().dtype, DType::kF32);
  EXPECT_EQ(w.router_gate().rows, 4);
  EXPECT_EQ(w.router_gate().cols, 16);
  ASSERT_EQ(w.experts().size(), 4u);
  EXPECT_EQ(w.experts()[3].gate_proj.rows, 12);
  EXPECT_EQ(w.experts()[3].down_proj.rows, 16);
  EXPECT_EQ(w.experts()[3].down_proj.cols, 12);
  EXPECT_EQ(w.experts()[3].up_proj.dtype, DType::kBF16);
  ASSERT_TRUE(w.shared());
  EXPECT_EQ(w.shared()->up_proj.rows, 20);
  ASSERT_TRUE(w.shared_gate());
  EXPECT_EQ(w.shared_gate()->dtype, DType::kF32);
  EXPECT_TRUE(w.score_bias().empty());
  EXPECT_FALSE(w.zero_copy());
  const float bound_in_hidden = 1.0f / 4.0f, bound_in_ff = 1.0f / std::sqrt(12.0f);
  const MatrixView& g = w.experts()[1].gate_proj;
  const MatrixView& d = w.experts()[1].down_proj;
  float max_abs = 0;
  for (int64_t r = 0; r < g.rows; ++r) {
    for (int64_t c = 0; c < g.cols; ++c) max_abs = std::max(max_abs, std::abs(at(g, r, c)));
  }
  EXPECT_LE(max_abs, bound_in_hidden);
  EXPECT_GT(max_abs, bound_in_hidden / 2);
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int64_t c = 0; c < d.cols; ++c) EXPECT_LE(std::abs(at(d, r, c)), bound_in_ff * 1.01f);
  }
  EXPECT_THROW(random_layer(s, DType::kF16, 7), std::invalid_argument);
}

TEST(RandomLayer, SeededAndReproducible) {
  const LayerShape s = shape_for(Architecture::kDeepseekV3);
  const LayerWeights a = random_layer(s, DType::kF32, 42);
  const LayerWeights b = random_layer(s, DType::kF32, 42);
  const LayerWeights c = random_layer(s, DType::kF32, 43);
  EXPECT_EQ(a.content_hash(), b.content_hash());
  EXPECT_NE(a.content_hash(), c.content_hash());
  ASSERT_EQ(a.score_bias().size(), 4u);
  for (float v : a.score_bias()) EXPECT_LT(std::abs(v), 0.05f);
  // The same bits on every machine: pinned values (splitmix64 + IEEE arithmetic only).
  EXPECT_EQ(a.content_hash(), 0x1351ccb942592b33ull) << std::hex << a.content_hash();
  EXPECT_EQ(std::bit_cast<uint32_t>(at(a.experts()[0].gate_proj, 0, 0)), 0x3d3f7af8u)
      << std::hex << std::bit_cast<uint32_t>(at(a.experts()[0].gate_proj, 0, 0));
  EXPECT_EQ(random_layer(s, DType::kBF16, 42).content_hash(), 0x65bd920fcefa6f30ull)
      << std::hex << random_layer(s, DType::kBF16, 42).content_hash();
  // Streams are keyed by tensor name: more experts leave the first ones unchanged.
  LayerShape more = s;
  more.num_experts = 6;
  const LayerWeights m = random_layer(more, DType::kF32, 42);
  const MatrixView &x = a.experts()[2].down_proj, &y = m.experts()[2].down_proj;
  EXPECT_EQ(std::memcmp(x.data, y.data, static_cast<size_t>(x.rows * x.cols) * 4), 0);
}

TEST(RandomLayer, MoveKeepsViewsValid) {
  LayerWeights a = random_layer(shape_for(Architecture::kQwen2Moe), DType::kF32, 1);
  const uint64_t h = a.content_hash();
  const void* p = a.experts()[0].gate_proj.data;
  LayerWeights b = std::move(a);
  EXPECT_EQ(b.experts()[0].gate_proj.data, p);
  EXPECT_EQ(b.content_hash(), h);
  LayerWeights c;
  c = std::move(b);
  EXPECT_EQ(c.content_hash(), h);
}

struct RoundTripCase {
  Architecture arch;
  DType storage;
};

class LayerRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(LayerRoundTrip, SaveThenLoadGivesTheSameWeights) {
  const auto [arch, storage] = GetParam();
  TempDir dir;
  const LayerShape s = shape_for(arch);
  const LayerWeights w = random_layer(s, storage, 1234);
  save_layer(w, arch, 3, dir / "layer.safetensors");

  const auto ckpt = Checkpoint::open(dir / "layer.safetensors");
  const LayerWeights loaded = load_layer(ckpt, arch, 3, s);  // storage: the file's
  EXPECT_EQ(loaded.storage(), storage);
  // (gpt-oss and Llama 4 fuse and transpose their experts in the file, which are laid out anew; their fp32
  // router gate is still a view.)
  EXPECT_TRUE(loaded.zero_copy());
  EXPECT_EQ(loaded.content_hash(), w.content_hash());
  for_each_matrix_pair(w, loaded, [](const MatrixView& a, const MatrixView& b) {
    ASSERT_EQ(a.dtype, b.dtype);
    ASSERT_EQ(a.rows, b.rows);
    ASSERT_EQ(a.cols, b.cols);
    EXPECT_EQ(
        std::memcmp(a.data, b.data, static_cast<size_t>(a.rows * a.cols) * kernels::dtype_size(a.dtype)), 0);
  });
  ASSERT_EQ(loaded.score_bias().size(), w.score_bias().size());
  for (size_t e = 0; e < w.score_bias().size(); ++e) EXPECT_EQ(loaded.score_bias()[e], w.score_bias()[e]);
  ASSERT_EQ(loaded.router_bias().size(), w.router_bias().size());
  for (size_t e = 0; e < w.router_bias().size(); ++e) EXPECT_EQ(loaded.router_bias()[e], w.router_bias()[e]);
  for (size_t e = 0; e < w.experts().size(); ++e) {
    const ExpertTensors &a = w.experts()[e], &b = loaded.experts()[e];
    EXPECT_TRUE(std::equal(a.gate_bias.begin(), a.gate_bias.end(), b.gate_bias.begin(), b.gate_bias.end()));
    EXPECT_TRUE(std::equal(a.up_bias.begin(), a.up_bias.end(), b.up_bias.begin(), b.up_bias.end()));
    EXPECT_TRUE(std::equal(a.down_bias.begin(), a.down_bias.end(), b.down_bias.begin(), b.down_bias.end()));
    EXPECT_EQ(a.gate_bias.size(), s.expert_bias ? static_cast<size_t>(s.expert_ff) : 0);
  }

  // Explicitly asking for the file's dtype changes nothing.
  EXPECT_EQ(load_layer(ckpt, arch, 3, s, storage).content_hash(), w.content_hash());
  // The layer index is part of the names.
  const io::Architecture layer_arch = arch;  // clang 14 cannot capture a structured binding (C++20)
  const std::string msg = thrown_message<std::invalid_argument>([&] { load_layer(ckpt, layer_arch, 4, s); });
  EXPECT_NE(msg.find("model.layers.4."), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing from checkpoint"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(All, LayerRoundTrip,
                         ::testing::Values(RoundTripCase{Architecture::kMixtral, DType::kF32},
                                           RoundTripCase{Architecture::kMixtral, DType::kBF16},
                                           RoundTripCase{Architecture::kQwen2Moe, DType::kF32},
                                           RoundTripCase{Architecture::kQwen2Moe, DType::kBF16},
                                           RoundTripCase{Architecture::kDeepseekV3, DType::kF32},
                                           RoundTripCase{Architecture::kDeepseekV3, DType::kBF16},
                                           RoundTripCase{Architecture::kOlmoe, DType::kF32},
                                           RoundTripCase{Architecture::kOlmoe, DType::kBF16},
                                           RoundTripCase{Architecture::kQwen3Moe, DType::kBF16},
                                           RoundTripCase{Architecture::kDeepseekV2, DType::kF32},
                                           RoundTripCase{Architecture::kGlm4Moe, DType::kBF16},
                                           RoundTripCase{Architecture::kGptOss, DType::kF32},
                                           RoundTripCase{Architecture::kGptOss, DType::kBF16},
                                           RoundTripCase{Architecture::kLlama4, DType::kF32},
                                           RoundTripCase{Architecture::kLlama4, DType::kBF16}),
                         [](const ::testing::TestParamInfo<RoundTripCase>& info) {
                           std::string name(to_string(info.param.arch));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name + "_" + std::string(kernels::to_string(info.param.storage));
                         });

TEST(LayerNames, HuggingFaceNamesPerArchitecture) {
  TempDir dir;
  const std::vector<std::pair<Architecture, std::vector<std::string>>> cases = {
      {Architecture::kMixtral,
       {"model.layers.2.block_sparse_moe.gate.weight", "model.layers.2.block_sparse_moe.experts.3.w1.weight",
        "model.layers.2.block_sparse_moe.experts.3.w3.weight",
        "model.layers.2.block_sparse_moe.experts.3.w2.weight"}},
      {Architecture::kQwen2Moe,
       {"model.layers.2.mlp.gate.weight", "model.layers.2.mlp.experts.0.gate_proj.weight",
        "model.layers.2.mlp.shared_expert.down_proj.weight", "model.layers.2.mlp.shared_expert_gate.weight"}},
      {Architecture::kDeepseekV3,
       {"model.layers.2.mlp.gate.e_score_correction_bias", "model.layers.2.mlp.experts.1.up_proj.weight",
        "model.layers.2.mlp.shared_experts.gate_proj.weight"}},
      {Architecture::kOlmoe,
       {"model.layers.2.mlp.gate.weight", "model.layers.2.mlp.experts.3.down_proj.weight"}},
      {Architecture::kQwen3Moe,
       {"model.layers.2.mlp.gate.weight", "model.layers.2.mlp.experts.3.down_proj.weight"}},
      {Architecture::kDeepseekV2,
       {"model.layers.2.mlp.gate.weight", "model.layers.2.mlp.shared_experts.gate_proj.weight"}},
      {Architecture::kGlm4Moe,
       {"model.layers.2.mlp.gate.e_score_correction_bias",
        "model.layers.2.mlp.shared_experts.up_proj.weight"}},
      {Architecture::kGptOss,
       {"model.layers.2.mlp.router.weight", "model.layers.2.mlp.router.bias",
        "model.layers.2.mlp.experts.gate_up_proj", "model.layers.2.mlp.experts.gate_up_proj_bias",
        "model.layers.2.mlp.experts.down_proj", "model.layers.2.mlp.experts.down_proj_bias"}},
      {Architecture::kLlama4,
       {"language_model.model.layers.2.feed_forward.router.weight",
        "language_model.model.layers.2.feed_forward.experts.gate_up_proj",
        "language_model.model.layers.2.feed_forward.experts.down_proj",
        "language_model.model.layers.2.feed_forward.shared_expert.gate_proj.weight"}},
  };
  for (const auto& [arch, names] : cases) {
    const LayerShape s = shape_for(arch);
    save_layer(random_layer(s, DType::kF32, 5), arch, 2, dir / "n.safetensors");
    SafetensorsFile f(dir / "n.safetensors");
    for (const auto& name : names) EXPECT_TRUE(f.contains(name)) << to_string(arch) << ": " << name;
    const bool fused = arch == Architecture::kGptOss || arch == Architecture::kLlama4;
    const size_t expected_count =
        1 + (s.score_bias ? 1 : 0) + (s.router_bias ? 1 : 0) +
        (fused ? 2 + (s.expert_bias ? 2 : 0) : 3 * static_cast<size_t>(s.num_experts)) +
        (s.num_shared_experts > 0 ? 3 : 0) + (s.shared_expert_gate ? 1 : 0);
    EXPECT_EQ(f.names().size(), expected_count) << to_string(arch);
    if (arch == Architecture::kGptOss) {
      EXPECT_EQ(f.get("model.layers.2.mlp.experts.gate_up_proj").shape, (std::vector<int64_t>{4, 16, 24}));
      EXPECT_EQ(f.get("model.layers.2.mlp.experts.down_proj").shape, (std::vector<int64_t>{4, 12, 16}));
      EXPECT_EQ(f.get("model.layers.2.mlp.experts.gate_up_proj_bias").shape, (std::vector<int64_t>{4, 24}));
    }
    if (arch == Architecture::kDeepseekV3) {
      EXPECT_EQ(f.get("model.layers.2.mlp.shared_experts.up_proj.weight").shape,
                (std::vector<int64_t>{24, 16}));
      EXPECT_EQ(f.get("model.layers.2.mlp.gate.e_score_correction_bias").shape, (std::vector<int64_t>{4}));
    }
  }
}

TEST(LayerStorage, F32FileLoadedAsBf16RoundsToNearestEven) {
  TempDir dir;
  const LayerShape s = shape_for(Architecture::kDeepseekV3);
  save_layer(random_layer(s, DType::kF32, 9), Architecture::kDeepseekV3, 0, dir / "f32.safetensors");
  const LayerWeights as_bf16 =
      load_layer(Checkpoint::open(dir / "f32.safetensors"), Architecture::kDeepseekV3, 0, s, DType::kBF16);
  EXPECT_EQ(as_bf16.storage(), DType::kBF16);
  // random_layer draws in fp32 and rounds the same way.
  EXPECT_EQ(as_bf16.content_hash(), random_layer(s, DType::kBF16, 9).content_hash());
  EXPECT_EQ(as_bf16.router_gate().dtype, DType::kF32) << "router gate stays fp32";
}

TEST(LayerStorage, Bf16FileLoadedAsF32IsExact) {
  TempDir dir;
  const LayerShape s = shape_for(Architecture::kQwen2Moe);
  const LayerWeights bf = random_layer(s, DType::kBF16, 11);
  save_layer(bf, Architecture::kQwen2Moe, 1, dir / "bf16.safetensors");
  const LayerWeights f32 =
      load_layer(Checkpoint::open(dir / "bf16.safetensors"), Architecture::kQwen2Moe, 1, s, DType::kF32);
  EXPECT_EQ(f32.storage(), DType::kF32);
  EXPECT_NE(f32.content_hash(), bf.content_hash()) << "f32 and bf16 storage hash differently";
  for_each_matrix_pair(bf, f32, [](const MatrixView& a, const MatrixView& b) {
    EXPECT_EQ(b.dtype, DType::kF32);
    for (int64_t r = 0; r < a.rows; ++r) {
      for (int64_t c = 0; c < a.cols; ++c) ASSERT_EQ(at(a, r, c), at(b, r, c));
    }
  });
  // And back: bf16 storage of the f32-widened weights is the original.
  EXPECT_EQ(
      load_layer(Checkpoint::open(dir / "bf16.safetensors"), Architecture::kQwen2Moe, 1, s, DType::kBF16)
          .content_hash(),
      bf.content_hash());
  EXPECT_THROW(
      load_layer(Checkpoint::open(dir / "bf16.safetensors"), Architecture::kQwen2Moe, 1, s, DType::kF16),
      std::invalid_argument);
}

// An F16 file (every tensor, router gate included) loads as f32 by default, or bf16 on request.
TEST(LayerStorage, F16FileConvertsToF32) {
  TempDir dir;
  const Architecture arch = Architecture::kOlmoe;
  const LayerShape s = shape_for(arch);
  save_layer(random_layer(s, DType::kF32, 3), arch, 0, dir / "f32.safetensors");
  // Re-encode every tensor as F16 with arbitrary finite bit patterns.
  rewrite(dir / "f32.safetensors", dir / "f16.safetensors", [](auto& tensors, auto& storage) {
    uint16_t next = 0x1234;
    for (auto& t : tensors) {
      const size_t n = t.bytes.size() / 4;
      auto& buf = storage.emplace_back(n * 2);
      for (size_t i = 0; i < n; ++i) {
        next = static_cast<uint16_t>(next * 75 + 74);
        const uint16_t h = (next & 0x7c00) == 0x7c00 ? static_cast<uint16_t>(next & 0xbfff) : next;  // finite
        std::memcpy(buf.data() + 2 * i, &h, 2);
      }
      t.dtype = "F16";
      t.bytes = buf;
    }
  });
  const auto ckpt = Checkpoint::open(dir / "f16.safetensors");
  const LayerWeights w = load_layer(ckpt, arch, 0, s);
  EXPECT_EQ(w.storage(), DType::kF32);
  EXPECT_FALSE(w.zero_copy());
  SafetensorsFile f(dir / "f16.safetensors");
  const TensorInfo& t = f.get("model.layers.0.mlp.experts.2.down_proj.weight");
  ASSERT_EQ(t.dtype, DType::kF16);
  const MatrixView ref{t.data, DType::kF16, t.shape[0], t.shape[1], t.shape[1]};
  const MatrixView& got = w.experts()[2].down_proj;
  for (int64_t r = 0; r < ref.rows; ++r) {
    for (int64_t c = 0; c < ref.cols; ++c)
      ASSERT_EQ(std::bit_cast<uint32_t>(at(got, r, c)), std::bit_cast<uint32_t>(at(ref, r, c)));
  }
  const TensorInfo& g = f.get("model.layers.0.mlp.gate.weight");
  EXPECT_EQ(w.router_gate().dtype, DType::kF32);
  EXPECT_EQ(at(w.router_gate(), 1, 2), at(MatrixView{g.data, DType::kF16, 4, 16, 16}, 1, 2));
  const LayerWeights b = load_layer(ckpt, arch, 0, s, DType::kBF16);
  EXPECT_EQ(b.experts()[2].down_proj.dtype, DType::kBF16);
  EXPECT_EQ(at(b.experts()[2].down_proj, 3, 4), kernels::bf16_to_f32(kernels::f32_to_bf16(at(ref, 3, 4))));
}

TEST(LayerStorage, ShardedCheckpointLoadsLikeOneFile) {
  TempDir dir;
  const Architecture arch = Architecture::kDeepseekV3;
  const LayerShape s = shape_for(arch);
  const LayerWeights w = random_layer(s, DType::kBF16, 77);
  save_layer(w, arch, 5, dir / "one.safetensors");
  SafetensorsFile one(dir / "one.safetensors");
  const auto names = one.names();
  std::string weight_map = "{";
  std::vector<std::vector<TensorToWrite>> shards(3);
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorInfo& t = one.get(names[i]);
    const size_t shard = i % 3;
    shards[shard].push_back(
        {names[i], std::string(safetensors_dtype_name(t.dtype)), t.shape, {t.data, t.nbytes}});
    weight_map += (i ? "," : "") + ("\"" + names[i] + "\":\"model-0000" + std::to_string(shard + 1) +
                                    "-of-00003.safetensors\"");
  }
  weight_map += "}";
  std::filesystem::create_directories(dir / "ckpt");
  for (size_t k = 0; k < 3; ++k) {
    write_safetensors(dir / ("ckpt/model-0000" + std::to_string(k + 1) + "-of-00003.safetensors"), shards[k]);
  }
  testing::write_bytes(dir / "ckpt/model.safetensors.index.json", "{\"weight_map\":" + weight_map + "}");
  const auto ckpt = Checkpoint::open(dir / "ckpt");
  EXPECT_EQ(ckpt->shards().size(), 3u);
  const LayerWeights loaded = load_layer(ckpt, arch, 5, s);
  EXPECT_TRUE(loaded.zero_copy());
  EXPECT_EQ(loaded.content_hash(), w.content_hash());

  // A shard that disappears is reported when the checkpoint opens.
  std::filesystem::remove(dir / "ckpt/model-00002-of-00003.safetensors");
  const std::string msg = thrown_message<std::runtime_error>([&] { Checkpoint c(dir / "ckpt"); });
  EXPECT_NE(msg.find("model-00002-of-00003.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("which is missing"), std::string::npos) << msg;
}

TEST(LayerStorage, KeepsCheckpointAliveAfterCallerDropsIt) {
  TempDir dir;
  const LayerShape s = shape_for(Architecture::kMixtral);
  const LayerWeights w = random_layer(s, DType::kF32, 8);
  save_layer(w, Architecture::kMixtral, 0, dir / "m.safetensors");
  LayerWeights loaded;
  {
    auto ckpt = Checkpoint::open(dir / "m.safetensors");
    loaded = load_layer(std::move(ckpt), Architecture::kMixtral, 0, s);
  }
  EXPECT_TRUE(loaded.zero_copy());
  EXPECT_EQ(loaded.content_hash(), w.content_hash());  // reads the mapping (ASan would catch a dangling one)
}

// Hand-made file with a 1-byte-misaligned data area: the loader copies instead of handing out unaligned
// views.
TEST(LayerStorage, MisalignedDataIsCopied) {
  TempDir dir;
  LayerShape s;
  s.hidden = 2;
  s.expert_ff = 1;
  s.num_experts = 1;
  const std::string header =
      R"({"model.layers.0.mlp.gate.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[1,9]},)"
      R"("model.layers.0.mlp.experts.0.gate_proj.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[9,17]},)"
      R"("model.layers.0.mlp.experts.0.up_proj.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[17,25]},)"
      R"("model.layers.0.mlp.experts.0.down_proj.weight":{"dtype":"F32","shape":[2,1],"data_offsets":[25,33]}})";
  std::string padded_header = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string data(33, '\0');
  for (int i = 0; i < 8; ++i) {
    const float v = static_cast<float>(i) + 0.5f;
    std::memcpy(data.data() + 1 + 4 * i, &v, 4);
  }
  testing::write_bytes(dir / "mis.safetensors", testing::raw_safetensors(padded_header, data));
  const LayerWeights w = load_layer(Checkpoint::open(dir / "mis.safetensors"), Architecture::kOlmoe, 0, s);
  EXPECT_FALSE(w.zero_copy());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.experts()[0].up_proj.data) % 4, 0u);
  EXPECT_EQ(at(w.router_gate(), 0, 1), 1.5f);
  EXPECT_EQ(at(w.experts()[0].up_proj, 0, 0), 4.5f);
  EXPECT_EQ(at(w.experts()[0].down_proj, 1, 0), 7.5f);
}

class LayerErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    save_layer(random_layer(s_, DType::kF32, 21), arch_, 3, dir_ / "good.safetensors");
  }
  // Writes a copy of the good file after `edit`, and returns load_layer's invalid_argument message.
  std::string load_error(
      const std::function<void(std::vector<TensorToWrite>&, std::vector<std::vector<std::byte>>&)>& edit,
      const LayerShape& expected) {
    rewrite(dir_ / "good.safetensors", dir_ / "bad.safetensors", edit);
    return thrown_message<std::invalid_argument>(
        [&] { load_layer(Checkpoint::open(dir_ / "bad.safetensors"), arch_, 3, expected); });
  }
  std::string load_error(
      const std::function<void(std::vector<TensorToWrite>&, std::vector<std::vector<std::byte>>&)>& edit) {
    return load_error(edit, s_);
  }
  static TensorToWrite& named(std::vector<TensorToWrite>& tensors, const std::string& name) {
    for (auto& t : tensors) {
      if (t.name == name) return t;
    }
    throw std::logic_error("test bug: no " + name);
  }

  TempDir dir_;
  Architecture arch_ = Architecture::kQwen2Moe;
  LayerShape s_ = shape_for(Architecture::kQwen2Moe);
};

TEST_F(LayerErrors, MissingTensor) {
  const std::string msg = load_error([](auto& tensors, auto&) {
    std::erase_if(tensors, [](const TensorToWrite& t) {
      return t.name == "model.layers.3.mlp.experts.2.up_proj.weight";
    });
  });
  EXPECT_NE(msg.find("model.layers.3.mlp.experts.2.up_proj.weight missing from checkpoint "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("bad.safetensors (a Qwen2-MoE layer needs it)"), std::string::npos) << msg;
}

TEST_F(LayerErrors, MissingSharedExpertGate) {
  const std::string msg = load_error([](auto& tensors, auto&) {
    std::erase_if(tensors, [](const TensorToWrite& t) {
      return t.name == "model.layers.3.mlp.shared_expert_gate.weight";
    });
  });
  EXPECT_NE(msg.find("model.layers.3.mlp.shared_expert_gate.weight missing"), std::string::npos) << msg;
}

TEST_F(LayerErrors, ShapeMismatchAgainstExpected) {
  LayerShape wider = s_;
  wider.expert_ff = 14;
  const std::string msg = load_error([](auto&, auto&) {}, wider);
  EXPECT_NE(msg.find("model.layers.3.mlp.experts.0.gate_proj.weight: shape [12, 16] but expected [14, 16]"),
            std::string::npos)
      << msg;
}

TEST_F(LayerErrors, ShapeMismatchInFile) {
  // One expert's up_proj transposed in the file.
  const std::string msg = load_error([](auto& tensors, auto&) {
    named(tensors, "model.layers.3.mlp.experts.1.up_proj.weight").shape = {16, 12};
  });
  EXPECT_NE(msg.find("model.layers.3.mlp.experts.1.up_proj.weight: shape [16, 12] but expected [12, 16]"),
            std::string::npos)
      << msg;
}

TEST_F(LayerErrors, RouterGateWithWrongExpertCount) {
  LayerShape more = s_;
  more.num_experts = 5;
  const std::string msg = load_error([](auto&, auto&) {}, more);
  EXPECT_NE(msg.find("model.layers.3.mlp.gate.weight: shape [4, 16] but expected [5, 16]"), std::string::npos)
      << msg;
}

TEST_F(LayerErrors, IntegerDtypeForAWeight) {
  const std::string msg = load_error([](auto& tensors, auto& storage) {
    TensorToWrite& t = named(tensors, "model.layers.3.mlp.experts.0.down_proj.weight");
    storage.emplace_back(t.bytes.size() * 2);  // same element count as I64
    t.dtype = "I64";
    t.bytes = storage.back();
  });
  EXPECT_NE(msg.find("'model.layers.3.mlp.experts.0.down_proj.weight' has unsupported dtype I64"),
            std::string::npos)
      << msg;
}

TEST_F(LayerErrors, F8WeightNeedsItsBlockScales) {
  // An FP8 matrix is read with its weight_scale_inv block scales (moe/io/quantized.h); without them the
  // message names the missing tensor.
  const std::string msg = load_error([](auto& tensors, auto& storage) {
    TensorToWrite& t = named(tensors, "model.layers.3.mlp.shared_expert.up_proj.weight");
    storage.emplace_back(t.bytes.size() / 4);
    t.dtype = "F8_E4M3";
    t.bytes = storage.back();
  });
  EXPECT_NE(msg.find("model.layers.3.mlp.shared_expert.up_proj.weight_scale_inv missing from checkpoint"),
            std::string::npos)
      << msg;
}

TEST_F(LayerErrors, WrongArchitectureNames) {
  // OLMoE names are a subset of Qwen2-MoE's: the routed experts load, the shared expert is ignored.
  EXPECT_NO_THROW(load_layer(Checkpoint::open(dir_ / "good.safetensors"), Architecture::kOlmoe, 3,
                             shape_for(Architecture::kOlmoe)));
  const std::string msg2 = thrown_message<std::invalid_argument>([&] {
    load_layer(Checkpoint::open(dir_ / "good.safetensors"), Architecture::kMixtral, 3,
               shape_for(Architecture::kMixtral));
  });
  EXPECT_NE(msg2.find("model.layers.3.block_sparse_moe.gate.weight missing from checkpoint"),
            std::string::npos)
      << msg2;
  EXPECT_NE(msg2.find("(a Mixtral layer needs it)"), std::string::npos) << msg2;
}

TEST_F(LayerErrors, ShapeThatDoesNotFitTheArchitecture) {
  const std::string msg = thrown_message<std::invalid_argument>(
      [&] { load_layer(Checkpoint::open(dir_ / "good.safetensors"), Architecture::kMixtral, 3, s_); });
  EXPECT_NE(msg.find("mixtral layers have no shared expert"), std::string::npos) << msg;
  EXPECT_THROW(save_layer(random_layer(s_, DType::kF32, 1), Architecture::kOlmoe, 0, dir_ / "x.safetensors"),
               std::invalid_argument);
  EXPECT_THROW(load_layer(nullptr, arch_, 0, s_), std::invalid_argument);
  EXPECT_THROW(load_layer(Checkpoint::open(dir_ / "good.safetensors"), arch_, -1, s_), std::invalid_argument);
}

TEST(LayerHash, SensitiveToEveryBitDtypeAndShape) {
  TempDir dir;
  const Architecture arch = Architecture::kMixtral;
  const LayerShape s = shape_for(arch);
  const LayerWeights w = random_layer(s, DType::kF32, 100);
  EXPECT_EQ(w.content_hash(), random_layer(s, DType::kF32, 100).content_hash());
  EXPECT_NE(w.content_hash(), random_layer(s, DType::kBF16, 100).content_hash());
  save_layer(w, arch, 0, dir / "a.safetensors");
  // Flip one bit of one weight in the file: the hash changes.
  rewrite(dir / "a.safetensors", dir / "b.safetensors", [](auto& tensors, auto& storage) {
    for (auto& t : tensors) {
      if (t.name != "model.layers.0.block_sparse_moe.experts.3.w2.weight") continue;
      auto& buf = storage.emplace_back(t.bytes.begin(), t.bytes.end());
      buf[37] ^= std::byte{0x01};
      t.bytes = buf;
    }
  });
  const uint64_t ha = load_layer(Checkpoint::open(dir / "a.safetensors"), arch, 0, s).content_hash();
  const uint64_t hb = load_layer(Checkpoint::open(dir / "b.safetensors"), arch, 0, s).content_hash();
  EXPECT_EQ(ha, w.content_hash());
  EXPECT_NE(ha, hb);
  // Same numbers, different shape split: hash differs (shape is hashed, not only bytes).
  LayerShape t = s;
  t.hidden = 12;
  t.expert_ff = 16;
  EXPECT_NE(random_layer(t, DType::kF32, 100).content_hash(), w.content_hash());
}

// The views of an existing LayerWeights (every tensor), as a caller would pass its own memory.
LayerViews views_of(const LayerWeights& w) {
  LayerViews v;
  v.router_gate = w.router_gate();
  v.score_bias = w.score_bias();
  v.experts.assign(w.experts().begin(), w.experts().end());
  v.shared = w.shared();
  v.shared_gate = w.shared_gate();
  return v;
}

// Weights built from caller memory: copied or borrowed, the same content hash as the weights the memory held
// (hence as the same values loaded from a file), for every architecture's tensor set.
TEST(WeightsFromViews, CopyAndBorrowKeepTheContent) {
  for (Architecture arch : {Architecture::kMixtral, Architecture::kQwen2Moe, Architecture::kDeepseekV3}) {
    SCOPED_TRACE(std::string(to_string(arch)));
    const LayerShape s = shape_for(arch);
    for (DType storage : {DType::kF32, DType::kBF16}) {
      auto source = std::make_shared<LayerWeights>(random_layer(s, storage, 7));
      const LayerWeights copied = weights_from_views(s, views_of(*source), storage, Ownership::kCopy);
      EXPECT_EQ(copied.content_hash(), source->content_hash());
      EXPECT_NE(copied.experts()[0].up_proj.data, source->experts()[0].up_proj.data);  // a copy
      const LayerWeights borrowed =
          weights_from_views(s, views_of(*source), storage, Ownership::kBorrow, source);
      EXPECT_EQ(borrowed.experts()[0].up_proj.data, source->experts()[0].up_proj.data);  // no copy
      const uint64_t hash = source->content_hash();
      source.reset();  // the borrowed weights hold their keep-alive
      EXPECT_EQ(borrowed.content_hash(), hash);
    }
  }
  // Copying converts: f32 views into bf16 storage round as loading an f32 file into bf16 does.
  TempDir dir;
  const LayerShape s = shape_for(Architecture::kMixtral);
  const LayerWeights f32 = random_layer(s, DType::kF32, 9);
  save_layer(f32, Architecture::kMixtral, 0, dir / "w.safetensors");
  const LayerWeights from_file =
      load_layer(Checkpoint::open(dir / "w.safetensors"), Architecture::kMixtral, 0, s, DType::kBF16);
  EXPECT_EQ(weights_from_views(s, views_of(f32), DType::kBF16, Ownership::kCopy).content_hash(),
            from_file.content_hash());
}

// A strided view is copied row by row; borrowing keeps the stride.
TEST(WeightsFromViews, StridedViews) {
  LayerShape s = shape_for(Architecture::kMixtral);
  const LayerWeights dense = random_layer(s, DType::kF32, 3);
  LayerViews v = views_of(dense);
  std::vector<float> padded(static_cast<size_t>(s.num_experts) * (s.hidden + 5));
  for (int e = 0; e < s.num_experts; ++e) {
    for (int64_t c = 0; c < s.hidden; ++c) padded[e * (s.hidden + 5) + c] = at(dense.router_gate(), e, c);
  }
  v.router_gate = MatrixView{padded.data(), DType::kF32, s.num_experts, s.hidden, s.hidden + 5};
  EXPECT_EQ(weights_from_views(s, v, DType::kF32, Ownership::kCopy).content_hash(), dense.content_hash());
  EXPECT_EQ(weights_from_views(s, v, DType::kF32, Ownership::kBorrow).content_hash(), dense.content_hash());
}

TEST(WeightsFromViews, ErrorsNameTheTensor) {
  const LayerShape s = shape_for(Architecture::kQwen2Moe);
  const LayerWeights w = random_layer(s, DType::kF32, 1);
  auto expect = [&](LayerViews v, DType storage, Ownership own, const std::string& needle) {
    EXPECT_NE(
        thrown_message<std::invalid_argument>([&] { weights_from_views(s, v, storage, own); }).find(needle),
        std::string::npos)
        << needle;
  };
  LayerViews v = views_of(w);
  v.experts[3].up_proj.rows = 7;
  expect(v, DType::kF32, Ownership::kCopy, "experts[3].up_proj: [7, 16] but the shape needs [12, 16]");
  v = views_of(w);
  v.experts[1].down_proj.data = nullptr;
  expect(v, DType::kF32, Ownership::kCopy, "experts[1].down_proj: data is null");
  v = views_of(w);
  v.experts.pop_back();
  expect(v, DType::kF32, Ownership::kCopy, "3 experts given, the shape has 4");
  v = views_of(w);
  v.shared_gate.reset();
  expect(v, DType::kF32, Ownership::kCopy, "shared_gate is required");
  v = views_of(w);
  v.shared.reset();
  expect(v, DType::kF32, Ownership::kCopy, "the shape has a shared expert but no shared views were given");
  v = views_of(w);
  v.router_gate.row_stride = 3;
  expect(v, DType::kF32, Ownership::kCopy, "router_gate: row_stride 3 is below cols 16");
  expect(views_of(w), DType::kBF16, Ownership::kBorrow, "dtype f32 but bf16 is needed");  // no conversion
  expect(views_of(w), DType::kF16, Ownership::kCopy, "storage dtype must be f32, bf16 or a quantized type");
  LayerShape mixtral = shape_for(Architecture::kMixtral);
  const LayerWeights m = random_layer(mixtral, DType::kF32, 2);
  LayerViews extra = views_of(m);
  const std::vector<float> bias(4, 0.0f);
  extra.score_bias = bias;
  EXPECT_NE(thrown_message<std::invalid_argument>([&] {
              weights_from_views(mixtral, extra, DType::kF32, Ownership::kCopy);
            }).find("score_bias given but shape.score_bias is not set"),
            std::string::npos);
}

}  // namespace
}  // namespace moe::io

namespace moe::io {
namespace {

// A rank's part of a layer (expert parallelism): only the listed experts are read - from a checkpoint whose
// other experts' tensors do not even exist - and a part hashes its pieces as the whole layer does.
TEST(LayerParts, LoadOnlyTheListedExperts) {
  TempDir dir;
  for (Architecture arch : {Architecture::kMixtral, Architecture::kDeepseekV3, Architecture::kGptOss}) {
    SCOPED_TRACE(std::string(to_string(arch)));
    const LayerShape s = shape_for(arch);
    const LayerWeights whole = random_layer(s, DType::kBF16, 21);
    save_layer(whole, arch, 2, dir / "w.safetensors");
    const auto ckpt = Checkpoint::open(dir / "w.safetensors");
    const LayerWeights part = load_layer(ckpt, arch, 2, s, std::nullopt, {}, ExpertSet::only({3, 1}));
    EXPECT_FALSE(part.holds_all_experts());
    EXPECT_EQ(part.held().list(), (std::vector<int>{1, 3}));
    EXPECT_TRUE(part.holds_expert(3));
    EXPECT_FALSE(part.holds_expert(0));
    EXPECT_EQ(part.experts()[0].gate_proj.data, nullptr);
    EXPECT_EQ(part.expert_hash(1), whole.expert_hash(1));
    EXPECT_EQ(part.expert_hash(3), whole.expert_hash(3));
    EXPECT_NE(whole.expert_hash(1), whole.expert_hash(3));
    EXPECT_EQ(part.replicated_hash(), whole.replicated_hash());
    EXPECT_NE(part.content_hash(), whole.content_hash()) << "a part never hashes like the whole layer";
    EXPECT_EQ(load_layer(ckpt, arch, 2, s).content_hash(), whole.content_hash());
    EXPECT_NE(thrown_message<std::invalid_argument>([&] {
                (void)part.expert_hash(0);
              }).find("do not hold expert 0"),
              std::string::npos);
    // A part without experts: the router gate and the shared expert only.
    const LayerWeights none = load_layer(ckpt, arch, 2, s, std::nullopt, {}, ExpertSet::only({}));
    EXPECT_EQ(none.held().describe(), "none");
    EXPECT_EQ(none.replicated_hash(), whole.replicated_hash());
    EXPECT_NE(thrown_message<std::invalid_argument>([&] {
                load_layer(ckpt, arch, 2, s, std::nullopt, {}, ExpertSet::only({4}));
              }).find("expert 4 asked for, outside the layer's [0, 4)"),
              std::string::npos);
  }
  // Expert 2's tensors removed from the file: a part without expert 2 still loads; the whole layer does not.
  const LayerShape s = shape_for(Architecture::kMixtral);
  const LayerWeights whole = random_layer(s, DType::kF32, 22);
  std::vector<std::vector<std::byte>> scratch;
  std::vector<TensorToWrite> tensors = layer_tensors(whole, Architecture::kMixtral, 0, scratch);
  std::erase_if(tensors,
                [](const TensorToWrite& t) { return t.name.find("experts.2.") != std::string::npos; });
  write_safetensors(dir / "part.safetensors", tensors);
  const auto ckpt = Checkpoint::open(dir / "part.safetensors");
  const LayerWeights part =
      load_layer(ckpt, Architecture::kMixtral, 0, s, DType::kF32, {}, ExpertSet::only({0, 1, 3}));
  EXPECT_EQ(part.expert_hash(3), whole.expert_hash(3));
  EXPECT_NE(thrown_message<std::invalid_argument>([&] {
              load_layer(ckpt, Architecture::kMixtral, 0, s);
            }).find("experts.2.w1.weight missing"),
            std::string::npos);
  // file_part_reader serves the same request.
  EXPECT_EQ(
      file_part_reader(ckpt, Architecture::kMixtral, 0, s, DType::kF32)(ExpertSet::only({1})).expert_hash(1),
      whole.expert_hash(1));
}

TEST(LayerParts, RandomAndFromViews) {
  const LayerShape s = shape_for(Architecture::kQwen2Moe);
  const LayerWeights whole = random_layer(s, DType::kF32, 5);
  const LayerWeights part = random_layer(s, DType::kF32, 5, ExpertSet::only({2}));
  EXPECT_EQ(part.expert_hash(2), whole.expert_hash(2));
  EXPECT_EQ(part.replicated_hash(), whole.replicated_hash());
  // The combination of the pieces is the same for any split.
  std::vector<uint64_t> hashes;
  for (int e = 0; e < s.num_experts; ++e) hashes.push_back(whole.expert_hash(e));
  const uint64_t combined = sharded_hash(whole.replicated_hash(), hashes);
  hashes[1] ^= 1;
  EXPECT_NE(sharded_hash(whole.replicated_hash(), hashes), combined);
  // From views: experts[i] is expert part.list()[i].
  LayerViews views = views_of(whole);
  views.part = ExpertSet::only({3, 0});
  views.experts = {whole.experts()[0], whole.experts()[3]};
  const LayerWeights from_views = weights_from_views(s, views, DType::kF32, Ownership::kCopy);
  EXPECT_EQ(from_views.held().list(), (std::vector<int>{0, 3}));
  EXPECT_EQ(from_views.expert_hash(0), whole.expert_hash(0));
  EXPECT_EQ(from_views.expert_hash(3), whole.expert_hash(3));
  views.experts.pop_back();
  EXPECT_NE(thrown_message<std::invalid_argument>([&] {
              weights_from_views(s, views, DType::kF32, Ownership::kCopy);
            }).find("1 experts given, the part lists 2 (0, 3)"),
            std::string::npos);
  // What needs the whole layer says so.
  EXPECT_NE(thrown_message<std::invalid_argument>([&] {
              save_layer(part, Architecture::kQwen2Moe, 0, "/tmp/x");
            }).find("save_layer needs every expert's weights; these hold 1 of 4 (experts 2"),
            std::string::npos);
  EXPECT_EQ(ExpertSet::only({5, 1, 2, 3, 5}).describe(), "1-3, 5");
  EXPECT_EQ(ExpertSet::all().describe(), "all");
  EXPECT_TRUE(ExpertSet::all().contains(1000));
}

}  // namespace
}  // namespace moe::io

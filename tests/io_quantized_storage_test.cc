// Quantized expert matrices held as stored in io::LayerWeights (moe/io/layer_weights.h): seeded random layers
// in every format, caller views borrowed or copied (a GGUF loader's path) and mixed per projection, the
// content hash over the blocks, FP8 checkpoints as zero-copy views, gpt-oss's MXFP4 rearranged into kMXFP4
// blocks, dequantization on request, and the refusals by name.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/quant_formats.h"
#include "moe/io/checkpoint.h"
#include "moe/io/layer_weights.h"
#include "moe/io/pretrained.h"
#include "tests/io_test_util.h"
#include "tests/support/expect_invalid.h"
#include "tests/support/family_checkpoints.h"

namespace moe::io {
namespace {

using kernels::DType;
using kernels::MatrixView;
using ::moe::testing::ExpectInvalid;

LayerShape Shape(int64_t d = 256, int64_t ff = 256, int E = 3, bool shared = false) {
  LayerShape s;
  s.hidden = d;
  s.expert_ff = ff;
  s.num_experts = E;
  if (shared) {
    s.num_shared_experts = 1;
    s.shared_ff = ff;
  }
  return s;
}

LayerViews ViewsOf(const LayerWeights& w) {
  LayerViews v;
  v.router_gate = w.router_gate();
  v.experts.assign(w.experts().begin(), w.experts().end());
  v.shared = w.shared();
  return v;
}

// Every element of two matrices of any types, as exact values.
void ExpectSameValues(const MatrixView& a, const MatrixView& b, const std::string& what) {
  ASSERT_EQ(a.rows, b.rows) << what;
  ASSERT_EQ(a.cols, b.cols) << what;
  std::vector<double> ra(static_cast<size_t>(a.cols)), rb(ra.size());
  for (int64_t r = 0; r < a.rows; ++r) {
    kernels::reference_row(a, r, ra.data());
    kernels::reference_row(b, r, rb.data());
    ASSERT_EQ(ra, rb) << what << " row " << r;
  }
}

TEST(QuantizedStorage, RandomLayersInEveryFormat) {
  const LayerShape s = Shape(256, 256, 3, true);
  const LayerWeights f32 = random_layer(s, DType::kF32, 5);
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kMXFP4, DType::kFP8}) {
    SCOPED_TRACE(kernels::to_string(t));
    const LayerWeights w = random_layer(s, t, 5);
    EXPECT_EQ(w.storage(), t);
    EXPECT_TRUE(w.quantized());
    EXPECT_EQ(w.matrix_types(), std::vector<DType>{t});
    EXPECT_EQ(w.expert_matrix_bytes(), s.expert_bytes(t));
    EXPECT_EQ(w.content_hash(), random_layer(s, t, 5).content_hash());
    EXPECT_NE(w.content_hash(), random_layer(s, t, 6).content_hash());
    EXPECT_NE(w.content_hash(), f32.content_hash());
    // The stored blocks are the fp32 draws quantized (the router gate is the fp32 one).
    std::vector<std::byte> q(kernels::row_bytes(t, 256));
    const MatrixView& g = f32.experts()[1].gate_proj;
    if (t != DType::kFP8) {
      kernels::quantize_row(t, static_cast<const float*>(g.data) + 7 * 256, 256, q.data());
      EXPECT_EQ(std::memcmp(q.data(), kernels::view_row(w.experts()[1].gate_proj, 7), q.size()), 0);
    }
    EXPECT_EQ(std::memcmp(w.router_gate().data, f32.router_gate().data, 3 * 256 * 4), 0);
  }
  EXPECT_EQ(s.expert_bytes(DType::kQ4_K), (3 * 3 + 3) * 256u * 144u);
  ExpectInvalid([] { random_layer(Shape(64, 96), DType::kQ4_K, 1); },
                "cannot be stored as q4_k (rows of whole 256-element blocks)");
}

TEST(QuantizedStorage, ViewsAreBorrowedOrCopiedAndMayMixFormats) {
  const LayerShape s = Shape();
  const LayerWeights q4 = random_layer(s, DType::kQ4_K, 1), q6 = random_layer(s, DType::kQ6_K, 2);
  // A GGUF Q4_K_M layer: gate and up in Q4_K, down in Q6_K.
  LayerViews v = ViewsOf(q4);
  for (size_t e = 0; e < v.experts.size(); ++e) v.experts[e].down_proj = q6.experts()[e].down_proj;
  auto owner = std::make_shared<int>(0);
  const LayerWeights borrowed = weights_from_views(s, v, std::nullopt, Ownership::kBorrow, owner);
  EXPECT_EQ(borrowed.experts()[0].gate_proj.data, v.experts[0].gate_proj.data);  // no copy
  EXPECT_EQ(borrowed.storage(), DType::kQ4_K);
  EXPECT_EQ((borrowed.matrix_types()), (std::vector<DType>{DType::kQ4_K, DType::kQ6_K}));
  const LayerWeights copied = weights_from_views(s, v, std::nullopt, Ownership::kCopy);
  EXPECT_NE(copied.experts()[0].gate_proj.data, v.experts[0].gate_proj.data);
  EXPECT_EQ(copied.content_hash(), borrowed.content_hash());
  EXPECT_NE(copied.content_hash(), q4.content_hash());
  // Dequantized on request: each element its exact value rounded once.
  const LayerWeights bf16 = weights_from_views(s, v, DType::kBF16, Ownership::kCopy);
  EXPECT_FALSE(bf16.quantized());
  std::vector<uint16_t> want(256);
  kernels::dequantize_row_bf16(v.experts[2].down_proj, 9, want.data());
  EXPECT_EQ(std::memcmp(want.data(), kernels::view_row(bf16.experts()[2].down_proj, 9), 512), 0);
  const LayerWeights f32 = weights_from_views(s, v, DType::kF32, Ownership::kCopy);
  ExpectSameValues(f32.experts()[1].gate_proj, v.experts[1].gate_proj, "f32 dequantization");
  // The same bytes from another owner hash alike; a changed block byte does not.
  std::vector<std::byte> bytes(kernels::view_data_bytes(v.experts[0].up_proj));
  std::memcpy(bytes.data(), v.experts[0].up_proj.data, bytes.size());
  LayerViews moved = v;
  moved.experts[0].up_proj.data = bytes.data();
  EXPECT_EQ(weights_from_views(s, moved, std::nullopt, Ownership::kBorrow).content_hash(),
            borrowed.content_hash());
  bytes[5] ^= std::byte{1};
  EXPECT_NE(weights_from_views(s, moved, std::nullopt, Ownership::kBorrow).content_hash(),
            borrowed.content_hash());
  // Refusals by name.
  ExpectInvalid([&] { weights_from_views(s, v, DType::kF32, Ownership::kBorrow); },
                "experts[0].gate_proj: dtype q4_k but f32 is needed");
  ExpectInvalid([&] { weights_from_views(s, v, DType::kQ8_0, Ownership::kCopy); },
                "experts[0].gate_proj: a q4_k matrix cannot be stored as q8_0");
  LayerViews bad = v;
  bad.experts[1].up_proj.cols = 200;
  ExpectInvalid([&] { weights_from_views(s, bad, std::nullopt, Ownership::kBorrow); },
                "experts[1].up_proj: [256, 200] but the shape needs [256, 256]");
  ExpectInvalid([&] { save_layer(borrowed, Architecture::kMixtral, 0, "/tmp/unused.safetensors"); },
                "is q4_k, which has no safetensors form (GGUF holds it)");
  // Plain views quantized on request.
  const LayerWeights plain = random_layer(s, DType::kF32, 1);
  EXPECT_EQ(weights_from_views(s, ViewsOf(plain), DType::kQ4_K, Ownership::kCopy).content_hash(),
            q4.content_hash());
}

TEST(QuantizedStorage, Fp8CheckpointsLoadAsZeroCopyViews) {
  const LayerShape s = Shape(256, 200, 2);
  const LayerWeights w = random_layer(s, DType::kFP8, 3);
  testing::TempDir dir;
  const auto path = dir.path() / "fp8.safetensors";
  save_layer(w, Architecture::kMixtral, 0, path);
  auto ckpt = std::make_shared<const Checkpoint>(path);
  const LayerWeights stored = load_layer(ckpt, Architecture::kMixtral, 0, s);
  EXPECT_EQ(stored.storage(), DType::kFP8);
  EXPECT_TRUE(stored.zero_copy());
  EXPECT_EQ(stored.content_hash(), w.content_hash());
  EXPECT_EQ(stored.experts()[1].down_proj.scale_block_cols, 128);
  EXPECT_EQ(load_layer(ckpt, Architecture::kMixtral, 0, s, DType::kFP8).content_hash(), w.content_hash());
  const LayerWeights bf16 = load_layer(ckpt, Architecture::kMixtral, 0, s, DType::kBF16);
  EXPECT_EQ(bf16.storage(), DType::kBF16);
  EXPECT_FALSE(bf16.quantized());
  std::vector<uint16_t> want(256);
  kernels::dequantize_row_bf16(w.experts()[0].up_proj, 3, want.data());
  EXPECT_EQ(std::memcmp(want.data(), kernels::view_row(bf16.experts()[0].up_proj, 3), 512), 0);
  ExpectInvalid([&] { load_layer(ckpt, Architecture::kMixtral, 0, s, DType::kQ4_K); },
                "storage q4_k is a GGUF type");
  ExpectInvalid([&] { load_layer(ckpt, Architecture::kMixtral, 0, s, DType::kMXFP4); },
                "stores model.layers.0.block_sparse_moe.experts.0.w1.weight as fp8");
}

TEST(QuantizedStorage, GptOssMxfp4IsRearrangedIntoBlocks) {
  const ::moe::testing::FamilyCase& c = ::moe::testing::family_case("gpt_oss_mxfp4");
  testing::TempDir dir;
  const ::moe::testing::WrittenCheckpoint wc = ::moe::testing::write_family_checkpoint(c, dir.path());
  const LayerWeights stored = load_pretrained_layer(dir.path(), wc.layer);
  const LayerWeights exact = load_pretrained_layer(dir.path(), wc.layer, DType::kF32);
  EXPECT_EQ(stored.storage(), DType::kMXFP4);
  EXPECT_EQ(stored.expert_matrix_bytes(), stored.shape().expert_bytes(DType::kMXFP4));
  for (size_t e = 0; e < stored.experts().size(); ++e) {
    ExpectSameValues(stored.experts()[e].gate_proj, exact.experts()[e].gate_proj, "gate");
    ExpectSameValues(stored.experts()[e].up_proj, exact.experts()[e].up_proj, "up");
    ExpectSameValues(stored.experts()[e].down_proj, exact.experts()[e].down_proj, "down");
  }
  EXPECT_EQ(load_pretrained_layer(dir.path(), wc.layer, DType::kMXFP4).content_hash(), stored.content_hash());
}

}  // namespace
}  // namespace moe::io

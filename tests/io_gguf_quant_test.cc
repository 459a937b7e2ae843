// GGUF's quantized tensor types (Q8_0, Q4_K, Q6_K, MXFP4) against a reference dequantizer written in the
// tests from the formats' definitions (tests/support/gguf_blocks.h), independently of
// kernels/quant_formats.h: the kernel-side dequantizer value for value on random blocks (every code, every
// scale exponent); a layer loaded from a GGUF file holds its blocks as stored (views into the mapping, Q4_K
// beside Q6_K in a Q4_K_M layer) or dequantizes them to f32 / bf16, each element its exact value rounded
// once; quantizing on load and the refusals of a bad block or an impossible storage are named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_formats.h"
#include "moe/io/gguf_names.h"
#include "moe/io/pretrained.h"
#include "tests/io_test_util.h"
#include "tests/support/family_gguf.h"

namespace moe::testing {
namespace {

using io::testing::TempDir;
using io::testing::thrown_message;
using kernels::DType;

struct TypeCase {
  uint32_t ggml;
  DType dtype;
};
const TypeCase kTypes[] = {{ggml_type::Q8_0, DType::kQ8_0},
                           {ggml_type::Q4_K, DType::kQ4_K},
                           {ggml_type::Q6_K, DType::kQ6_K},
                           {ggml_type::MXFP4, DType::kMXFP4}};

// Random blocks: every byte random except the scales, which are finite (fp16 of random sign and exponent;
// MXFP4's e8m0 cycling through every value but the NaN 0xff).
std::string RandomBlocks(uint32_t type, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t blocks = rows * cols / block_elements(type), bytes = block_bytes(type);
  std::string out(static_cast<size_t>(blocks * bytes), '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  auto f16 = [&](size_t at) {  // a finite fp16: exponent 1-30 or a subnormal
    uint16_t h = static_cast<uint16_t>(rng() & 0xffff);
    if ((h & 0x7c00) == 0x7c00) h = static_cast<uint16_t>(h & ~0x4000);
    out[at] = static_cast<char>(h & 0xff);
    out[at + 1] = static_cast<char>(h >> 8);
  };
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t at = static_cast<size_t>(b * bytes);
    if (type == ggml_type::Q8_0) f16(at);
    if (type == ggml_type::Q4_K) {
      f16(at);
      f16(at + 2);
    }
    if (type == ggml_type::Q6_K) f16(at + 208);
    if (type == ggml_type::MXFP4) out[at] = static_cast<char>(b % 255);
  }
  return out;
}

// `v` rounded once to f32 or bf16, to nearest even (the significand scaled to an integer and rounded by
// nearbyint; written here, not moe/io's). Values beyond the type's finite range stay as they are (the
// caller skips them).
double RoundReference(double v, DType to) {
  if (v == 0.0 || !std::isfinite(v)) return v;
  int e = 0;
  const double m = std::frexp(v, &e);
  if (e < -125) {  // f32 / bf16 subnormals: a fixed quantum of 2^-149 (f32) or 2^-133 (bf16)
    const int q = to == DType::kF32 ? -149 : -133;
    return std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);
  }
  const int bits = to == DType::kF32 ? 24 : 8;
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

TEST(GgufBlocks, TheKernelDequantizerMatchesTheReferenceValueForValue) {
  const int64_t rows = 48, cols = 512;
  for (const TypeCase& t : kTypes) {
    const std::string bytes = RandomBlocks(t.ggml, rows, cols, 17 + t.ggml);
    const kernels::MatrixView m{bytes.data(), t.dtype, rows, cols, cols};
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    const int64_t row_bytes = cols / block_elements(t.ggml) * block_bytes(t.ggml);
    std::vector<double> kernel(static_cast<size_t>(cols));
    std::vector<float> f32(static_cast<size_t>(cols));
    std::vector<uint16_t> bf16(static_cast<size_t>(cols));
    int64_t checked = 0, mismatched = 0, rounded_mismatched = 0, nonzero = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> want;
      dequantize_reference(p + r * row_bytes, cols, t.ggml, want);
      kernels::reference_row(m, r, kernel.data());
      kernels::dequantize_row(m, r, f32.data());
      kernels::dequantize_row_bf16(m, r, bf16.data());
      for (int64_t i = 0; i < cols; ++i) {
        const double x = want[static_cast<size_t>(i)];
        mismatched += kernel[static_cast<size_t>(i)] != x;
        nonzero += x != 0;
        ++checked;
        if (std::fabs(x) < 3e38) {  // within both types' range
          rounded_mismatched += f32[static_cast<size_t>(i)] != RoundReference(x, DType::kF32);
          uint32_t b = static_cast<uint32_t>(bf16[static_cast<size_t>(i)]) << 16;
          float v;
          std::memcpy(&v, &b, 4);
          rounded_mismatched += v != RoundReference(x, DType::kBF16);
        }
      }
    }
    EXPECT_EQ(mismatched, 0) << kernels::to_string(t.dtype) << ": " << mismatched << " of " << checked;
    EXPECT_EQ(rounded_mismatched, 0) << kernels::to_string(t.dtype);
    EXPECT_GT(nonzero, checked / 2) << kernels::to_string(t.dtype);
  }
}

// The blocks of MoE layer `w.layer` as loaded, against the fixture's exact values (which are the reference
// dequantizer's of the written blocks).
int64_t CompareWithReference(const io::LayerWeights& lw, const WrittenCheckpoint& w, DType storage) {
  int64_t mismatched = 0;
  std::vector<double> row;
  auto compare = [&](const kernels::MatrixView& m, const std::vector<double>& ref) {
    row.resize(static_cast<size_t>(m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
      kernels::reference_row(m, r, row.data());  // f32 / bf16 storage: the stored values, widened exactly
      for (int64_t i = 0; i < m.cols; ++i) {
        mismatched +=
            row[static_cast<size_t>(i)] != RoundReference(ref[static_cast<size_t>(r * m.cols + i)], storage);
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
  return mismatched;
}

TEST(GgufQuantizedLayer, HeldAsStoredOrDequantizedExactly) {
  for (const char* name :
       {"qwen2moe_q8_0", "qwen3moe_q6_k", "gpt_oss_mxfp4", "llama_q4_k_m_split", "deepseek2_v3_q4_k_fused"}) {
    const GgufFamilyCase& c = gguf_family_case(name);
    TempDir dir;
    const WrittenCheckpoint w = write_family_gguf(c, dir.path());
    const io::Pretrained p = io::open_pretrained(w.dir);
    const io::LayerWeights stored = io::load_pretrained_layer(p, w.layer);
    EXPECT_TRUE(stored.quantized()) << name;
    EXPECT_TRUE(stored.zero_copy()) << name;
    const io::GgufLayerNames n(w.layer);
    const io::GgufTensorInfo& down = *p.gguf->tensor(n.down_exps());
    EXPECT_EQ(stored.experts()[2].down_proj.data, down.data + 2 * down.ne[1] * down.row_bytes()) << name;
    EXPECT_EQ(stored.experts()[2].down_proj.dtype, gguf_stored_dtype(c.down_type)) << name;
    EXPECT_EQ(stored.experts()[2].gate_proj.dtype, gguf_stored_dtype(c.type)) << name;
    if (c.fused_gate_up) {  // gate rows first, then up rows, in the expert's [2 ff, d] slice
      const io::GgufTensorInfo& gu = *p.gguf->tensor(n.gate_up_exps());
      const std::byte* slice = gu.data + 1 * gu.ne[1] * gu.row_bytes();
      EXPECT_EQ(stored.experts()[1].gate_proj.data, slice) << name;
      EXPECT_EQ(stored.experts()[1].up_proj.data, slice + gu.ne[1] / 2 * gu.row_bytes()) << name;
    }
    if (c.type != c.down_type) {
      EXPECT_EQ(stored.matrix_types(),
                (std::vector<DType>{gguf_stored_dtype(c.type), gguf_stored_dtype(c.down_type)}))
          << name;
    }
    EXPECT_EQ(CompareWithReference(stored, w, DType::kF32), 0)
        << name;  // the blocks' values are the reference's
    for (DType storage : {DType::kF32, DType::kBF16}) {
      const io::LayerWeights lw = io::load_pretrained_layer(p, w.layer, storage);
      EXPECT_EQ(lw.storage(), storage);
      EXPECT_EQ(CompareWithReference(lw, w, storage), 0) << name << " " << kernels::to_string(storage);
    }
  }
}

TEST(GgufQuantizedLayer, QuantizedStoragesOnLoad) {
  TempDir dir;
  // A BF16 file quantized to Q8_0 on load; a Q8_0 file asked for Q8_0 keeps its views.
  const WrittenCheckpoint kimi = write_family_gguf(gguf_family_case("kimi_k2_bf16"), dir / "kimi");
  const io::LayerWeights q = io::load_pretrained_layer(kimi.dir, kimi.layer, DType::kQ8_0);
  EXPECT_EQ(q.experts()[0].gate_proj.dtype, DType::kQ8_0);
  EXPECT_FALSE(q.zero_copy());
  const WrittenCheckpoint q8 = write_family_gguf(gguf_family_case("qwen2moe_q8_0"), dir / "q8");
  EXPECT_TRUE(io::load_pretrained_layer(q8.dir, q8.layer, DType::kQ8_0).zero_copy());
  // Another quantized type, or FP8, is refused by name.
  const WrittenCheckpoint q6 = write_family_gguf(gguf_family_case("qwen3moe_q6_k"), dir / "q6");
  std::string msg = thrown_message<std::invalid_argument>(
      [&] { io::load_pretrained_layer(q6.dir, q6.layer, DType::kQ4_K); });
  EXPECT_NE(msg.find("blk.1.ffn_gate_exps.weight (expert 0): a q6_k matrix cannot be stored as q4_k"),
            std::string::npos)
      << msg;
  msg = thrown_message<std::invalid_argument>(
      [&] { io::load_pretrained_layer(q6.dir, q6.layer, DType::kFP8); });
  EXPECT_NE(msg.find("fp8 is not a GGUF tensor type"), std::string::npos) << msg;
}

// A block whose scale is not finite (or MXFP4's NaN scale) is refused by name when the layer is loaded,
// whatever the storage: the kernels would read it as it is.
TEST(GgufQuantizedLayer, BadBlocksAreRefusedByName) {
  struct Bad {
    const char* family;
    const char* tensor;
    int64_t at;  // byte offset in the tensor's data
    uint8_t lo, hi;
    const char* expect;
  };
  // qwen2moe_q8_0: ffn_down_exps [32, 64, 8] of Q8_0, a row is 34 bytes: expert 3, row 5 is row 3 * 64 + 5.
  // gpt_oss_mxfp4: ffn_up_exps [64, 32, 8] of MXFP4, a row is 2 blocks of 17 bytes.
  // qwen3moe_q6_k: ffn_gate_exps [256, 256, 8] of Q6_K, a row is one 210-byte block, d at byte 208.
  const std::vector<Bad> cases = {
      {"qwen2moe_q8_0", "blk.1.ffn_down_exps.weight", (3 * 64 + 5) * 34, 0x00, 0x7c,
       "blk.1.ffn_down_exps.weight (expert 3): row 5 block 0: its fp16 scale d is not finite"},
      {"gpt_oss_mxfp4", "blk.1.ffn_up_exps.weight", (1 * 32 + 2) * 34 + 17, 0xff, 0x00,
       "blk.1.ffn_up_exps.weight (expert 1): row 2 block 1: it has the NaN scale 0xff"},
      {"qwen3moe_q6_k", "blk.1.ffn_gate_exps.weight", (7 * 256 + 255) * 210 + 208, 0x01, 0xfe,
       "blk.1.ffn_gate_exps.weight (expert 7): row 255 block 0: its fp16 scale d is not finite"},
  };
  for (const Bad& b : cases) {
    TempDir dir;
    const WrittenCheckpoint w =
        write_family_gguf(gguf_family_case(b.family), dir.path(), [&](GgufWriter& gw) {
          std::string& data = gw.tensor(b.tensor)->data;
          data[static_cast<size_t>(b.at)] = static_cast<char>(b.lo);
          if (b.hi || b.lo != 0xff) data[static_cast<size_t>(b.at) + 1] = static_cast<char>(b.hi);
        });
    for (std::optional<DType> storage : {std::optional<DType>(), std::optional<DType>(DType::kF32)}) {
      const std::string msg =
          thrown_message<std::invalid_argument>([&] { io::load_pretrained_layer(w.dir, w.layer, storage); });
      EXPECT_NE(msg.find(b.expect), std::string::npos) << b.family << ": " << msg;
    }
  }
}

}  // namespace
}  // namespace moe::testing

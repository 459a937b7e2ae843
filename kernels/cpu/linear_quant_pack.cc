#include "kernels/cpu/linear_quant_pack.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/quant_formats.h"

namespace moe::kernels::detail {
namespace {

[[noreturn]] void bad_code(const std::string& what, int64_t row, int64_t block, const std::string& msg) {
  throw std::invalid_argument(what + ": row " + std::to_string(row) + " block " + std::to_string(block) +
                              " " + msg);
}

template <class Block>
Block block_at(const std::byte* row, int64_t b) {
  Block out;
  std::memcpy(&out, row + static_cast<size_t>(b) * sizeof(Block), sizeof(Block));
  return out;
}

}  // namespace

void check_codes(const MatrixView& w, const std::string& what) {
  const int64_t nb = w.cols / block_elems(w.dtype);
  const auto finite_f16 = [](uint16_t bits) { return (bits & 0x7c00u) != 0x7c00u; };
  for (int64_t r = 0; r < w.rows; ++r) {
    const std::byte* row = view_row(w, r);
    switch (w.dtype) {
      case DType::kQ8_0:
        for (int64_t b = 0; b < nb; ++b) {
          if (!finite_f16(block_at<BlockQ8_0>(row, b).d))
            bad_code(what, r, b, "has a non-finite q8_0 scale d");
        }
        break;
      case DType::kQ4_K:
        for (int64_t b = 0; b < nb; ++b) {
          const BlockQ4_K blk = block_at<BlockQ4_K>(row, b);
          if (!finite_f16(blk.d) || !finite_f16(blk.dmin))
            bad_code(what, r, b, "has a non-finite q4_k d or dmin");
        }
        break;
      case DType::kQ6_K:
        for (int64_t b = 0; b < nb; ++b) {
          if (!finite_f16(block_at<BlockQ6_K>(row, b).d))
            bad_code(what, r, b, "has a non-finite q6_k scale d");
        }
        break;
      case DType::kMXFP4:
        for (int64_t b = 0; b < nb; ++b) {
          if (block_at<BlockMxfp4>(row, b).e == 0xff) bad_code(what, r, b, "has the NaN e8m0 scale 0xff");
        }
        break;
      case DType::kFP8: {
        const auto* q = reinterpret_cast<const uint8_t*>(row);
        for (int64_t i = 0; i < w.cols; ++i) {
          if ((q[i] & 0x7f) == 0x7f) {
            throw std::invalid_argument(what + ": element [" + std::to_string(r) + ", " + std::to_string(i) +
                                        "] is the FP8 NaN code");
          }
        }
        if (r % w.scale_block_rows == 0) {
          const float* s = w.scales + (r / w.scale_block_rows) * w.scale_stride;
          for (int64_t c = 0; c < fp8_scale_cols(w); ++c) {
            if (!std::isfinite(s[c])) {
              throw std::invalid_argument(what + ": fp8 block scale [" +
                                          std::to_string(r / w.scale_block_rows) + ", " + std::to_string(c) +
                                          "] is not finite");
            }
          }
        }
        break;
      }
      default:
        break;
    }
  }
}

namespace {

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}

// The stored bytes of block b of output o, or null for a padding output past the matrix.
const uint8_t* stored_block(const MatrixView& w, int64_t o, int64_t b) {
  if (o >= w.rows) return nullptr;
  return reinterpret_cast<const uint8_t*>(view_row(w, o)) + static_cast<size_t>(b) * block_bytes(w.dtype);
}

// Lane o's 4 bytes of a weight chunk.
uint8_t* lane(std::byte* chunk, int64_t o) {
  return reinterpret_cast<uint8_t*>(chunk) + 4 * o;
}

void put_f16(std::byte* at, int64_t o, uint16_t bits) {
  std::memcpy(at + 2 * o, &bits, 2);
}

uint16_t get_f16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One step of panel `j` (weights at `wt`, scales at `sc`) for the block types.
void pack_block_step(const MatrixView& w, int64_t j, int64_t b, std::byte* wt, std::byte* sc) {
  for (int64_t o = 0; o < kQuantPanelOutputs; ++o) {
    const uint8_t* blk = stored_block(w, j * kQuantPanelOutputs + o, b);
    if (blk == nullptr) continue;  // zero codes and scales
    switch (w.dtype) {
      case DType::kQ8_0:  // d (2 bytes), qs[32]
        for (int k = 0; k < 8; ++k) {
          for (int i = 0; i < 4; ++i)
            lane(wt + 64 * k, o)[i] = static_cast<uint8_t>(blk[2 + 4 * k + i] ^ 0x80);
        }
        put_f16(sc, o, get_f16(blk));
        break;
      case DType::kMXFP4:  // e, qs[16]
        for (int g = 0; g < 4; ++g) std::memcpy(lane(wt + 64 * g, o), blk + 1 + 4 * g, 4);
        reinterpret_cast<uint8_t*>(sc)[o] = blk[0];
        break;
      case DType::kQ4_K: {  // d, dmin, scales[12], qs[128]
        for (int k = 0; k < 32; ++k) std::memcpy(lane(wt + 64 * k, o), blk + 16 + 4 * k, 4);
        put_f16(sc, o, get_f16(blk));
        put_f16(sc + 32, o, get_f16(blk + 2));
        auto* s8 = reinterpret_cast<uint8_t*>(sc + 64);   // sc[8][16]
        auto* m8 = reinterpret_cast<uint8_t*>(sc + 192);  // m[4][16][2]
        for (int sub = 0; sub < 8; ++sub) {
          int scale = 0, min = 0;
          q4k_scale_min(sub, blk + 4, &scale, &min);
          s8[16 * sub + o] = static_cast<uint8_t>(scale);
          m8[32 * (sub / 2) + 2 * o + sub % 2] = static_cast<uint8_t>(min);
        }
        break;
      }
      case DType::kQ6_K: {  // ql[128], qh[64], scales[16], d
        for (int h = 0; h < 2; ++h) {
          for (int g = 0; g < 8; ++g) {
            std::byte* step = wt + 64 * (24 * h + 3 * g);
            std::memcpy(lane(step, o), blk + 64 * h + 4 * g, 4);              // ql[64h + 4g ..]
            std::memcpy(lane(step + 64, o), blk + 64 * h + 32 + 4 * g, 4);    // ql[64h + 32 + 4g ..]
            std::memcpy(lane(step + 128, o), blk + 128 + 32 * h + 4 * g, 4);  // qh[32h + 4g ..]
          }
        }
        put_f16(sc, o, get_f16(blk + 208));
        for (int sub = 0; sub < 16; ++sub) reinterpret_cast<uint8_t*>(sc + 32)[16 * sub + o] = blk[192 + sub];
        break;
      }
      default:
        break;
    }
  }
}

std::unique_ptr<QuantPanels> pack_panels(const MatrixView& w, QuantKernel k) {
  auto p = std::make_unique<QuantPanels>();
  p->kernel = k;
  p->type = w.dtype;
  p->out = w.rows;
  p->in = w.cols;
  p->panels = (w.rows + kQuantPanelOutputs - 1) / kQuantPanelOutputs;
  switch (w.dtype) {
    case DType::kQ8_0:
      p->step_weight_bytes = 512;
      p->step_scale_bytes = 32;
      p->group_shift = 1;
      break;
    case DType::kMXFP4:
      p->step_weight_bytes = 256;
      p->step_scale_bytes = 16;
      p->group_shift = 2;
      break;
    case DType::kQ4_K:
      p->step_weight_bytes = 2048;
      p->step_scale_bytes = 320;
      break;
    case DType::kQ6_K:
      p->step_weight_bytes = 3072;
      p->step_scale_bytes = 288;
      break;
    case DType::kFP8:
      p->pairs = (w.cols + 1) / 2;
      p->block_pairs = w.scale_block_cols / 2;
      p->block_steps = (p->block_pairs + 1) / 2;
      p->scale_blocks = fp8_scale_cols(w);
      break;
    default:
      return nullptr;
  }
  if (w.dtype == DType::kFP8) {
    p->steps = p->scale_blocks * p->block_steps;  // the last block's unused steps are zero padding
    p->strip_panels = kFp8StripPanels;
    p->group_bytes = static_cast<size_t>(p->block_steps + 1) * p->fp8_step_stride();
    p->strip_bytes = static_cast<size_t>(p->scale_blocks) * p->group_bytes;
  } else {
    p->steps = w.cols / block_elems(w.dtype);
    const int64_t group = int64_t{1} << p->group_shift;
    p->group_bytes = align64(static_cast<size_t>(group) * (p->step_weight_bytes + p->step_scale_bytes));
    p->strip_bytes = static_cast<size_t>((p->steps + group - 1) / group) * p->group_bytes;
  }
  const size_t total = std::max<size_t>(p->bytes(), 64);
  p->data = WeightBuffer(total);  // zero-filled
  for (int64_t j = 0; j < p->panels; ++j) {
    std::byte* panel = p->panel(j);
    if (w.dtype != DType::kFP8) {
      for (int64_t b = 0; b < p->steps; ++b) {
        pack_block_step(w, j, b, const_cast<std::byte*>(p->step_weights(panel, b)),
                        const_cast<std::byte*>(p->step_scales(panel, b)));
      }
      continue;
    }
    for (int64_t o = 0; o < kQuantPanelOutputs && j * kQuantPanelOutputs + o < w.rows; ++o) {
      const int64_t row = j * kQuantPanelOutputs + o;
      const auto* q = reinterpret_cast<const uint8_t*>(view_row(w, row));
      const float* scales = w.scales + (row / w.scale_block_rows) * w.scale_stride;
      for (int64_t c = 0; c < p->scale_blocks; ++c) {
        std::byte* group = panel + static_cast<size_t>(c) * p->group_bytes;
        std::memcpy(group + p->fp8_scales_offset() + 4 * o, scales + c, 4);
        const int64_t p0 = c * p->block_pairs, p1 = std::min(p->pairs, p0 + p->block_pairs);
        for (int64_t pair = p0; pair < p1; ++pair) {
          const int64_t step = (pair - p0) / 2, second = (pair - p0) % 2;
          auto* chunk = reinterpret_cast<uint8_t*>(group + p->fp8_step_stride() * static_cast<size_t>(step));
          for (int e = 0; e < 2; ++e) {
            const int64_t i = 2 * pair + e;
            chunk[16 * (o / 4) + 8 * second + 2 * (o % 4) + e] = i < w.cols ? q[i] : 0;
          }
        }
      }
    }
  }
  return p;
}

}  // namespace

bool quant_kernel_compiled_and_supported(QuantKernel k) {
  switch (k) {
    case QuantKernel::kPortable:
      return true;
    case QuantKernel::kAvx512:
      return quant_avx512_built() && cpu_has_avx512_vnni();
    case QuantKernel::kAvxVnni:
      return quant_avxvnni_built() && cpu_has_avx_vnni();
  }
  return false;
}

bool fp8_packs_for(QuantKernel k) {
  return k == QuantKernel::kAvx512 && cpu_has_avx512_vbmi_bf16();
}

std::unique_ptr<QuantLinear::Packed> pack_quant(const MatrixView& w, QuantKernel k) {
  if (k == QuantKernel::kPortable) return nullptr;
  if (w.dtype == DType::kFP8 && !fp8_packs_for(k)) return nullptr;
  return pack_panels(w, k);
}

void quant_panels(const QuantLinear::Packed& w, QuantKernel k, const std::byte* xq, int64_t rows,
                  int64_t j_begin, int64_t j_end, float* y, int64_t y_stride) {
  const auto& p = static_cast<const QuantPanels&>(w);
  switch (k) {
    case QuantKernel::kAvx512:
      quant_panels_avx512(p, xq, rows, j_begin, j_end, y, y_stride);
      return;
    case QuantKernel::kAvxVnni:
      quant_panels_avxvnni(p, xq, rows, j_begin, j_end, y, y_stride);
      return;
    default:
      throw std::invalid_argument(std::string("quant_panels: no '") + to_string(k) +
                                  "' kernel in this build");
  }
}

void quantize_rows_fast(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in,
                        std::byte* out) {
  if (rule == QuantRule::kBf16) {
    const size_t stride = quant_row_layout(rule, in).stride;
    for (int64_t r = 0; r < rows; ++r) {
      auto* xb = reinterpret_cast<uint16_t*>(out + static_cast<size_t>(r) * stride);
      round_to_bf16_span(x + r * x_stride, in, xb);  // f32_to_bf16's bits
      if (in % 2 != 0) xb[in] = 0;
    }
  } else if (quant_avx512_built() && cpu_has_avx512_skx()) {
    quantize_rows_avx512(rule, x, rows, x_stride, in, out);
  } else {
    quantize_rows_portable(rule, x, rows, x_stride, in, out);
  }
}

}  // namespace moe::kernels::detail

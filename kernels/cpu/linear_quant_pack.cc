#include "kernels/cpu/linear_quant_pack.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

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

bool quant_kernel_compiled_and_supported(QuantKernel k) {
  return k == QuantKernel::kPortable;
}

std::unique_ptr<QuantLinear::Packed> pack_quant(const MatrixView&, QuantKernel) {
  return nullptr;
}

void quant_panels(const QuantLinear::Packed&, QuantKernel k, const std::byte*, int64_t, int64_t, int64_t,
                  float*, int64_t) {
  throw std::invalid_argument(std::string("quant_panels: no '") + to_string(k) + "' kernel in this build");
}

void quantize_rows_fast(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in,
                        std::byte* out) {
  quantize_rows_portable(rule, x, rows, x_stride, in, out);
}

}  // namespace moe::kernels::detail

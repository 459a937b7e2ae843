// Internal to the quantized linear (kernels/cpu/linear_quant.h): the SIMD kernels' packed panels, the per-CPU
// kernel entry points, and the checks of the stored codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/linear_quant.h"
#include "kernels/tensor.h"

namespace moe::kernels {

// The weights of a QuantLinear repacked for one SIMD kernel (layout: linear_quant_pack.cc).
struct QuantLinear::Packed {
  QuantKernel kernel = QuantKernel::kPortable;
  DType type = DType::kQ8_0;
  int64_t out = 0, in = 0;
  virtual ~Packed() = default;
  virtual size_t bytes() const = 0;
};

namespace detail {

// Whether this build has kernel k and this CPU runs it.
bool quant_kernel_compiled_and_supported(QuantKernel k);

// Throws std::invalid_argument naming `what` and the place for a code or scale with no value: an FP8 NaN byte
// (0x7f, 0xff), an MXFP4 NaN scale (0xff), a non-finite fp16 scale of a Q8_0 / Q4_K / Q6_K block, a
// non-finite FP8 block scale.
void check_codes(const MatrixView& w, const std::string& what);

// `w` repacked for kernel k, or null for the portable emulation (which reads the stored blocks).
std::unique_ptr<QuantLinear::Packed> pack_quant(const MatrixView& w, QuantKernel k);

// Outputs [o_begin, o_end) of `rows` quantized rows (quant_row_layout's stride apart) by the scalar emulation
// of the contract, from the stored blocks.
void quant_outputs_portable(const MatrixView& w, const std::byte* xq, int64_t rows, int64_t o_begin,
                            int64_t o_end, float* y, int64_t y_stride);

// Outputs of panels [j_begin, j_end) (16 outputs each) by kernel k on its packed weights.
void quant_panels(const QuantLinear::Packed& w, QuantKernel k, const std::byte* xq, int64_t rows,
                  int64_t j_begin, int64_t j_end, float* y, int64_t y_stride);

// quantize_rows on the calling thread, with the fastest code this CPU has (the same bytes as the portable
// one).
void quantize_rows_fast(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in,
                        std::byte* out);

}  // namespace detail
}  // namespace moe::kernels

// Operands of the bf16-compute kernels: weights packed once at load time, and activations rounded to bf16.
//
// PackedBf16Weights holds W [out, in] in the pair-interleaved ("VNNI") layout that vdpbf16ps and AMX's
// tdpbf16ps read: the outputs are cut into panels of 64 (the last one zero-padded), and panel j is a
// contiguous block of
//   panel_pairs() x 64 dwords,  dword (p, o) = bf16(W[64 j + o][2p]) | bf16(W[64 j + o][2p + 1]) << 16
// (an odd `in` is padded with a zero element; rows p >= pairs(in), up to the next multiple of 16 pairs, are
// zero, so that an AMX tile of 16 pairs never reads past a panel). fp32 weights are rounded to bf16 (round to
// nearest even, f32_to_bf16); bf16 weights are copied. Storage is 64-byte aligned (a WeightBuffer); the
// object is movable, not copyable, immutable after construction and safe to share between threads.
//
// The input operand is x rounded to bf16 with f32_to_bf16 (round to nearest even, subnormals kept, NaN kept
// quiet), row-major with an even row length 2 * pairs(in) (the element past an odd `in` is zero), so that
// its 32-bit words are the (even, odd) pairs of the reduction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"
#include "kernels/weight_buffer.h"

namespace moe::kernels {

inline constexpr int64_t kBf16PanelOutputs = 64;

// Number of bf16 pairs in a reduction of length `in`.
inline constexpr int64_t bf16_pairs(int64_t in) {
  return (in + 1) / 2;
}

class PackedBf16Weights {
 public:
  PackedBf16Weights() = default;
  // Packs `w` (fp32 or bf16, validated like linear()'s weights). Throws std::invalid_argument.
  explicit PackedBf16Weights(const MatrixView& w);

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t pairs() const { return bf16_pairs(in_); }
  // Rows of a panel: pairs() rounded up to a multiple of 16 (the rows past pairs() are zero).
  int64_t panel_pairs() const { return (pairs() + 15) / 16 * 16; }
  int64_t panels() const { return (out_ + kBf16PanelOutputs - 1) / kBf16PanelOutputs; }
  // Panel j: panel_pairs() x 64 dwords, 64-byte aligned; its first pairs() rows are the weights.
  const uint32_t* panel(int64_t j) const { return words() + j * panel_pairs() * kBf16PanelOutputs; }
  // Bytes of the weights' rows of the packed storage (what a one-row product streams).
  size_t bytes() const { return static_cast<size_t>(panels() * pairs() * kBf16PanelOutputs) * 4; }
  // The bf16 bits of W[o][i] as packed (zero beyond the matrix).
  uint16_t at(int64_t o, int64_t i) const;

 private:
  const uint32_t* words() const { return reinterpret_cast<const uint32_t*>(data_.data()); }

  WeightBuffer data_;  // 2 MB pages where the system has them (kernels/weight_buffer.h)
  int64_t out_ = 0, in_ = 0;
};

// Rounds rows x in fp32 values (row r at x + r * x_stride) to bf16 into xb, row r at xb + r * 2 * pairs(in),
// zero-filling the element past an odd `in`. Bits equal f32_to_bf16 for every input (the AVX-512 path is
// tested against it). Rows are split over `pool` when there are many. xb must hold rows * 2 * pairs(in)
// elements and not overlap x.
void round_rows_to_bf16(const float* x, int64_t rows, int64_t x_stride, int64_t in, uint16_t* xb,
                        ThreadPool& pool);

// The same on the calling thread only, for `count` contiguous values (no padding): the vector form of
// f32_to_bf16, exposed for tests.
void round_to_bf16_span(const float* x, int64_t count, uint16_t* xb);

}  // namespace moe::kernels

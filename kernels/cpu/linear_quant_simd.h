// Internal: the quantized linear's SIMD kernels, written once over a 16-lane vector abstraction `O` (one zmm
// in linear_quant_avx512.cc, two ymm in linear_quant_avxvnni.cc). Include it only inside a target region
// of those files, after linear_quant_pack.h and the definition of O.
//
// O provides: VI (16 x int32), VF (16 x fp32) and
// clang-format off
//   VI load(const void* p)                  64 bytes, 64-byte aligned
//   VI set1(int32_t v), VI zero()
//   VI dpbusd(VI acc, VI u8, int32_t s8x4)  acc + the 4 unsigned x signed byte products of each lane
//   VI dpwssd(VI acc, VI i16x2, int32_t)    acc + the 2 signed word products of each lane
//   VI add(VI, VI), VI sub(VI, VI), VI mullo(VI, VI), VI and_(VI, VI), VI or_(VI, VI)
//   VI srli16(VI, n), VI slli16(VI, n)      shifts of each 16-bit word; VI srai(VI, n): arithmetic, of each int32
//   VI shuffle(VI table, VI idx)            vpshufb: each byte of idx (< 16) looks up table (per 128 bits)
//   VI u8_to_i32(const void* p)             16 bytes zero-extended; VI s8_to_i32: sign-extended
//   VI u8x2_to_i16x2(const void* p)         32 bytes zero-extended to 16-bit words (lane o: bytes 2o, 2o+1)
//   VI e8m0_scale(const void* p)            16 e8m0 bytes e to the bits of 2^(e - 128) (e8m0_half_to_f32)
//   VF f16_to_f32(const void* p)            16 fp16
//   VF cvt(VI), VF mul(VF, VF), VF fma(VF a, VF b, VF c) (a * b + c, one rounding), VF set1f(float),
//   VF zerof(), VF as_float(VI bits)
//   void store(float* y, VF v, int n)       the first n lanes
// clang-format on
// Every kernel below computes, for each output of the panel and each row, the contract's fp32 chain
// (linear_quant.h) in the contract's order; only the exact integer parts are organised for the SIMD units.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace moe::kernels::detail::quant_simd {

// A group of rows of the quantized input (quant_row_layout) and each row's integer corrections:
//   int8/32 (Q8_0, MXFP4): corr[b] = -128 (B_2b + B_2b+1), removing the + 128 of the unsigned codes;
//   Q6_K: corr[g] = -32 B_g per 16-element group, removing the + 32 of the codes;
//   Q4_K: the int16 pairs Bp[j] = B_2j + B_2j+1 (per 32-element sub-block), read as dwords by vpdpwssd.
struct Rows {
  const std::byte* xq = nullptr;  // row 0's quantized input
  size_t stride = 0;              // bytes between rows
  size_t dx_offset = 0;           // of the block scales dx in a row
  const int32_t* corr = nullptr;  // row 0's corrections (corr_stride int32 apart)
  size_t corr_stride = 0;

  int32_t q4(int64_t r, int64_t dword) const {  // 4 activation bytes (or 2 bf16) of row r
    int32_t v;
    std::memcpy(&v, xq + static_cast<size_t>(r) * stride + 4 * static_cast<size_t>(dword), 4);
    return v;
  }
  float dx(int64_t r, int64_t b) const {
    float v;
    std::memcpy(&v, xq + static_cast<size_t>(r) * stride + dx_offset + 4 * static_cast<size_t>(b), 4);
    return v;
  }
  const int32_t* corr_row(int64_t r) const { return corr + static_cast<size_t>(r) * corr_stride; }
};

// --- Q8_0 and MXFP4: blocks of 32, s = scale * dx, acc = fma(float(I), s, acc) ----------------------------

template <class O, int R, bool kMxfp4>
void block32(const QuantPanels& p, const std::byte* panel, const Rows& x, float* y, int64_t y_stride, int n) {
  using VI = typename O::VI;
  using VF = typename O::VF;
  VF acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = O::zerof();
  [[maybe_unused]] VI table, low4;
  if constexpr (kMxfp4) {
    // kMxfp4Values + 128, for vpshufb.
    alignas(64) static constexpr uint8_t kTable[64] = {
        128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116,
        128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116,
        128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116,
        128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116};
    table = O::load(kTable);
    low4 = O::set1(0x0f0f0f0f);
  }
  StreamPrefetch prefetch(panel);
  for (int64_t b = 0; b < p.steps; ++b) {
    prefetch.through(p.group_end(panel, b));
    const std::byte* wt = p.step_weights(panel, b);
    const std::byte* sc = p.step_scales(panel, b);
    VI dot[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) dot[r] = O::set1(x.corr_row(r)[b]);
    if constexpr (kMxfp4) {
#pragma GCC unroll 16
      for (int g = 0; g < 4; ++g) {
        const VI z = O::load(wt + 64 * g);
        const VI lo = O::shuffle(table, O::and_(z, low4));
        const VI hi = O::shuffle(table, O::and_(O::srli16(z, 4), low4));
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          dot[r] = O::dpbusd(dot[r], lo, x.q4(r, 8 * b + g));
          dot[r] = O::dpbusd(dot[r], hi, x.q4(r, 8 * b + 4 + g));
        }
      }
    } else {
#pragma GCC unroll 16
      for (int k = 0; k < 8; ++k) {
        const VI w = O::load(wt + 64 * k);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) dot[r] = O::dpbusd(dot[r], w, x.q4(r, 8 * b + k));
      }
    }
    const VF scale = kMxfp4 ? O::as_float(O::e8m0_scale(sc)) : O::f16_to_f32(sc);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = O::fma(O::cvt(dot[r]), O::mul(scale, O::set1f(x.dx(r, b))), acc[r]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) O::store(y + r * y_stride, acc[r], n);
}

// --- Q4_K: super-blocks of 256; A = sum_j sc_j I_j, M = sum_j m_j Bp_j -------------------------------------
// The high nibbles are taken in place (z & 0xf0 = 16 q4): their dot is 16 I exactly, and the odd sub-blocks'
// scaled sum sum sc_j 16 I_j is divided by 16 once per super-block (exact: a multiple of 16, below 2^31).

template <class O, int R>
void q4_k(const QuantPanels& p, const std::byte* panel, const Rows& x, float* y, int64_t y_stride, int n) {
  using VI = typename O::VI;
  using VF = typename O::VF;
  VF acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = O::zerof();
  const VI low4 = O::set1(0x0f0f0f0f), high4 = O::set1(static_cast<int32_t>(0xf0f0f0f0u));
  StreamPrefetch prefetch(panel);
  for (int64_t s = 0; s < p.steps; ++s) {
    prefetch.through(p.group_end(panel, s));
    const std::byte* wt = p.step_weights(panel, s);
    const std::byte* sc = p.step_scales(panel, s);
    VI a_even[R], a_odd16[R], m[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) a_even[r] = a_odd16[r] = m[r] = O::zero();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      VI i0[R], i1[R];  // sub-block 2c's I, sub-block 2c + 1's 16 I
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) i0[r] = i1[r] = O::zero();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const VI z = O::load(wt + 64 * (8 * c + g));
        const VI lo = O::and_(z, low4), hi = O::and_(z, high4);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          i0[r] = O::dpbusd(i0[r], lo, x.q4(r, 64 * s + 16 * c + g));
          i1[r] = O::dpbusd(i1[r], hi, x.q4(r, 64 * s + 16 * c + 8 + g));
        }
      }
      const VI sc0 = O::u8_to_i32(sc + 64 + 16 * (2 * c)), sc1 = O::u8_to_i32(sc + 64 + 16 * (2 * c + 1));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        a_even[r] = O::add(a_even[r], O::mullo(i0[r], sc0));
        a_odd16[r] = O::add(a_odd16[r], O::mullo(i1[r], sc1));
      }
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const VI mins = O::u8x2_to_i16x2(sc + 192 + 32 * q);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) m[r] = O::dpwssd(m[r], mins, x.corr_row(r)[4 * s + q]);
    }
    const VF d = O::f16_to_f32(sc), dmin = O::f16_to_f32(sc + 32);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const VF dx = O::set1f(x.dx(r, s));
      const VI a = O::add(a_even[r], O::srai(a_odd16[r], 4));
      acc[r] = O::fma(O::cvt(a), O::mul(d, dx), acc[r]);
      acc[r] = O::fma(O::cvt(O::sub(O::zero(), m[r])), O::mul(dmin, dx), acc[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) O::store(y + r * y_stride, acc[r], n);
}

// --- Q6_K: super-blocks of 256, 16 sub-blocks of 16; A = sum_j sc_j I_j ------------------------------------

template <class O, int R>
void q6_k(const QuantPanels& p, const std::byte* panel, const Rows& x, float* y, int64_t y_stride, int n) {
  using VI = typename O::VI;
  using VF = typename O::VF;
  VF acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = O::zerof();
  const VI low4 = O::set1(0x0f0f0f0f), bits45 = O::set1(0x30303030);
  StreamPrefetch prefetch(panel);
  for (int64_t s = 0; s < p.steps; ++s) {
    prefetch.through(p.group_end(panel, s));
    const std::byte* wt = p.step_weights(panel, s);
    const std::byte* sc = p.step_scales(panel, s);
    VI a[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) a[r] = O::zero();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {  // l in [16 half, 16 half + 16): sub-blocks 8h + 2t + half
        VI dot[4][R];
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) dot[t][r] = O::set1(x.corr_row(r)[16 * s + 8 * h + 2 * t + half]);
        }
#pragma GCC unroll 4
        for (int g4 = 0; g4 < 4; ++g4) {
          const int g = 4 * half + g4;
          const std::byte* chunks = wt + 64 * (24 * h + 3 * g);
          const VI qa = O::load(chunks), qb = O::load(chunks + 64), qh = O::load(chunks + 128);
          // The code + 32 of elements 128h + 32t + 4g (t = 0..3): 4 low bits from ql, 2 high from qh.
          const VI u[4] = {O::or_(O::and_(qa, low4), O::and_(O::slli16(qh, 4), bits45)),
                           O::or_(O::and_(qb, low4), O::and_(O::slli16(qh, 2), bits45)),
                           O::or_(O::and_(O::srli16(qa, 4), low4), O::and_(qh, bits45)),
                           O::or_(O::and_(O::srli16(qb, 4), low4), O::and_(O::srli16(qh, 2), bits45))};
#pragma GCC unroll 4
          for (int t = 0; t < 4; ++t) {
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r)
              dot[t][r] = O::dpbusd(dot[t][r], u[t], x.q4(r, 64 * s + 32 * h + 8 * t + g));
          }
        }
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          const VI scale = O::s8_to_i32(sc + 32 + 16 * (8 * h + 2 * t + half));
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) a[r] = O::add(a[r], O::mullo(dot[t][r], scale));
        }
      }
    }
    const VF d = O::f16_to_f32(sc);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = O::fma(O::cvt(a[r]), O::mul(d, O::set1f(x.dx(r, s))), acc[r]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) O::store(y + r * y_stride, acc[r], n);
}

// --- the driver
// ---------------------------------------------------------------------------------------------

// Rows per register group of each kernel (the weights loaded once serve R rows).
template <DType T>
constexpr int kGroupRows = T == DType::kQ6_K ? 2 : 4;

// The corrections of rows [0, rows) of `x` into `corr` (corr_stride per row; see Rows).
inline size_t corr_stride(DType t, int64_t in) {
  switch (t) {
    case DType::kQ6_K:
      return static_cast<size_t>(in / 16);
    case DType::kQ4_K:
      return static_cast<size_t>(in / 64);  // int16 pairs per 64 elements
    default:
      return static_cast<size_t>(in / 32);
  }
}

inline void corrections(DType t, int64_t in, const std::byte* xq, size_t stride, size_t bsum_offset,
                        int64_t rows, int32_t* corr) {
  const size_t cs = corr_stride(t, in);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* bsum = reinterpret_cast<const int16_t*>(xq + static_cast<size_t>(r) * stride + bsum_offset);
    int32_t* c = corr + static_cast<size_t>(r) * cs;
    switch (t) {
      case DType::kQ6_K:
        for (int64_t g = 0; g < in / 16; ++g) c[g] = -32 * bsum[g];
        break;
      case DType::kQ4_K:
        for (int64_t q = 0; q < in / 64; ++q) {
          const int32_t lo = bsum[4 * q] + bsum[4 * q + 1], hi = bsum[4 * q + 2] + bsum[4 * q + 3];
          c[q] = static_cast<int32_t>(static_cast<uint32_t>(lo & 0xffff) | static_cast<uint32_t>(hi) << 16);
        }
        break;
      default:
        for (int64_t b = 0; b < in / 32; ++b) c[b] = -128 * (bsum[2 * b] + bsum[2 * b + 1]);
        break;
    }
  }
}

template <class O, DType T, int R>
void kernel(const QuantPanels& p, const std::byte* panel, const Rows& x, float* y, int64_t y_stride, int n) {
  if constexpr (T == DType::kQ8_0) {
    block32<O, R, false>(p, panel, x, y, y_stride, n);
  } else if constexpr (T == DType::kMXFP4) {
    block32<O, R, true>(p, panel, x, y, y_stride, n);
  } else if constexpr (T == DType::kQ4_K) {
    q4_k<O, R>(p, panel, x, y, y_stride, n);
  } else {
    q6_k<O, R>(p, panel, x, y, y_stride, n);
  }
}

// Rows [0, rows) of one panel: groups of R, then the remainder one by one.
template <class O, DType T>
void panel_rows(const QuantPanels& p, const std::byte* panel, Rows x, int64_t rows, float* y,
                int64_t y_stride, int n) {
  constexpr int R = kGroupRows<T>;
  int64_t r = 0;
  for (; r + R <= rows; r += R) {
    Rows g = x;
    g.xq += static_cast<size_t>(r) * x.stride;
    g.corr += static_cast<size_t>(r) * x.corr_stride;
    kernel<O, T, R>(p, panel, g, y + r * y_stride, y_stride, n);
  }
  for (; r < rows; ++r) {
    Rows g = x;
    g.xq += static_cast<size_t>(r) * x.stride;
    g.corr += static_cast<size_t>(r) * x.corr_stride;
    kernel<O, T, 1>(p, panel, g, y + r * y_stride, y_stride, n);
  }
}

// Row chunks whose quantized rows stay in the L2 cache while the thread's panels pass over them.
inline constexpr int64_t kChunkRows = 64;

template <class O, DType T>
void run(const QuantPanels& p, const std::byte* xq, size_t stride, size_t dx_offset, size_t bsum_offset,
         int64_t rows, int64_t j0, int64_t j1, float* y, int64_t y_stride) {
  thread_local std::vector<int32_t> corr;  // grown once, then reused: no allocation after warm-up
  const size_t cs = corr_stride(T, p.in);
  const int64_t chunk = std::min(rows, kChunkRows);
  if (corr.size() < cs * static_cast<size_t>(chunk)) corr.resize(cs * static_cast<size_t>(chunk));
  for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const int64_t nr = std::min(kChunkRows, rows - r0);
    const std::byte* xc = xq + static_cast<size_t>(r0) * stride;
    corrections(T, p.in, xc, stride, bsum_offset, nr, corr.data());
    const Rows x{xc, stride, dx_offset, corr.data(), cs};
    for (int64_t j = j0; j < j1; ++j) {
      const int n = static_cast<int>(std::min<int64_t>(kQuantPanelOutputs, p.out - j * kQuantPanelOutputs));
      panel_rows<O, T>(p, p.panel(j), x, nr, y + r0 * y_stride + j * kQuantPanelOutputs, y_stride, n);
    }
  }
}

// quant_panels for the integer types.
template <class O>
void run_int8(const QuantPanels& p, const std::byte* xq, int64_t rows, int64_t j0, int64_t j1, float* y,
              int64_t y_stride) {
  const QuantRowLayout l = quant_row_layout(quant_rule(p.type), p.in);
  switch (p.type) {
    case DType::kQ8_0:
      return run<O, DType::kQ8_0>(p, xq, l.stride, l.dx, l.bsum, rows, j0, j1, y, y_stride);
    case DType::kMXFP4:
      return run<O, DType::kMXFP4>(p, xq, l.stride, l.dx, l.bsum, rows, j0, j1, y, y_stride);
    case DType::kQ4_K:
      return run<O, DType::kQ4_K>(p, xq, l.stride, l.dx, l.bsum, rows, j0, j1, y, y_stride);
    case DType::kQ6_K:
      return run<O, DType::kQ6_K>(p, xq, l.stride, l.dx, l.bsum, rows, j0, j1, y, y_stride);
    default:
      return;
  }
}

}  // namespace moe::kernels::detail::quant_simd

// The batch-invariant linear kernel.
//
// NOTES: every output element y[r][o] is a dot product of x row r and W row o computed as
//   acc[0..15] = 0;  for each chunk c of 16 inputs (the last one zero-filled): acc[l] = fma(x, w, acc[l]);
//   y = tree(acc) with tree = halves added pairwise: +8, +4, +2, +1.
// Register tiles of any shape (MR rows x NR outputs) run exactly this sequence per element, only
// interleaved with other elements, so neither the tile shape, the row count, the thread split nor the
// pointer alignment can change an element's bits. The portable path below spells the same sequence out.
//
// Layout of the AVX-512 code:
//   - in place (fewer than 16 rows, memory-bound): x is copied to an aligned buffer, W rows are read
//     where they are with the next tile's rows prefetched; tiles of up to 6x4 (one or two rows: 1x8 or 2x8
//     tiles without prefetch);
//   - packed (16 rows or more, compute-bound): row blocks of up to 8 MB of x (their groups of 6 rows
//     packed once per block, interleaved, zero-padded: they stay in the last-level cache) x weight blocks of
//     ~720 KB (packed, interleaved per 4-row group, zero-padded: stays in L2) x the block's groups of 6 rows,
//     with the reduction cut into pieces of 1024 inputs (a group's piece stays in L1) whose 16-lane
//     accumulators wait in a buffer between pieces (an exact store and reload).
// Threads split the outputs into contiguous ranges of whole 4-output groups.
// The AVX-512 code is compiled for AVX512F/BW/VL/DQ whatever the build's flags (a target region) and runs
// when the CPU has them (cpu_has_avx512_skx), so a portable build (MOE_NATIVE=OFF, the Debian package) runs
// it too.
#include "kernels/cpu/linear_invariant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <utility>

#include "kernels/bf16.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd.h"

namespace moe::kernels::detail {
namespace {

constexpr int kLanes = 16;
constexpr int kMR = 6;  // rows per register tile
constexpr int kNR = 4;  // outputs per register tile

inline float widen(float v) {
  return v;
}
inline float widen(uint16_t v) {
  return bf16_to_f32(v);
}

// The fixed horizontal reduction of 16 lane accumulators.
inline float tree_sum(const float* a) {
  float b[8], c[4], d[2];
  for (int j = 0; j < 8; ++j) b[j] = a[j] + a[j + 8];
  for (int j = 0; j < 4; ++j) c[j] = b[j] + b[j + 4];
  for (int j = 0; j < 2; ++j) d[j] = c[j] + c[j + 2];
  return d[0] + d[1];
}

template <class WT>
float dot_portable(const float* x, const WT* w, int64_t in) {
  float acc[kLanes] = {};
  for (int64_t k = 0; k < in; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const bool inside = k + l < in;
      const float xv = inside ? x[k + l] : 0.0f;
      const float wv = inside ? widen(w[k + l]) : 0.0f;
      acc[l] = std::fma(xv, wv, acc[l]);
    }
  }
  return tree_sum(acc);
}

template <class WT>
void portable_rows(const float* x, int64_t rows, int64_t x_stride, const WT* w, int64_t w_stride, int64_t in,
                   int64_t o_begin, int64_t o_end, float* y, int64_t y_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = o_begin; o < o_end; ++o) {
      y[r * y_stride + o] = dot_portable(x + r * x_stride, w + o * w_stride, in);
    }
  }
}

void portable_range(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                    int64_t y_stride, int64_t o_begin, int64_t o_end) {
  if (w.dtype == DType::kF32) {
    portable_rows(x, rows, x_stride, static_cast<const float*>(w.data), w.row_stride, w.cols, o_begin, o_end,
                  y, y_stride);
  } else {
    portable_rows(x, rows, x_stride, static_cast<const uint16_t*>(w.data), w.row_stride, w.cols, o_begin,
                  o_end, y, y_stride);
  }
}

#if MOE_HAVE_AVX512_BF16_TARGET
// Everything from here to the end of the region is compiled for the Skylake-X AVX-512 set (after the
// includes: the headers' inline functions keep the build's flags); linear_invariant calls it only when
// cpu_has_avx512_skx().
MOE_TARGET_REGION_BEGIN("avx512f,avx512bw,avx512vl,avx512dq")

struct F32Weights {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_masked(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};

struct BF16Weights {
  using T = uint16_t;
  static __m512 widen16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const uint16_t* p) {
    return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_masked(const uint16_t* p, __mmask16 m) {
    return widen16(_mm256_maskz_loadu_epi16(m, p));
  }
};

// tree_sum() on a vector: (lo256 + hi256), (lo128 + hi128), (+2), (+1).
inline float hsum(__m512 a) {
  const __m256 b = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  const __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
  const __m128 e = _mm_add_ss(d, _mm_shuffle_ps(d, d, 1));
  return _mm_cvtss_f32(e);
}

// One MR x NR register tile over the whole reduction, reading x and W in place (row-major, any
// alignment). The last chunk may end inside `in`: masked loads fill it with zeros, as the contract says.
// `next` (or null) is the first of the following tile's `next_rows` W rows; they are prefetched chunk by
// chunk, since each W row is only a page or two long and the hardware prefetcher stops at page boundaries.
template <int MR, int NR, class W>
void direct_tile(const float* x, int64_t x_stride, const typename W::T* w, int64_t w_stride, int64_t in,
                 float* y, int64_t y_stride, const typename W::T* next, int next_rows) {
  __m512 acc[MR][NR];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + kLanes <= in; k += kLanes) {
    if (next != nullptr) {
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) {
        if (n < next_rows &&
            (sizeof(typename W::T) == 4 || (k & 31) == 0)) {  // one prefetch per 64-byte line
          _mm_prefetch(reinterpret_cast<const char*>(next + n * w_stride + k), _MM_HINT_T0);
        }
      }
    }
    __m512 xv[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      xv[m] = _mm512_loadu_ps(x + m * x_stride + k);
      asm("" : "+v"(xv[m]));  // one load per x vector, not one per FMA
    }
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) {
      __m512 wv = W::load(w + n * w_stride + k);
      // Keep wv in a register: otherwise GCC folds the load into each of the MR FMAs (MR loads).
      asm("" : "+v"(wv));
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm512_fmadd_ps(xv[m], wv, acc[m][n]);
    }
  }
  if (k < in) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (in - k)) - 1u);
    __m512 xv[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) xv[m] = _mm512_maskz_loadu_ps(mask, x + m * x_stride + k);
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) {
      const __m512 wv = W::load_masked(w + n * w_stride + k, mask);
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm512_fmadd_ps(xv[m], wv, acc[m][n]);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) y[m * y_stride + n] = hsum(acc[m][n]);
  }
}

// The tile for packed, interleaved blocks: chunk c of x row m at xp[(c * MR + m) * 16], of W row n at
// wp[(c * NR + n) * 16]; `chunks` whole chunks (zero-padded), 64-byte aligned. Same per-element
// sequence as direct_tile(); the compile-time layout keeps every operand and pointer in registers.
// A long reduction may be cut into consecutive pieces: the 16-lane accumulators start from acc_in
// (zero when null) and, unless acc_out is null, are stored there instead of being reduced into y.
// Storing and reloading is exact, so the per-element sequence is the same as in one piece.
template <int MR, int NR, class W>
void packed_tile(const float* xp, const typename W::T* wp, int64_t chunks, float* y, int64_t y_stride,
                 const float* acc_in, float* acc_out) {
  __m512 acc[MR][NR];
  if (acc_in == nullptr) {
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
    }
  } else {
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_load_ps(acc_in + (m * NR + n) * kLanes);
    }
  }
  for (int64_t c = 0; c < chunks; ++c) {
    __m512 xv[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      xv[m] = _mm512_load_ps(xp + m * kLanes);
      asm("" : "+v"(xv[m]));  // one load per x vector, not one per FMA
    }
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) {
      __m512 wv = W::load(wp + n * kLanes);
      asm("" : "+v"(wv));
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm512_fmadd_ps(xv[m], wv, acc[m][n]);
    }
    xp += MR * kLanes;
    wp += NR * kLanes;
  }
  if (acc_out != nullptr) {
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) _mm512_store_ps(acc_out + (m * NR + n) * kLanes, acc[m][n]);
    }
    return;
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) y[m * y_stride + n] = hsum(acc[m][n]);
  }
}

template <class W>
using PackedTileFn = void (*)(const float*, const typename W::T*, int64_t, float*, int64_t, const float*,
                              float*);

template <class W, int MR, int... NRs>
constexpr auto packed_tile_row(std::integer_sequence<int, NRs...>) {
  return std::array<PackedTileFn<W>, sizeof...(NRs)>{&packed_tile<MR, NRs + 1, W>...};
}

template <class W, int... MRs>
constexpr auto packed_tile_table(std::integer_sequence<int, MRs...>) {
  return std::array<std::array<PackedTileFn<W>, kNR>, sizeof...(MRs)>{
      packed_tile_row<W, MRs + 1>(std::make_integer_sequence<int, kNR>{})...};
}

template <class W>
using DirectTileFn = void (*)(const float*, int64_t, const typename W::T*, int64_t, int64_t, float*, int64_t,
                              const typename W::T*, int);

template <class W, int MR, int... NRs>
constexpr auto direct_tile_row(std::integer_sequence<int, NRs...>) {
  return std::array<DirectTileFn<W>, sizeof...(NRs)>{&direct_tile<MR, NRs + 1, W>...};
}

template <class W, int NR, int... MRs>
constexpr auto direct_tile_table(std::integer_sequence<int, MRs...>) {
  return std::array<std::array<DirectTileFn<W>, NR>, sizeof...(MRs)>{
      direct_tile_row<W, MRs + 1>(std::make_integer_sequence<int, NR>{})...};
}

// Packed path: tiles up to kMR x kNR on interleaved, zero-padded blocks; table[mr - 1][nr - 1].
template <class W>
constexpr auto kPackedTiles = packed_tile_table<W>(std::make_integer_sequence<int, kMR>{});

// Batches with fewer than kPackMinRows rows read x and W in place (memory-bound: each weight is used by
// a few rows only): groups of up to kMR rows x kNR outputs, with a prefetch of the next tile's weight
// rows. Both paths run the same per-element sequence, so an element's bits do not depend on the path.
// NOTES: 4 outputs per tile also for 1-3 rows: with 8 (8 weight rows, i.e. 8 pages, streamed at once plus
// 8 prefetched) a one-row product ran at about 24 GB/s against Eigen's 36; with 4 it matches Eigen.
constexpr int64_t kPackMinRows = 16;
template <class W>
constexpr auto kDirectTiles = direct_tile_table<W, kNR>(std::make_integer_sequence<int, kMR>{});

// A per-thread, 64-byte aligned buffer that grows to the largest request and is then reused, so that
// steady-state calls allocate nothing.
class PackBuffer {
 public:
  ~PackBuffer() { ::operator delete(data_, std::align_val_t(64)); }
  template <class T>
  T* get(size_t count) {
    const size_t bytes = count * sizeof(T);
    if (bytes > capacity_) {
      ::operator delete(data_, std::align_val_t(64));
      data_ = nullptr;
      capacity_ = 0;
      data_ = ::operator new(bytes, std::align_val_t(64));
      capacity_ = bytes;
    }
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

PackBuffer& weight_pack() {
  thread_local PackBuffer buffer;
  return buffer;
}
PackBuffer& input_pack() {
  thread_local PackBuffer buffer;
  return buffer;
}
PackBuffer& accumulator_buffer() {
  thread_local PackBuffer buffer;
  return buffer;
}

// Reduction chunks per piece in the packed path (a row group's piece: kMR x kKC x 64 bytes = 24 KB).
constexpr int64_t kKC = 64;

// The packed x rows of one outer row block of the packed path: at most this many bytes (8 MB: 2046 rows of
// 1024 inputs, 744 of 2816), so that an expert's rows usually form one block and its weights are packed once
// per call (each further block packs them again), while the block's rows stay in the last-level cache.
constexpr int64_t kRowBlockBytes = int64_t{8} << 20;

// Copies 16 elements of src (fewer when `count` < 16, zero-filling the rest) to 64-byte-aligned dst.
template <class T>
inline void copy_chunk(const T* src, int64_t count, T* dst) {
  if constexpr (sizeof(T) == 4) {
    if (count >= kLanes) {
      _mm512_store_ps(reinterpret_cast<float*>(dst), _mm512_loadu_ps(reinterpret_cast<const float*>(src)));
    } else {
      const __mmask16 m = static_cast<__mmask16>((1u << count) - 1u);
      _mm512_store_ps(reinterpret_cast<float*>(dst),
                      _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(src)));
    }
  } else {
    if (count >= kLanes) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    } else {
      const __mmask16 m = static_cast<__mmask16>((1u << count) - 1u);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst), _mm256_maskz_loadu_epi16(m, src));
    }
  }
}

// Zeros the 16 elements at 64-byte-aligned dst.
template <class T>
inline void zero_chunk(T* dst) {
  if constexpr (sizeof(T) == 4) {
    _mm512_store_ps(reinterpret_cast<float*>(dst), _mm512_setzero_ps());
  } else {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst), _mm256_setzero_si256());
  }
}

// Packs `n` rows (n <= 16) of `len` elements, row r at src + r * src_stride, into the interleaved layout
// dst[(c * n + r) * 16 + l] = src[r][16 c + l], zero-filled past `len` up to `chunks` chunks. Zero
// padding reproduces exactly the zero-filled tail chunk of the contract.
// NOTES: explicit vector copies, not memcpy: glibc's memcpy takes `rep movsb` for rows of a few KB,
// which runs several times slower on this AMD core when source and destination alignments differ.
template <class T>
void pack_interleaved(const T* src, int64_t src_stride, int n, int64_t len, int64_t chunks, T* dst) {
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t count = std::max<int64_t>(0, std::min<int64_t>(kLanes, len - c * kLanes));
    for (int r = 0; r < n; ++r)
      if (count > 0) {
        copy_chunk(src + r * src_stride + c * kLanes, count, dst + (c * n + r) * kLanes);
      } else {
        zero_chunk(dst + (c * n + r) * kLanes);
      }
  }
}

// Outputs [o_begin, o_end) for all rows.
template <class W>
void avx512_range(const float* x, int64_t rows, int64_t x_stride, const typename W::T* w, int64_t w_stride,
                  int64_t in, float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  using T = typename W::T;
  if (rows < kPackMinRows) {
    // x is copied to an aligned buffer (cheap: W dominates the traffic); W is read in place.
    const int64_t x_copy_stride = (in + kLanes - 1) / kLanes * kLanes + kLanes;
    float* x_copy = input_pack().get<float>(static_cast<size_t>(rows * x_copy_stride));
    for (int64_t r = 0; r < rows; ++r) {
      pack_interleaved(x + r * x_stride, x_stride, 1, in, x_copy_stride / kLanes, x_copy + r * x_copy_stride);
    }
    const auto& tiles = kDirectTiles<W>;
    const int64_t tile_outputs = kNR;
    int64_t o_first = o_begin;
    if (rows == 1) {
      // One row streams the weights one W row at a time, prefetching the row kAhead rows on chunk by chunk:
      // one sequential stream that the prefetch carries across page boundaries (8 W rows side by side, as for
      // two rows, streamed ~10 % slower on Qwen3-30B-A3B's experts on the AMD machine of this class).
      constexpr int64_t kAhead = 2;
      for (; o_first < o_end; ++o_first) {
        const T* wo = w + o_first * w_stride;
        const T* ahead = o_first + kAhead < o_end ? wo + kAhead * w_stride : nullptr;
        direct_tile<1, 1, W>(x_copy, x_copy_stride, wo, w_stride, in, y + o_first, y_stride, ahead, 1);
      }
    } else if (rows == 2) {
      // Two rows stream the weights 8 W rows at a time with no software prefetch: the access pattern of
      // Eigen's row-major GEMV (8 streams, like 4 rows and 4 prefetched; 8 rows and 8 prefetched streamed 30
      // % slower on the AMD machine of this class, docs/results.md section 3).
      constexpr int64_t kWide = 8;
      for (; o_first + kWide <= o_end; o_first += kWide) {
        direct_tile<2, kWide, W>(x_copy, x_copy_stride, w + o_first * w_stride, w_stride, in, y + o_first,
                                 y_stride, nullptr, 0);
      }
    }
    for (int64_t o = o_first; o < o_end; o += tile_outputs) {
      const int nr = static_cast<int>(std::min<int64_t>(tile_outputs, o_end - o));
      const T* next = o + tile_outputs < o_end ? w + (o + tile_outputs) * w_stride : nullptr;
      const int next_rows = static_cast<int>(std::clamp<int64_t>(o_end - o - tile_outputs, 0, tile_outputs));
      for (int64_t r = 0; r < rows; r += kMR) {  // the tile's weight rows stay in L1 for later groups
        const int mr = static_cast<int>(std::min<int64_t>(kMR, rows - r));
        tiles[mr - 1][nr - 1](x_copy + r * x_copy_stride, x_copy_stride, w + o * w_stride, w_stride, in,
                              y + r * y_stride + o, y_stride, r == 0 ? next : nullptr, next_rows);
      }
    }
    return;
  }
  // Outputs are taken in blocks whose packed weights fit in L2. Within a block, each group of kMR rows
  // is packed and the block's kNR-row weight groups stream past it, kKC chunks of the reduction at a
  // time so that the active part of the row group (kMR x kKC x 64 bytes) stays in L1; between pieces
  // the accumulators wait in acc_buffer.
  const auto& tiles = kPackedTiles<W>;
  const int64_t chunks = (in + kLanes - 1) / kLanes;
  const int64_t block_bytes = 720 << 10;
  const int64_t block =
      std::max<int64_t>(kNR, block_bytes / (chunks * kLanes * static_cast<int64_t>(sizeof(T))) / kNR * kNR);
  const int64_t block_alloc = std::min(block, (o_end - o_begin + kNR - 1) / kNR * kNR);
  T* w_packed = weight_pack().get<T>(static_cast<size_t>(block_alloc * chunks * kLanes));
  // The row block's row groups, packed once and read for every weight block: group g at g * group_floats.
  const int64_t group_floats = kMR * chunks * kLanes;
  const int64_t row_block =
      std::max<int64_t>(1, kRowBlockBytes / (group_floats * int64_t{sizeof(float)})) * kMR;
  const int64_t block_groups = (std::min(rows, row_block) + kMR - 1) / kMR;
  float* x_packed = input_pack().get<float>(static_cast<size_t>(block_groups * group_floats));
  float* acc_buffer = chunks > kKC
                          ? accumulator_buffer().get<float>(static_cast<size_t>(block_alloc * kMR * kLanes))
                          : nullptr;
  // Rows are taken in blocks of row_block so that the packed x rows re-read for every weight block stay in
  // the last-level cache (the weights are re-packed once per row block instead).
  for (int64_t r0 = 0; r0 < rows; r0 += row_block) {
    const int64_t r1 = std::min(r0 + row_block, rows);
    for (int64_t r = r0; r < r1; r += kMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kMR, r1 - r));
      pack_interleaved(x + r * x_stride, x_stride, mr, in, chunks, x_packed + (r - r0) / kMR * group_floats);
    }
    for (int64_t o0 = o_begin; o0 < o_end; o0 += block) {
      const int64_t o1 = std::min(o0 + block, o_end);
      for (int64_t o = o0; o < o1; o += kNR) {
        const int nr = static_cast<int>(std::min<int64_t>(kNR, o1 - o));
        pack_interleaved(w + o * w_stride, w_stride, nr, in, chunks, w_packed + (o - o0) * chunks * kLanes);
      }
      for (int64_t r = r0; r < r1; r += kMR) {
        const int mr = static_cast<int>(std::min<int64_t>(kMR, r1 - r));
        const float* xg = x_packed + (r - r0) / kMR * group_floats;
        for (int64_t c0 = 0; c0 < chunks; c0 += kKC) {
          const int64_t piece = std::min<int64_t>(kKC, chunks - c0);
          const bool first = c0 == 0, last = c0 + piece == chunks;
          for (int64_t o = o0; o < o1; o += kNR) {
            const int nr = static_cast<int>(std::min<int64_t>(kNR, o1 - o));
            float* acc = acc_buffer == nullptr ? nullptr : acc_buffer + (o - o0) * kMR * kLanes;
            tiles[mr - 1][nr - 1](
                xg + c0 * mr * kLanes, w_packed + (o - o0) * chunks * kLanes + c0 * nr * kLanes, piece,
                y + r * y_stride + o, y_stride, first ? nullptr : acc, last ? nullptr : acc);
          }
        }
      }
    }
  }
}

MOE_TARGET_REGION_END()
#endif  // MOE_HAVE_AVX512_BF16_TARGET

}  // namespace

bool invariant_uses_avx512() {
  return MOE_HAVE_AVX512_BF16_TARGET && cpu_has_avx512_skx();
}

void linear_invariant(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                      int64_t y_stride, ThreadPool& pool) {
  const int64_t out = w.rows;
  const bool avx512 = invariant_uses_avx512();
  // Threads take contiguous ranges of outputs (whole register tiles where possible); never the reduction.
  const int64_t num_tiles = (out + kNR - 1) / kNR;
  const int num_tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), num_tiles));
  pool.parallel_for(num_tasks, [&](int64_t task, int) {
    int64_t t_begin = 0, t_end = 0;
    ThreadPool::task_range(num_tiles, num_tasks, static_cast<int>(task), &t_begin, &t_end);
    const int64_t o_begin = t_begin * kNR, o_end = std::min(out, t_end * kNR);
    if (o_end <= o_begin) return;
#if MOE_HAVE_AVX512_BF16_TARGET
    if (avx512) {
      if (w.dtype == DType::kF32) {
        avx512_range<F32Weights>(x, rows, x_stride, static_cast<const float*>(w.data), w.row_stride, w.cols,
                                 y, y_stride, o_begin, o_end);
      } else {
        avx512_range<BF16Weights>(x, rows, x_stride, static_cast<const uint16_t*>(w.data), w.row_stride,
                                  w.cols, y, y_stride, o_begin, o_end);
      }
      return;
    }
#endif
    portable_range(x, rows, x_stride, w, y, y_stride, o_begin, o_end);
  });
}

void linear_invariant_portable(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                               int64_t y_stride) {
  portable_range(x, rows, x_stride, w, y, y_stride, 0, w.rows);
}

}  // namespace moe::kernels::detail

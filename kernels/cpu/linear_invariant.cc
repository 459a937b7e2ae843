// The batch-invariant linear kernel.
//
// NOTES: every output element y[r][o] is a dot product of x row r and W row o computed as
//   acc[0..15] = 0;  for each chunk c of 16 inputs (the last one zero-filled): acc[l] = fma(x, w, acc[l]);
//   y = tree(acc) with tree = halves added pairwise: +8, +4, +2, +1.
// Register tiles of any shape (MR rows x NR outputs) run exactly this sequence per element, only
// interleaved with other elements, so neither the tile shape, the row count, the thread split nor the
// pointer alignment can change an element's bits. The portable path below spells the same sequence out.
#include "kernels/cpu/linear_invariant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <utility>

#include "kernels/cpu/bf16.h"
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

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

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

// One MR x NR register tile over the whole reduction.
template <int MR, int NR, class W>
void tile(const float* x, int64_t x_stride, const typename W::T* w, int64_t w_stride, int64_t in, float* y,
          int64_t y_stride) {
  __m512 acc[MR][NR];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + kLanes <= in; k += kLanes) {
    __m512 xv[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) xv[m] = _mm512_loadu_ps(x + m * x_stride + k);
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

template <class W>
using TileFn = void (*)(const float*, int64_t, const typename W::T*, int64_t, int64_t, float*, int64_t);

template <class W, int MR, int... NRs>
constexpr auto tile_row(std::integer_sequence<int, NRs...>) {
  return std::array<TileFn<W>, sizeof...(NRs)>{&tile<MR, NRs + 1, W>...};
}

template <class W, int... MRs>
constexpr auto tile_table(std::integer_sequence<int, MRs...>) {
  return std::array<std::array<TileFn<W>, kNR>, sizeof...(MRs)>{
      tile_row<W, MRs + 1>(std::make_integer_sequence<int, kNR>{})...};
}

// Tiles for every (rows, outputs) remainder: table[mr - 1][nr - 1].
template <class W>
constexpr auto kTiles = tile_table<W>(std::make_integer_sequence<int, kMR>{});

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

// Copies `n` rows of `len` elements into dst (row stride `dst_stride`) and zero-fills each row up to
// `padded`. Zero padding reproduces exactly the zero-filled tail chunk of the contract.
// NOTES: an explicit vector copy, not memcpy: glibc's memcpy takes `rep movsb` for rows of a few KB,
// which runs several times slower on this AMD core when source and destination are not equally aligned.
template <class T>
void pack_rows(const T* src, int64_t src_stride, int64_t n, int64_t len, int64_t padded, int64_t dst_stride,
               T* dst) {
  constexpr int64_t kPerVector = 64 / sizeof(T);
  const int64_t len_bytes = len * static_cast<int64_t>(sizeof(T));
  for (int64_t r = 0; r < n; ++r) {
    const char* s = reinterpret_cast<const char*>(src + r * src_stride);
    char* d = reinterpret_cast<char*>(dst + r * dst_stride);
    int64_t b = 0;
    for (; b + 64 <= len_bytes; b += 64) _mm512_storeu_si512(d + b, _mm512_loadu_si512(s + b));
    if (b < len_bytes) {
      const __mmask64 m = _bzhi_u64(~0ull, static_cast<unsigned>(len_bytes - b));
      _mm512_storeu_si512(d + b, _mm512_maskz_loadu_epi8(m, s + b));  // zero-fills the rest of the vector
      b += 64;
    }
    for (; b < padded * static_cast<int64_t>(sizeof(T)); b += 64)
      _mm512_storeu_si512(d + b, _mm512_setzero_si512());
  }
  (void)kPerVector;
}

// Batches with at least this many rows pack their operands (aligned, zero-padded copies); smaller ones
// read x and W in place (memory-bound anyway). Both paths run the same per-element sequence.
constexpr int64_t kPackMinRows = 4;

// Outputs [o_begin, o_end) for all rows. Outputs are taken in blocks whose weights fit in L2; within a
// block, each group of kMR rows stays in L1 while the block's weight rows stream past it.
template <class W>
void avx512_range(const float* x, int64_t rows, int64_t x_stride, const typename W::T* w, int64_t w_stride,
                  int64_t in, float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  using T = typename W::T;
  const auto& tiles = kTiles<W>;
  const int64_t block_bytes = 384 << 10;
  if (rows < kPackMinRows) {
    const int64_t block =
        std::max<int64_t>(kNR, block_bytes / (in * static_cast<int64_t>(sizeof(T))) / kNR * kNR);
    for (int64_t o0 = o_begin; o0 < o_end; o0 += block) {
      const int64_t o1 = std::min(o0 + block, o_end);
      for (int64_t r = 0; r < rows; r += kMR) {
        const int mr = static_cast<int>(std::min<int64_t>(kMR, rows - r));
        for (int64_t o = o0; o < o1; o += kNR) {
          const int nr = static_cast<int>(std::min<int64_t>(kNR, o1 - o));
          tiles[mr - 1][nr - 1](x + r * x_stride, x_stride, w + o * w_stride, w_stride, in,
                                y + r * y_stride + o, y_stride);
        }
      }
    }
    return;
  }
  // Packed rows hold `padded` elements (a whole number of 16-lane chunks, zero-filled past `in`); the row
  // strides add one cache line so that the rows of a tile do not all map to the same L1 set.
  const int64_t padded = (in + kLanes - 1) / kLanes * kLanes;
  const int64_t w_pstride = padded + 64 / static_cast<int64_t>(sizeof(T));
  const int64_t x_pstride = padded + 16;
  const int64_t block =
      std::max<int64_t>(kNR, block_bytes / (w_pstride * static_cast<int64_t>(sizeof(T))) / kNR * kNR);
  T* w_packed = weight_pack().get<T>(static_cast<size_t>(std::min(block, o_end - o_begin) * w_pstride));
  float* x_packed = input_pack().get<float>(static_cast<size_t>(kMR * x_pstride));
  for (int64_t o0 = o_begin; o0 < o_end; o0 += block) {
    const int64_t o1 = std::min(o0 + block, o_end);
    pack_rows(w + o0 * w_stride, w_stride, o1 - o0, in, padded, w_pstride, w_packed);
    for (int64_t r = 0; r < rows; r += kMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kMR, rows - r));
      pack_rows(x + r * x_stride, x_stride, mr, in, padded, x_pstride, x_packed);
      for (int64_t o = o0; o < o1; o += kNR) {
        const int nr = static_cast<int>(std::min<int64_t>(kNR, o1 - o));
        tiles[mr - 1][nr - 1](x_packed, x_pstride, w_packed + (o - o0) * w_pstride, w_pstride, padded,
                              y + r * y_stride + o, y_stride);
      }
    }
  }
}

#endif  // AVX-512

}  // namespace

void linear_invariant(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                      int64_t y_stride, ThreadPool& pool) {
  const int64_t out = w.rows;
  // Threads take contiguous ranges of outputs (whole register tiles where possible); never the reduction.
  const int64_t num_tiles = (out + kNR - 1) / kNR;
  const int num_tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), num_tiles));
  pool.parallel_for(num_tasks, [&](int64_t task, int) {
    int64_t t_begin = 0, t_end = 0;
    ThreadPool::task_range(num_tiles, num_tasks, static_cast<int>(task), &t_begin, &t_end);
    const int64_t o_begin = t_begin * kNR, o_end = std::min(out, t_end * kNR);
    if (o_end <= o_begin) return;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if (w.dtype == DType::kF32) {
      avx512_range<F32Weights>(x, rows, x_stride, static_cast<const float*>(w.data), w.row_stride, w.cols, y,
                               y_stride, o_begin, o_end);
    } else {
      avx512_range<BF16Weights>(x, rows, x_stride, static_cast<const uint16_t*>(w.data), w.row_stride, w.cols,
                                y, y_stride, o_begin, o_end);
    }
#else
    portable_range(x, rows, x_stride, w, y, y_stride, o_begin, o_end);
#endif
  });
}

void linear_invariant_portable(const float* x, int64_t rows, int64_t x_stride, const MatrixView& w, float* y,
                               int64_t y_stride) {
  portable_range(x, rows, x_stride, w, y, y_stride, 0, w.rows);
}

}  // namespace moe::kernels::detail

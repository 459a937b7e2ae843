#include "kernels/cpu/linear_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/dpbf16.h"
#include "kernels/cpu/linear_quant_pack.h"
#include "kernels/quant_formats.h"

namespace moe::kernels {
namespace {

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}

int64_t rule_block(QuantRule rule) {
  return rule == QuantRule::kInt8Block256 ? 256 : 32;
}

// One row by an int8 rule (the header's steps, in this order).
void quantize_row_int8(QuantRule rule, const float* x, int64_t in, std::byte* out) {
  const QuantRowLayout l = quant_row_layout(rule, in);
  auto* q = reinterpret_cast<int8_t*>(out + l.q);
  auto* dx = reinterpret_cast<float*>(out + l.dx);
  auto* bsum = reinterpret_cast<int16_t*>(out + l.bsum);
  const int64_t n = rule_block(rule);
  for (int64_t b = 0; b < in / n; ++b) {
    const float* xb = x + b * n;
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) {
      finite = finite && std::isfinite(xb[i]);
      amax = std::max(amax, std::fabs(xb[i]));
    }
    if (!finite || amax == 0.0f) {
      dx[b] = finite ? 0.0f : std::nanf("");
      std::fill_n(q + b * n, n, int8_t{0});
      continue;
    }
    dx[b] = amax / 127.0f;
    const float inv = 127.0f / amax;
    for (int64_t i = 0; i < n; ++i) q[b * n + i] = static_cast<int8_t>(std::nearbyint(xb[i] * inv));
  }
  for (int64_t g = 0; g < in / 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += q[g * 16 + i];
    bsum[g] = static_cast<int16_t>(sum);
  }
}

void quantize_row_bf16(const float* x, int64_t in, std::byte* out) {
  auto* xb = reinterpret_cast<uint16_t*>(out);
  for (int64_t i = 0; i < in; ++i) xb[i] = f32_to_bf16(x[i]);
  if (in % 2 != 0) xb[in] = 0;
}

template <class Block>
Block block_at(const std::byte* row, int64_t b) {
  Block out;
  std::memcpy(&out, row + static_cast<size_t>(b) * sizeof(Block), sizeof(Block));
  return out;
}

// --- the portable emulation: the contract on the stored blocks -------------------------------------------

// One output's weights decoded from its stored blocks once (then used for every row): each element's integer
// code and each block's factors, exactly as the contract names them.
struct DecodedRow {
  std::vector<int8_t> code;  // Q8_0 qs, MXFP4 v (twice e2m1), Q4_K q4 (0..15), Q6_K c (-32..31)
  std::vector<float> scale;  // Q8_0 f16(d) / MXFP4 2^(e - 128) per block; Q4_K / Q6_K f16(d) per super-block
  std::vector<float> min;    // Q4_K f16(dmin) per super-block
  std::vector<int32_t> sc, m;  // Q4_K sc_j, m_j per 32-element sub-block; Q6_K sc_j per 16-element sub-block
  std::vector<uint16_t> wb;    // FP8: the e4m3 values as bf16 bits, a zero appended to an odd row
};

void decode_row(const MatrixView& w, int64_t o, DecodedRow& d) {
  const std::byte* row = view_row(w, o);
  const int64_t in = w.cols, nb = in / block_elems(w.dtype);
  d.code.assign(static_cast<size_t>(in), 0);
  d.scale.assign(static_cast<size_t>(nb), 0.0f);
  switch (w.dtype) {
    case DType::kQ8_0:
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_0 blk = block_at<BlockQ8_0>(row, b);
        std::copy_n(blk.qs, 32, d.code.data() + b * 32);
        d.scale[b] = f16_to_f32(blk.d);
      }
      return;
    case DType::kMXFP4:
      for (int64_t b = 0; b < nb; ++b) {
        const BlockMxfp4 blk = block_at<BlockMxfp4>(row, b);
        for (int j = 0; j < 16; ++j) {
          d.code[b * 32 + j] = kMxfp4Values[blk.qs[j] & 15];
          d.code[b * 32 + 16 + j] = kMxfp4Values[blk.qs[j] >> 4];
        }
        d.scale[b] = e8m0_half_to_f32(blk.e);
      }
      return;
    case DType::kQ4_K:
      d.min.assign(static_cast<size_t>(nb), 0.0f);
      d.sc.assign(static_cast<size_t>(nb * 8), 0);
      d.m.assign(static_cast<size_t>(nb * 8), 0);
      for (int64_t s = 0; s < nb; ++s) {
        const BlockQ4_K blk = block_at<BlockQ4_K>(row, s);
        for (int c = 0; c < 4; ++c) {
          for (int l = 0; l < 32; ++l) {
            d.code[s * 256 + 64 * c + l] = static_cast<int8_t>(blk.qs[32 * c + l] & 15);
            d.code[s * 256 + 64 * c + 32 + l] = static_cast<int8_t>(blk.qs[32 * c + l] >> 4);
          }
        }
        for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk.scales, &d.sc[s * 8 + j], &d.m[s * 8 + j]);
        d.scale[s] = f16_to_f32(blk.d);
        d.min[s] = f16_to_f32(blk.dmin);
      }
      return;
    case DType::kQ6_K:
      d.sc.assign(static_cast<size_t>(nb * 16), 0);
      for (int64_t s = 0; s < nb; ++s) {
        const BlockQ6_K blk = block_at<BlockQ6_K>(row, s);
        int8_t* c = d.code.data() + s * 256;
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = blk.ql + 64 * h;
          const uint8_t* qh = blk.qh + 32 * h;
          for (int l = 0; l < 32; ++l) {
            c[128 * h + l] = static_cast<int8_t>(((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32);
            c[128 * h + 32 + l] = static_cast<int8_t>(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
            c[128 * h + 64 + l] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            c[128 * h + 96 + l] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
          }
        }
        for (int j = 0; j < 16; ++j) d.sc[s * 16 + j] = blk.scales[j];
        d.scale[s] = f16_to_f32(blk.d);
      }
      return;
    case DType::kFP8: {
      const auto* q = reinterpret_cast<const uint8_t*>(row);
      d.wb.assign(static_cast<size_t>(2 * ((in + 1) / 2)), 0);
      for (int64_t i = 0; i < in; ++i) d.wb[i] = f32_to_bf16(e4m3_to_f32(q[i]));
      return;
    }
    default:
      return;
  }
}

int32_t dot(const int8_t* a, const int8_t* b, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Output o of one quantized row xr by the contract's chain.
float output(const MatrixView& w, const DecodedRow& d, int64_t o, const std::byte* xr,
             const QuantRowLayout& l) {
  const auto* q = reinterpret_cast<const int8_t*>(xr + l.q);
  const auto* dx = reinterpret_cast<const float*>(xr + l.dx);
  const auto* bsum = reinterpret_cast<const int16_t*>(xr + l.bsum);
  const int8_t* c = d.code.data();
  float acc = 0.0f;
  switch (w.dtype) {
    case DType::kQ8_0:
    case DType::kMXFP4:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const int32_t i = dot(c + b * 32, q + b * 32, 32);
        acc = std::fma(static_cast<float>(i), d.scale[b] * dx[b], acc);
      }
      return acc;
    case DType::kQ4_K:
      for (int64_t s = 0; s < w.cols / 256; ++s) {
        int32_t a = 0, m = 0;
        for (int j = 0; j < 8; ++j) {
          a += d.sc[s * 8 + j] * dot(c + s * 256 + 32 * j, q + s * 256 + 32 * j, 32);
          m += d.m[s * 8 + j] * (bsum[s * 16 + 2 * j] + bsum[s * 16 + 2 * j + 1]);
        }
        acc = std::fma(static_cast<float>(a), d.scale[s] * dx[s], acc);
        acc = std::fma(static_cast<float>(-m), d.min[s] * dx[s], acc);
      }
      return acc;
    case DType::kQ6_K:
      for (int64_t s = 0; s < w.cols / 256; ++s) {
        int32_t a = 0;
        for (int j = 0; j < 16; ++j)
          a += d.sc[s * 16 + j] * dot(c + s * 256 + 16 * j, q + s * 256 + 16 * j, 16);
        acc = std::fma(static_cast<float>(a), d.scale[s] * dx[s], acc);
      }
      return acc;
    case DType::kFP8: {
      const auto* xb = reinterpret_cast<const uint16_t*>(xr);
      const float* scales = w.scales + (o / w.scale_block_rows) * w.scale_stride;
      for (int64_t c0 = 0, k = 0; c0 < w.cols; c0 += w.scale_block_cols, ++k) {
        const int64_t c1 = std::min(w.cols, c0 + w.scale_block_cols);
        float p = 0.0f;
        for (int64_t i = c0; i < c1; i += 2) p = dpbf16(p, xb[i], xb[i + 1], d.wb[i], d.wb[i + 1]);
        acc = std::fma(p, scales[k], acc);
      }
      return acc;
    }
    default:
      return acc;
  }
}

}  // namespace

namespace detail {

void quant_outputs_portable(const MatrixView& w, const std::byte* xq, int64_t rows, int64_t o_begin,
                            int64_t o_end, float* y, int64_t y_stride) {
  const QuantRowLayout l = quant_row_layout(quant_rule(w.dtype), w.cols);
  thread_local DecodedRow d;  // grown once, then reused: a forward pass allocates nothing after warm-up
  for (int64_t o = o_begin; o < o_end; ++o) {
    decode_row(w, o, d);
    for (int64_t r = 0; r < rows; ++r)
      y[r * y_stride + o] = output(w, d, o, xq + static_cast<size_t>(r) * l.stride, l);
  }
}

}  // namespace detail

QuantRule quant_rule(DType weights) {
  switch (weights) {
    case DType::kQ8_0:
    case DType::kMXFP4:
      return QuantRule::kInt8Block32;
    case DType::kQ4_K:
    case DType::kQ6_K:
      return QuantRule::kInt8Block256;
    case DType::kFP8:
      return QuantRule::kBf16;
    default:
      throw std::invalid_argument("quant_rule: " + std::string(to_string(weights)) +
                                  " is not a quantized type");
  }
}

const char* to_string(QuantRule r) {
  switch (r) {
    case QuantRule::kInt8Block32:
      return "int8/32";
    case QuantRule::kInt8Block256:
      return "int8/256";
    case QuantRule::kBf16:
      return "bf16";
  }
  return "?";
}

QuantRowLayout quant_row_layout(QuantRule rule, int64_t in) {
  QuantRowLayout l;
  const size_t n = static_cast<size_t>(in);
  if (rule == QuantRule::kBf16) {
    l.stride = align64(2 * static_cast<size_t>((in + 1) / 2) * sizeof(uint16_t));
    return l;
  }
  l.q = 0;
  l.dx = align64(n);
  l.bsum = l.dx + align64(n / static_cast<size_t>(rule_block(rule)) * sizeof(float));
  l.stride = l.bsum + align64(n / 16 * sizeof(int16_t));
  return l;
}

void quantize_rows_portable(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in,
                            std::byte* out) {
  if (rule != QuantRule::kBf16 && in % rule_block(rule) != 0) {
    throw std::invalid_argument("quantize_rows: rows of " + std::to_string(in) + " elements are not whole " +
                                std::to_string(rule_block(rule)) + "-element blocks");
  }
  const size_t stride = quant_row_layout(rule, in).stride;
  for (int64_t r = 0; r < rows; ++r) {
    std::byte* dst = out + static_cast<size_t>(r) * stride;
    if (rule == QuantRule::kBf16) {
      quantize_row_bf16(x + r * x_stride, in, dst);
    } else {
      quantize_row_int8(rule, x + r * x_stride, in, dst);
    }
  }
}

void quantize_rows(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in, std::byte* out,
                   ThreadPool& pool) {
  if (rule != QuantRule::kBf16 && in % rule_block(rule) != 0) {
    throw std::invalid_argument("quantize_rows: rows of " + std::to_string(in) + " elements are not whole " +
                                std::to_string(rule_block(rule)) + "-element blocks");
  }
  const size_t stride = quant_row_layout(rule, in).stride;
  const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), rows / 8 + 1));
  if (tasks <= 1) {
    detail::quantize_rows_fast(rule, x, rows, x_stride, in, out);
    return;
  }
  pool.parallel_for(tasks, [&](int64_t task, int) {
    int64_t r0 = 0, r1 = 0;
    ThreadPool::task_range(rows, tasks, static_cast<int>(task), &r0, &r1);
    detail::quantize_rows_fast(rule, x + r0 * x_stride, r1 - r0, x_stride, in,
                               out + static_cast<size_t>(r0) * stride);
  });
}

const char* to_string(QuantKernel k) {
  switch (k) {
    case QuantKernel::kPortable:
      return "portable";
    case QuantKernel::kAvx512:
      return "avx512";
    case QuantKernel::kAvxVnni:
      return "avxvnni";
  }
  return "?";
}

bool quant_kernel_available(QuantKernel k) {
  return detail::quant_kernel_compiled_and_supported(k);
}

bool quant_kernel_covers(QuantKernel k, DType t) {
  if (!quant_kernel_available(k)) return false;
  return k == QuantKernel::kPortable || t != DType::kFP8 || detail::fp8_packs_for(k);
}

namespace {

QuantKernel choose_quant_kernel() {
  constexpr QuantKernel kAll[] = {QuantKernel::kPortable, QuantKernel::kAvx512, QuantKernel::kAvxVnni};
  if (const char* forced = std::getenv("MOE_QUANT_KERNEL")) {
    for (QuantKernel k : kAll) {
      if (std::string(forced) == to_string(k) && quant_kernel_available(k)) return k;
    }
  }
  for (QuantKernel k : {QuantKernel::kAvx512, QuantKernel::kAvxVnni}) {
    if (quant_kernel_available(k)) return k;
  }
  return QuantKernel::kPortable;
}

// The input rows' layout check shared by the entry points.
void check_forward(const char* what, const void* x, int64_t rows, int64_t out, const float* y,
                   int64_t y_stride) {
  const auto fail = [what](const std::string& msg) {
    throw std::invalid_argument(std::string(what) + ": " + msg);
  };
  if (rows < 0) fail("rows (" + std::to_string(rows) + ") is negative");
  if (y_stride < out)
    fail("y_stride (" + std::to_string(y_stride) + ") is less than out (" + std::to_string(out) + ")");
  if ((x == nullptr || y == nullptr) && rows > 0 && out > 0) fail("x or y is null");
}

std::byte* thread_workspace(size_t bytes) {
  thread_local std::vector<std::byte> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

std::byte* aligned64(std::byte* p) {
  while (reinterpret_cast<uintptr_t>(p) % 64 != 0) ++p;
  return p;
}

}  // namespace

QuantKernel quant_kernel() {
  static const QuantKernel chosen = choose_quant_kernel();
  return chosen;
}

QuantLinear::QuantLinear(const MatrixView& w, const std::string& what) : w_(w) {
  if (!is_quantized(w.dtype)) {
    throw std::invalid_argument(what + ": " + std::string(to_string(w.dtype)) + " is not a quantized type");
  }
  validate_view(w, what);
  if (w.dtype == DType::kFP8 && w.scale_block_cols % 2 != 0) {
    throw std::invalid_argument(
        what + ": fp8 scale blocks of " + std::to_string(w.scale_block_cols) +
        " columns: the kernel needs an even block width (dequantize to bf16 instead)");
  }
  detail::check_codes(w, what);
  packed_ = detail::pack_quant(w, quant_kernel());
}

QuantLinear::~QuantLinear() = default;

size_t QuantLinear::weight_bytes() const {
  if (packed_) return packed_->bytes();
  size_t bytes = view_data_bytes(w_);
  if (w_.dtype == DType::kFP8) bytes += static_cast<size_t>(fp8_scale_rows(w_) * fp8_scale_cols(w_)) * 4;
  return bytes;
}

size_t QuantLinear::workspace_bytes(int64_t rows) const {
  return quant_row_layout(rule(), in()).stride * static_cast<size_t>(std::max<int64_t>(rows, 0)) + 64;
}

void QuantLinear::forward(const float* x, int64_t rows, int64_t x_stride, float* y, int64_t y_stride,
                          std::byte* workspace, ThreadPool& pool) const {
  check_forward("QuantLinear::forward", x, rows, out(), y, y_stride);
  if (x_stride < in()) {
    throw std::invalid_argument("QuantLinear::forward: x_stride (" + std::to_string(x_stride) +
                                ") is less than in (" + std::to_string(in()) + ")");
  }
  if (rows == 0 || out() == 0) return;
  std::byte* xq = aligned64(workspace != nullptr ? workspace : thread_workspace(workspace_bytes(rows)));
  quantize_rows(rule(), x, rows, x_stride, in(), xq, pool);
  forward_quantized(xq, rows, y, y_stride, pool);
}

void QuantLinear::forward_quantized(const std::byte* xq, int64_t rows, float* y, int64_t y_stride,
                                    ThreadPool& pool) const {
  forward_quantized_with(packed_ ? packed_->kernel : QuantKernel::kPortable, xq, rows, y, y_stride, pool);
}

void QuantLinear::forward_quantized_with(QuantKernel k, const std::byte* xq, int64_t rows, float* y,
                                         int64_t y_stride, ThreadPool& pool) const {
  check_forward("QuantLinear::forward_quantized", xq, rows, out(), y, y_stride);
  if (!quant_kernel_available(k)) {
    throw std::invalid_argument(std::string("QuantLinear: this CPU has no '") + to_string(k) + "' kernel");
  }
  if (rows == 0 || out() == 0) return;
  if (in() == 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill_n(y + r * y_stride, out(), 0.0f);
    return;
  }
  // Threads take contiguous ranges of whole 16-output panels; never the reduction.
  const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), panels()));
  std::unique_ptr<Packed> repacked;
  const Packed* packed = packed_.get();
  if (k != QuantKernel::kPortable && (packed == nullptr || packed->kernel != k)) {
    repacked = detail::pack_quant(w_, k);  // a test or benchmark asking for another layout
    packed = repacked.get();
  }
  if (packed == nullptr) k = QuantKernel::kPortable;  // a type k runs by the emulation (pack_quant)
  pool.parallel_for(tasks, [&](int64_t task, int) {
    int64_t j0 = 0, j1 = 0;
    ThreadPool::task_range(panels(), tasks, static_cast<int>(task), &j0, &j1);
    run_panels(k, packed, xq, rows, j0, j1, y, y_stride);
  });
}

void QuantLinear::run_panels(QuantKernel k, const Packed* packed, const std::byte* xq, int64_t rows,
                             int64_t j0, int64_t j1, float* y, int64_t y_stride) const {
  if (j1 <= j0) return;
  if (k == QuantKernel::kPortable) {
    detail::quant_outputs_portable(w_, xq, rows, j0 * 16, std::min(out(), j1 * 16), y, y_stride);
  } else {
    detail::quant_panels(*packed, k, xq, rows, j0, j1, y, y_stride);
  }
}

void QuantLinear::forward_quantized_panels(const std::byte* xq, int64_t rows, int64_t j_begin, int64_t j_end,
                                           float* y, int64_t y_stride) const {
  check_forward("QuantLinear::forward_quantized_panels", xq, rows, out(), y, y_stride);
  if (j_begin < 0 || j_end > panels() || j_begin > j_end) {
    throw std::invalid_argument("QuantLinear::forward_quantized_panels: panels [" + std::to_string(j_begin) +
                                ", " + std::to_string(j_end) + ") are not within [0, " +
                                std::to_string(panels()) + ")");
  }
  if (rows == 0 || j_begin == j_end) return;
  if (in() == 0) {
    const int64_t o1 = std::min(out(), j_end * 16);
    for (int64_t r = 0; r < rows; ++r)
      std::fill(y + r * y_stride + j_begin * 16, y + r * y_stride + o1, 0.0f);
    return;
  }
  const Packed* packed = packed_.get();
  run_panels(packed ? packed->kernel : QuantKernel::kPortable, packed, xq, rows, j_begin, j_end, y, y_stride);
}

void linear_quant_reference_f64(const float* x, int64_t rows, const MatrixView& w, bool quantize_input,
                                double* y, double* scale) {
  validate_view(w, "linear_quant_reference_f64");
  const int64_t in = w.cols;
  std::vector<double> xr(static_cast<size_t>(in)), wr(static_cast<size_t>(in));
  const QuantRule rule = is_quantized(w.dtype) ? quant_rule(w.dtype) : QuantRule::kBf16;
  const QuantRowLayout l = quant_row_layout(rule, in);
  std::vector<std::byte> xq(l.stride);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x_row = x + r * in;
    if (!quantize_input) {
      for (int64_t i = 0; i < in; ++i) xr[static_cast<size_t>(i)] = x_row[i];
    } else if (rule == QuantRule::kBf16) {
      for (int64_t i = 0; i < in; ++i) xr[static_cast<size_t>(i)] = round_to_bf16(x_row[i]);
    } else {
      quantize_rows_portable(rule, x_row, 1, in, in, xq.data());
      const auto* q = reinterpret_cast<const int8_t*>(xq.data() + l.q);
      const auto* dx = reinterpret_cast<const float*>(xq.data() + l.dx);
      const int64_t n = rule_block(rule);
      for (int64_t i = 0; i < in; ++i) xr[static_cast<size_t>(i)] = static_cast<double>(q[i]) * dx[i / n];
    }
    for (int64_t o = 0; o < w.rows; ++o) {
      reference_row(w, o, wr.data());
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t i = 0; i < in; ++i) {
        const double t = xr[static_cast<size_t>(i)] * wr[static_cast<size_t>(i)];
        sum += t;
        abs_sum += std::fabs(t);
      }
      y[r * w.rows + o] = sum;
      if (scale != nullptr) scale[r * w.rows + o] = abs_sum;
    }
  }
}

}  // namespace moe::kernels

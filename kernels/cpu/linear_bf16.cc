#include "kernels/cpu/linear_bf16.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_linear_op.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dpbf16.h"
#include "kernels/cpu/linear_bf16_kernel.h"
#include "kernels/cpu/tile_bf16.h"

namespace moe::kernels {
namespace {

void validate(const void* x, int64_t rows, const PackedBf16Weights& w, const float* y, int64_t y_stride,
              const char* what) {
  // The message is built only on failure: the hot path allocates nothing.
  const auto fail = [what](const std::string& msg) {
    throw std::invalid_argument(std::string(what) + ": " + msg);
  };
  if (rows < 0) fail("rows (" + std::to_string(rows) + ") is negative");
  if (y_stride < w.out()) {
    fail("y_stride (" + std::to_string(y_stride) + ") is less than out (" + std::to_string(w.out()) + ")");
  }
  if (x == nullptr && rows > 0 && w.in() > 0) fail("x is null");
  if (y == nullptr && rows > 0 && w.out() > 0) fail("y is null");
}

// A buffer of the calling thread for linear_bf16 without a workspace: grows, then is reused.
uint16_t* thread_workspace(size_t elems) {
  thread_local std::vector<uint16_t> buffer;
  if (buffer.size() < elems) buffer.resize(elems);
  return buffer.data();
}

// Outputs [64 j0, min(out, 64 j1)) of every row by kernel k on the calling thread (zeros when in == 0, which
// the kernels do not take).
void run_panels(Bf16Kernel k, const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j0,
                int64_t j1, float* y, int64_t y_stride) {
  if (w.in() == 0) {
    const int64_t o0 = j0 * kBf16PanelOutputs, o1 = std::min(w.out(), j1 * kBf16PanelOutputs);
    for (int64_t r = 0; r < rows; ++r) std::fill(y + r * y_stride + o0, y + r * y_stride + o1, 0.0f);
    return;
  }
  switch (k) {
#if MOE_HAVE_AVX512_BF16_TARGET
    case Bf16Kernel::kAvx512Dpbf16:
      detail::bf16_panels_avx512(xb, rows, w, j0, j1, y, y_stride);
      return;
    case Bf16Kernel::kAvx512Fma:
      detail::bf16_panels_fma512(xb, rows, w, j0, j1, y, y_stride);
      return;
    case Bf16Kernel::kAvx512FmaTile:
      detail::bf16_panels_fma512_tile(xb, rows, w, j0, j1, y, y_stride);
      return;
#endif
#if MOE_HAVE_AMX_TARGET
    case Bf16Kernel::kAmx:
      detail::bf16_panels_amx(xb, rows, w, j0, j1, y, y_stride);
      return;
#endif
    default:  // kPortable, kPortableTile (and kernels this compiler cannot build, which are never available)
      detail::bf16_panels_emulated(bf16_kernel_contract(k), xb, rows, w, j0, j1, y, y_stride);
      return;
  }
}

void run(Bf16Kernel k, const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, float* y,
         int64_t y_stride, ThreadPool& pool) {
  // Threads take contiguous ranges of whole panels; never the reduction.
  const int64_t panels = w.panels();
  const int tasks = static_cast<int>(std::min<int64_t>(pool.num_threads(), panels));
  pool.parallel_for(tasks, [&](int64_t task, int) {
    int64_t j0 = 0, j1 = 0;
    ThreadPool::task_range(panels, tasks, static_cast<int>(task), &j0, &j1);
    if (j1 > j0) run_panels(k, xb, rows, w, j0, j1, y, y_stride);
  });
}

void run(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, float* y, int64_t y_stride,
         ThreadPool& pool) {
  run(linear_bf16_kernel(), xb, rows, w, y, y_stride, pool);
}

// Seconds of the best of 3 runs of kernel k on a one-panel, 6-row, 1024-pair product (about 1.6 MFLOP).
double time_kernel(Bf16Kernel k, const uint16_t* xb, const PackedBf16Weights& w, float* y) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) run_panels(k, xb, 6, w, 0, 1, y, w.out());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

constexpr Bf16Kernel kAllKernels[] = {Bf16Kernel::kPortable,      Bf16Kernel::kAvx512Fma,
                                      Bf16Kernel::kAvx512Dpbf16,  Bf16Kernel::kPortableTile,
                                      Bf16Kernel::kAvx512FmaTile, Bf16Kernel::kAmx};

Bf16Kernel choose_pair_kernel() {
  const bool dp = bf16_kernel_available(Bf16Kernel::kAvx512Dpbf16);
  const bool fma = bf16_kernel_available(Bf16Kernel::kAvx512Fma);
  if (dp && fma) {
    constexpr int64_t kIn = 2048;
    std::vector<uint16_t> wb(static_cast<size_t>(64 * kIn), 0x3c00), xb(static_cast<size_t>(6 * kIn), 0x3c00);
    const PackedBf16Weights w(MatrixView{wb.data(), DType::kBF16, 64, kIn, kIn});
    std::vector<float> y(6 * 64);
    time_kernel(Bf16Kernel::kAvx512Dpbf16, xb.data(), w, y.data());  // warm-up (caches, clocks)
    const double t_dp = time_kernel(Bf16Kernel::kAvx512Dpbf16, xb.data(), w, y.data());
    const double t_fma = time_kernel(Bf16Kernel::kAvx512Fma, xb.data(), w, y.data());
    return t_fma < t_dp ? Bf16Kernel::kAvx512Fma : Bf16Kernel::kAvx512Dpbf16;
  }
  if (dp) return Bf16Kernel::kAvx512Dpbf16;
  if (fma) return Bf16Kernel::kAvx512Fma;
  return Bf16Kernel::kPortable;
}

Bf16Kernel choose_kernel() {
  if (const char* forced = std::getenv("MOE_BF16_KERNEL")) {
    for (Bf16Kernel k : kAllKernels) {
      if (std::string(forced) == to_string(k) && bf16_kernel_available(k)) return k;
    }
  }
  const char* pinned = std::getenv("MOE_BF16_CONTRACT");
  const bool amx = bf16_kernel_available(Bf16Kernel::kAmx);
  const bool tile = pinned != nullptr && std::string(pinned) == "tile"   ? true
                    : pinned != nullptr && std::string(pinned) == "pair" ? false
                                                                         : amx;
  if (tile) {
    if (amx) return Bf16Kernel::kAmx;
    return bf16_kernel_available(Bf16Kernel::kAvx512FmaTile) ? Bf16Kernel::kAvx512FmaTile
                                                             : Bf16Kernel::kPortableTile;
  }
  return choose_pair_kernel();
}

}  // namespace

namespace detail {

float emulated_output(Bf16Contract contract, const uint16_t* xr, const PackedBf16Weights& w, int64_t o) {
  const uint32_t* panel = w.panel(o / kBf16PanelOutputs);
  const int64_t c = o % kBf16PanelOutputs;
  const auto weight_pair = [&](int64_t p) { return panel[p * kBf16PanelOutputs + c]; };
  if (contract == Bf16Contract::kTile) return tile_bf16_dot(xr, w.pairs(), weight_pair);
  float acc = 0.0f;
  for (int64_t p = 0; p < w.pairs(); ++p) {
    const uint32_t wp = weight_pair(p);
    acc = dpbf16(acc, xr[2 * p], xr[2 * p + 1], static_cast<uint16_t>(wp & 0xffffu),
                 static_cast<uint16_t>(wp >> 16));
  }
  return acc;
}

void bf16_panels_emulated(Bf16Contract contract, const uint16_t* xb, int64_t rows, const PackedBf16Weights& w,
                          int64_t j_begin, int64_t j_end, float* y, int64_t y_stride) {
  const int64_t xs = 2 * w.pairs();
  const int64_t o_begin = j_begin * kBf16PanelOutputs, o_end = std::min(w.out(), j_end * kBf16PanelOutputs);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = o_begin; o < o_end; ++o)
      y[r * y_stride + o] = emulated_output(contract, xb + r * xs, w, o);
  }
}

}  // namespace detail

void linear_bf16(const float* x, int64_t rows, int64_t x_stride, const PackedBf16Weights& w, float* y,
                 int64_t y_stride, uint16_t* workspace, ThreadPool& pool) {
  validate(x, rows, w, y, y_stride, "linear_bf16");
  if (x_stride < w.in()) {
    throw std::invalid_argument("linear_bf16: x_stride (" + std::to_string(x_stride) + ") is less than in (" +
                                std::to_string(w.in()) + ")");
  }
  if (rows == 0 || w.out() == 0) return;
  uint16_t* xb =
      workspace != nullptr ? workspace : thread_workspace(linear_bf16_workspace_elems(rows, w.in()));
  round_rows_to_bf16(x, rows, x_stride, w.in(), xb, pool);
  run(xb, rows, w, y, y_stride, pool);
}

void linear_bf16_rounded(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, float* y,
                         int64_t y_stride, ThreadPool& pool) {
  validate(xb, rows, w, y, y_stride, "linear_bf16_rounded");
  if (rows == 0 || w.out() == 0) return;
  run(xb, rows, w, y, y_stride, pool);
}

void linear_bf16_rounded_panels(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j0,
                                int64_t j1, float* y, int64_t y_stride) {
  validate(xb, rows, w, y, y_stride, "linear_bf16_rounded_panels");
  if (j0 < 0 || j1 < j0 || j1 > w.panels()) {
    throw std::invalid_argument("linear_bf16_rounded_panels: panel range [" + std::to_string(j0) + ", " +
                                std::to_string(j1) + ") is not within [0, " + std::to_string(w.panels()) +
                                ")");
  }
  if (rows == 0 || j1 == j0) return;
  run_panels(linear_bf16_kernel(), xb, rows, w, j0, j1, y, y_stride);
}

void InvariantBf16Linear::forward_rounded_panels(const uint16_t* xb, int64_t rows, int64_t j0, int64_t j1,
                                                 float* y, int64_t y_stride) const {
  linear_bf16_rounded_panels(xb, rows, packed_, j0, j1, y, y_stride);
}

void Bf16LinearOp::forward_rounded_panels(const uint16_t*, int64_t, int64_t j0, int64_t j1, float*,
                                          int64_t) const {
  throw std::invalid_argument("Bf16LinearOp::forward_rounded_panels: this " +
                              std::string(kind() == KernelKind::kFast ? "fast" : "invariant") +
                              " op runs whole products only (panel range [" + std::to_string(j0) + ", " +
                              std::to_string(j1) + "))");
}

void InvariantBf16Linear::forward_rounded(const uint16_t* xb, int64_t rows, float* y, int64_t y_stride,
                                          ThreadPool& pool) const {
  linear_bf16_rounded(xb, rows, packed_, y, y_stride, pool);
}

const char* to_string(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::kPortable:
      return "portable";
    case Bf16Kernel::kAvx512Fma:
      return "fma";
    case Bf16Kernel::kAvx512Dpbf16:
      return "dpbf16";
    case Bf16Kernel::kPortableTile:
      return "portable-tile";
    case Bf16Kernel::kAvx512FmaTile:
      return "fma-tile";
    case Bf16Kernel::kAmx:
      return "amx";
  }
  return "?";
}

const char* to_string(Bf16Contract c) {
  return c == Bf16Contract::kTile ? "tile" : "pair";
}

Bf16Contract bf16_kernel_contract(Bf16Kernel k) {
  return k == Bf16Kernel::kPortableTile || k == Bf16Kernel::kAvx512FmaTile || k == Bf16Kernel::kAmx
             ? Bf16Contract::kTile
             : Bf16Contract::kPair;
}

bool bf16_kernel_available(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::kPortable:
      return true;
    case Bf16Kernel::kAvx512Fma:
      return MOE_HAVE_AVX512_BF16_TARGET && cpu_has_avx512f();
    case Bf16Kernel::kAvx512Dpbf16:
      return MOE_HAVE_AVX512_BF16_TARGET && cpu_has_avx512_bf16();
    case Bf16Kernel::kPortableTile:
      return true;
    case Bf16Kernel::kAvx512FmaTile:
      return MOE_HAVE_AVX512_BF16_TARGET && cpu_has_avx512f();
    case Bf16Kernel::kAmx:
      return MOE_HAVE_AMX_TARGET && cpu_has_amx_bf16();
  }
  return false;
}

Bf16Kernel linear_bf16_kernel() {
  static const Bf16Kernel chosen = choose_kernel();
  return chosen;
}

Bf16Contract linear_bf16_contract() {
  return bf16_kernel_contract(linear_bf16_kernel());
}

bool linear_bf16_uses_avx512() {
  return linear_bf16_kernel() == Bf16Kernel::kAvx512Dpbf16;
}

void linear_bf16_rounded_with(Bf16Kernel k, const uint16_t* xb, int64_t rows, const PackedBf16Weights& w,
                              float* y, int64_t y_stride, ThreadPool& pool) {
  validate(xb, rows, w, y, y_stride, "linear_bf16_rounded_with");
  if (!bf16_kernel_available(k)) {
    throw std::invalid_argument(std::string("linear_bf16_rounded_with: this CPU has no '") + to_string(k) +
                                "' kernel");
  }
  if (rows == 0 || w.out() == 0) return;
  run(k, xb, rows, w, y, y_stride, pool);
}

void linear_bf16_rounded_portable(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, float* y,
                                  int64_t y_stride, Bf16Contract contract) {
  validate(xb, rows, w, y, y_stride, "linear_bf16_rounded_portable");
  if (rows == 0 || w.out() == 0) return;
  if (w.in() == 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill_n(y + r * y_stride, w.out(), 0.0f);
    return;
  }
  detail::bf16_panels_emulated(contract, xb, rows, w, 0, w.panels(), y, y_stride);
}

}  // namespace moe::kernels

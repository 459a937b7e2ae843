#include "kernels/cpu/linear_onednn.h"

#include <omp.h>

#include <algorithm>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/linear.h"

namespace moe::kernels {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One stream per thread (creating a stream allocates; a cached one does not).
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// The row count oneDNN picks the weights' layout for (its preferred layout is the same for every row count
// on the shapes measured; a call with another count reuses this layout).
constexpr int64_t kLayoutRows = 256;

// A call shape's primitive and the memory objects it runs on (their data pointers are set per call).
// `dense_dst`: the primitive writes a dense [rows, n] block (to a per-thread buffer, then copied into y),
// because with y's stride oneDNN 2.6 would fall back to its reference implementation.
struct Prepared {
  dnnl::matmul matmul;
  dnnl::memory src, dst;
  std::string impl;
  bool dense_dst = false;
};

// A per-thread buffer for dense outputs; grows to the largest call, then is reused.
float* dense_buffer(size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

}  // namespace

struct OnednnBf16Linear::Impl {
  struct Slice {
    int64_t o0 = 0, n = 0;
    dnnl::memory::desc weights_desc;
    dnnl::memory weights;
    std::mutex mutex;                                       // guards cache and the memory objects' handles
    std::map<std::pair<int64_t, int64_t>, Prepared> cache;  // (rows, y_stride) -> prepared call
  };
  int64_t in = 0, pairs = 0;
  std::vector<std::unique_ptr<Slice>> slices;

  // The reduction runs over 2 * pairs elements (the input rows' zero padding meets a zero weight row),
  // so that the source is dense: oneDNN 2.6's fast matmuls want dense operands.
  dnnl::matmul::primitive_desc make_pd(const Slice& s, int64_t rows, int64_t y_stride,
                                       const dnnl::memory::desc& weights) const {
    const dnnl::memory::desc src(dims{rows, 2 * pairs}, dt::bf16, dims{2 * pairs, 1});
    const dnnl::memory::desc dst(dims{rows, s.n}, dt::f32, dims{y_stride, 1});
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), cpu_engine());
  }

  Prepared& prepared(Slice& s, int64_t rows, int64_t y_stride) const {
    const auto key = std::make_pair(rows, y_stride);
    auto it = s.cache.find(key);
    if (it != s.cache.end()) return it->second;
    auto pd = make_pd(s, rows, y_stride, s.weights_desc);
    bool dense = false;
    if (y_stride != s.n && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
      pd = make_pd(s, rows, s.n, s.weights_desc);
      dense = true;
    }
    Prepared p{dnnl::matmul(pd), dnnl::memory(pd.src_desc(), cpu_engine(), DNNL_MEMORY_NONE),
               dnnl::memory(pd.dst_desc(), cpu_engine(), DNNL_MEMORY_NONE), pd.impl_info_str(), dense};
    return s.cache.emplace(key, std::move(p)).first->second;
  }
};

OnednnBf16Linear::OnednnBf16Linear(const MatrixView& w, int slices) : impl_(std::make_unique<Impl>()) {
  validate_weights(w, "OnednnBf16Linear: w");
  if (slices < 1) throw std::invalid_argument("OnednnBf16Linear: slices must be >= 1");
  out_ = w.rows;
  in_ = w.cols;
  impl_->in = in_;
  impl_->pairs = bf16_pairs(in_);
  if (out_ == 0 || in_ == 0) return;
  // Slices of whole 64-output blocks, as even as possible.
  const int64_t blocks = (out_ + 63) / 64;
  const int num = static_cast<int>(std::min<int64_t>(slices, blocks));
  std::vector<uint16_t> bf16_rows;
  try {
    for (int s = 0; s < num; ++s) {
      int64_t b0 = 0, b1 = 0;
      ThreadPool::task_range(blocks, num, s, &b0, &b1);
      auto slice = std::make_unique<Impl::Slice>();
      slice->o0 = b0 * 64;
      slice->n = std::min(out_, b1 * 64) - slice->o0;
      // W rows o0..o0+n in bf16, [n, k] row-major with k = 2 * pairs (zero-padded): the matmul's weights
      // [k, n] in "ba" order.
      const int64_t k = 2 * impl_->pairs;
      bf16_rows.assign(static_cast<size_t>(slice->n * k), 0);
      for (int64_t o = 0; o < slice->n; ++o) {
        for (int64_t i = 0; i < in_; ++i) {
          const int64_t at = (slice->o0 + o) * w.row_stride + i;
          bf16_rows[static_cast<size_t>(o * k + i)] =
              w.dtype == DType::kBF16 ? static_cast<const uint16_t*>(w.data)[at]
                                      : f32_to_bf16(static_cast<const float*>(w.data)[at]);
        }
      }
      const dnnl::memory::desc user(dims{k, slice->n}, dt::bf16, dims{1, k});
      const dnnl::memory::desc any(dims{k, slice->n}, dt::bf16, dnnl::memory::format_tag::any);
      slice->weights_desc = impl_->make_pd(*slice, kLayoutRows, slice->n, any).weights_desc();
      slice->weights = dnnl::memory(slice->weights_desc, cpu_engine());
      dnnl::memory user_mem(user, cpu_engine(), bf16_rows.data());
      dnnl::stream& stream = thread_stream();
      dnnl::reorder(user_mem, slice->weights).execute(stream, user_mem, slice->weights);
      stream.wait();
      impl_->slices.push_back(std::move(slice));
    }
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("OnednnBf16Linear: oneDNN: ") + e.what());
  }
}

OnednnBf16Linear::~OnednnBf16Linear() = default;

size_t OnednnBf16Linear::weight_bytes() const {
  size_t bytes = 0;
  for (const auto& s : impl_->slices) bytes += s->weights_desc.get_size();
  return bytes;
}

void OnednnBf16Linear::forward_rounded(const uint16_t* xb, int64_t rows, float* y, int64_t y_stride,
                                       ThreadPool& pool) const {
  if (rows < 0) throw std::invalid_argument("OnednnBf16Linear: rows is negative");
  if (y_stride < out_) throw std::invalid_argument("OnednnBf16Linear: y_stride is less than out");
  if (rows == 0 || out_ == 0) return;
  if (xb == nullptr || y == nullptr) throw std::invalid_argument("OnednnBf16Linear: null x or y");
  if (in_ == 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill_n(y + r * y_stride, out_, 0.0f);
    return;
  }
  const int num = static_cast<int>(impl_->slices.size());
  pool.parallel_for(num, [&](int64_t task, int) {
    Impl::Slice& s = *impl_->slices[static_cast<size_t>(task)];
    std::lock_guard<std::mutex> lock(s.mutex);
    try {
      Prepared& p = impl_->prepared(s, rows, y_stride);
      p.src.set_data_handle(const_cast<uint16_t*>(xb));
      float* dense = p.dense_dst ? dense_buffer(static_cast<size_t>(rows * s.n)) : nullptr;
      p.dst.set_data_handle(dense != nullptr ? dense : y + s.o0);
      dnnl_exec_arg_t args[3] = {
          {DNNL_ARG_SRC, p.src.get()}, {DNNL_ARG_WEIGHTS, s.weights.get()}, {DNNL_ARG_DST, p.dst.get()}};
      // One oneDNN (OpenMP) thread per pool thread, restored afterwards for the caller's own OpenMP code.
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      const dnnl_status_t status = dnnl_primitive_execute(p.matmul.get(), thread_stream().get(), 3, args);
      omp_set_num_threads(saved);
      if (status != dnnl_success) throw std::runtime_error("OnednnBf16Linear: oneDNN execution failed");
      if (dense != nullptr) {
        for (int64_t r = 0; r < rows; ++r) std::copy_n(dense + r * s.n, s.n, y + r * y_stride + s.o0);
      }
    } catch (const dnnl::error& e) {
      throw std::runtime_error(std::string("OnednnBf16Linear: oneDNN: ") + e.what());
    }
  });
}

std::string OnednnBf16Linear::implementation(int64_t rows) const {
  if (impl_->slices.empty() || rows <= 0) return "none";
  Impl::Slice& s = *impl_->slices.front();
  std::lock_guard<std::mutex> lock(s.mutex);
  const Prepared& p = impl_->prepared(s, rows, out_);
  return p.impl + (p.dense_dst ? " (dense output, copied)" : "");
}

Bf16LinearMaker onednn_bf16_linear_maker(int slices) {
  return [slices](const MatrixView& w) -> std::unique_ptr<Bf16LinearOp> {
    return std::make_unique<OnednnBf16Linear>(w, slices);
  };
}

}  // namespace moe::kernels

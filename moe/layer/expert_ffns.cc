#include "moe/layer/expert_ffns.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cpu/bf16_linear_op.h"
#include "kernels/quant_formats.h"
#include "moe/io/memory.h"
#if defined(MOE_HAVE_ONEDNN)
#include "kernels/cpu/linear_onednn.h"
#endif

namespace moe {
namespace {

// The bf16 linear of each kind (expert_ffns.h).
kernels::Bf16LinearMaker bf16_maker(kernels::KernelKind kind, int threads) {
  if (kind == kernels::KernelKind::kInvariant) return kernels::make_invariant_bf16_linear;
#if defined(MOE_HAVE_ONEDNN)
  return kernels::onednn_bf16_linear_maker(threads);
#else
  (void)threads;
  return kernels::make_eigen_bf16_linear;
#endif
}

// The matrices of an FFN that its activation reads, in the order w1, w3, w2 (w3 null unless gated).
std::array<const kernels::MatrixView*, 3> ffn_matrices(kernels::Activation act,
                                                       const kernels::FfnWeights& w) {
  return {&w.w1, kernels::is_gated(act) ? &w.w3 : nullptr, &w.w2};
}

// Bytes of the copy an FFN's weights get here: the quantized kernels' panels (about the stored blocks' bytes:
// kernels/cpu/linear_quant_pack.h) of its quantized matrices, and under bf16 compute the bf16 copy of a plain
// FFN (2 bytes an element).
uint64_t prepared_bytes(kernels::Activation act, const kernels::FfnWeights& w,
                        kernels::ComputePrecision compute) {
  const auto matrices = ffn_matrices(act, w);
  if (kernels::ffn_has_quantized(act, w)) {
    uint64_t bytes = 0;
    for (const kernels::MatrixView* m : matrices) {
      if (m == nullptr || !kernels::is_quantized(m->dtype)) continue;
      bytes += static_cast<uint64_t>(m->rows) * kernels::row_bytes(m->dtype, m->cols);
    }
    return bytes;
  }
  if (compute != kernels::ComputePrecision::kBF16) return 0;
  uint64_t elements = 0;
  for (const kernels::MatrixView* m : matrices) {
    if (m != nullptr) elements += static_cast<uint64_t>(m->rows) * static_cast<uint64_t>(m->cols);
  }
  return 2 * elements;
}

// The mapped bytes of an FFN's quantized matrices (and FP8's scales), released once their panels are made.
void release_quantized(kernels::Activation act, const kernels::FfnWeights& w) {
  for (const kernels::MatrixView* m : ffn_matrices(act, w)) {
    if (m == nullptr || !kernels::is_quantized(m->dtype)) continue;
    io::release_pages(m->data, kernels::view_data_bytes(*m));
    if (m->scales != nullptr) {
      io::release_pages(m->scales,
                        static_cast<uint64_t>(kernels::fp8_scale_rows(*m) * m->scale_stride) * sizeof(float));
    }
  }
}

}  // namespace

ExpertFfns::ExpertFfns(const MoELayerConfig& config, const io::LayerWeights& weights,
                       std::span<const int> experts)
    : compute_(config.compute),
      kind_(config.expert_kernel),
      act_(config.activation),
      hidden_(weights.shape().hidden),
      expert_ff_(weights.shape().expert_ff),
      shared_ff_(weights.shape().shared_ff) {
  experts_.resize(weights.experts().size());  // the served experts' views (the others stay empty)
  for (int e : experts) {
    if (e < 0 || e >= static_cast<int>(experts_.size()) || !weights.holds_expert(e)) {
      throw std::invalid_argument("expert ffns: expert " + std::to_string(e) +
                                  " is out of range or not held by these weights (they hold " +
                                  weights.held().describe() + ")");
    }
    experts_[static_cast<size_t>(e)] = expert_ffn_weights(weights.experts()[static_cast<size_t>(e)], config);
    int64_t d = 0, ff = 0;
    kernels::validate_ffn_weights(act_, experts_[static_cast<size_t>(e)], &d, &ff, true);
    quantized_ = quantized_ || kernels::ffn_has_quantized(act_, experts_[static_cast<size_t>(e)]);
  }
  if (weights.shared()) {
    shared_ = expert_ffn_weights(*weights.shared(), config);
    int64_t d = 0, ff = 0;
    kernels::validate_ffn_weights(act_, shared_, &d, &ff, true);
    has_shared_ = true;
  }
  // The copies made below, checked against the memory the process may still take (the mapped checkpoint's
  // pages they are made from are reclaimable page cache): a layer that does not fit is refused with numbers
  // instead of failing in the allocator.
  uint64_t copies = has_shared_ ? prepared_bytes(act_, shared_, compute_) : 0;
  for (int e : experts) copies += prepared_bytes(act_, experts_[static_cast<size_t>(e)], compute_);
  io::check_memory(copies,
                   "the prepared expert weights (the quantized kernels' panels, bf16 compute's copies) of " +
                       std::to_string(experts.size()) + " experts");
  // Quantized FFNs run their own kernels on panels copied from the stored blocks; the plain ones follow
  // `compute`.
  quant_.resize(experts_.size());
  for (int e : experts) {
    if (!kernels::ffn_has_quantized(act_, experts_[e])) continue;
    quant_[static_cast<size_t>(e)] = std::make_unique<kernels::PackedFfnQuant>(
        act_, experts_[e], kind_, "experts[" + std::to_string(e) + "]");
  }
  if (has_shared_ && kernels::ffn_has_quantized(act_, shared_)) {
    quant_shared_ = std::make_unique<kernels::PackedFfnQuant>(act_, shared_, kind_, "shared");
  }
  sources_mapped_ = weights.zero_copy();
  if (compute_ != kernels::ComputePrecision::kBF16) return;
  const kernels::Bf16LinearMaker make = bf16_maker(kind_, config.num_threads);
  packed_.resize(experts_.size());
  for (int e : experts) {
    if (quant_[static_cast<size_t>(e)]) continue;
    packed_[static_cast<size_t>(e)] = std::make_unique<kernels::PackedFfnBf16>(act_, experts_[e], make);
  }
  if (has_shared_ && !quant_shared_)
    packed_shared_ = std::make_unique<kernels::PackedFfnBf16>(act_, shared_, make);
}

ExpertFfns::~ExpertFfns() = default;

void ExpertFfns::release_mapped_sources() const {
  if (!sources_mapped_) return;
  for (size_t e = 0; e < quant_.size(); ++e) {
    if (quant_[e]) release_quantized(act_, experts_[e]);
  }
  if (quant_shared_) release_quantized(act_, shared_);
}

size_t ExpertFfns::expert_scratch_floats(int64_t rows) const {
  size_t n = compute_ == kernels::ComputePrecision::kBF16
                 ? kernels::ffn_bf16_scratch_floats(rows, hidden_, expert_ff_)
                 : kernels::ffn_scratch_floats(rows, expert_ff_);
  for (const auto& q : quant_) {
    if (q) n = std::max(n, kernels::ffn_quant_scratch_floats(*q, rows));
  }
  return n;
}

size_t ExpertFfns::shared_scratch_floats(int64_t rows) const {
  if (!has_shared_) return 0;
  if (quant_shared_) return kernels::ffn_quant_scratch_floats(*quant_shared_, rows);
  return compute_ == kernels::ComputePrecision::kBF16
             ? kernels::ffn_bf16_scratch_floats(rows, hidden_, shared_ff_)
             : kernels::ffn_scratch_floats(rows, shared_ff_);
}

void ExpertFfns::run(const kernels::FfnWeights& w, const kernels::PackedFfnBf16* packed,
                     const kernels::PackedFfnQuant* quant, const float* x, int64_t rows, float* y,
                     float* scratch, kernels::ThreadPool& pool) const {
  if (quant != nullptr) {
    kernels::ffn_quant_forward(x, rows, hidden_, *quant, y, hidden_, scratch, pool);
  } else if (compute_ == kernels::ComputePrecision::kBF16) {
    kernels::ffn_bf16_forward(x, rows, hidden_, *packed, y, hidden_, scratch, pool);
  } else {
    kernels::ffn_forward(kind_, act_, x, rows, hidden_, w, y, hidden_, scratch, pool);
  }
}

const kernels::PackedFfnBf16& ExpertFfns::packed_expert(int e) const {
  const kernels::PackedFfnBf16* packed =
      e >= 0 && e < static_cast<int>(packed_.size()) ? packed_[static_cast<size_t>(e)].get() : nullptr;
  if (packed == nullptr) {
    throw std::invalid_argument("expert ffns: expert " + std::to_string(e) + " is not served here");
  }
  return *packed;
}

void ExpertFfns::run_expert(int e, const float* x, int64_t rows, float* y, float* scratch,
                            kernels::ThreadPool& pool) const {
  const kernels::PackedFfnQuant* q =
      e >= 0 && e < static_cast<int>(quant_.size()) ? quant_[static_cast<size_t>(e)].get() : nullptr;
  if (q != nullptr) {
    run(experts_[static_cast<size_t>(e)], nullptr, q, x, rows, y, scratch, pool);
    return;
  }
  const kernels::PackedFfnBf16* packed =
      compute_ == kernels::ComputePrecision::kBF16 ? &packed_expert(e) : nullptr;
  run(experts_[static_cast<size_t>(e)], packed, nullptr, x, rows, y, scratch, pool);
}

void ExpertFfns::run_shared(const float* x, int64_t rows, float* y, float* scratch,
                            kernels::ThreadPool& pool) const {
  if (!has_shared_) throw std::invalid_argument("expert ffns: the layer has no shared expert");
  run(shared_, packed_shared_.get(), quant_shared_.get(), x, rows, y, scratch, pool);
}

void ExpertFfns::run_expert_rounded(int e, const uint16_t* xb, int64_t rows, float* y, float* scratch,
                                    kernels::ThreadPool& pool) const {
  if (!takes_rounded()) throw std::invalid_argument("expert ffns: rounded rows need bf16 compute");
  kernels::ffn_bf16_forward_rounded(xb, rows, packed_expert(e), y, hidden_, scratch, pool);
}

void ExpertFfns::run_shared_rounded(const uint16_t* xb, int64_t rows, float* y, float* scratch,
                                    kernels::ThreadPool& pool) const {
  if (!takes_rounded()) throw std::invalid_argument("expert ffns: rounded rows need bf16 compute");
  if (!has_shared_) throw std::invalid_argument("expert ffns: the layer has no shared expert");
  kernels::ffn_bf16_forward_rounded(xb, rows, *packed_shared_, y, hidden_, scratch, pool);
}

}  // namespace moe

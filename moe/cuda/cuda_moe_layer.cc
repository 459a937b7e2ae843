#include "moe/cuda/cuda_moe_layer.h"

#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/cuda/check.h"
#include "base/cuda/device.h"
#include "kernels/bf16.h"
#include "kernels/quant_formats.h"
#include "router/cuda/plan_dispatch.h"
#include "router/cuda/topk.h"
#include "router/plan_checks.h"
#include "router/rules/capacity.h"
#include "router/rules/plan_rules.h"

namespace moe {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("cuda moe layer: " + msg);
}

// Makes `device` current; a no-op (no runtime call that could disturb a stream capture) when it already is.
void make_current(int device) {
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) CUDA_CHECK(cudaSetDevice(device));
}

// Enqueues on `stream` the copy of a row-major matrix view (any row stride) into dst at element offset `at`
// (dense rows). Stream-ordered: the layer's kernels on that stream see it; upload_weights() synchronises the
// stream once at the end so that work on any other stream (forward_device's caller's) sees it too.
void upload_matrix(const kernels::MatrixView& m, std::byte* dst, size_t at, cudaStream_t stream) {
  const size_t esize = kernels::dtype_size(m.dtype);
  const size_t stride = static_cast<size_t>(std::max(m.row_stride, m.cols));
  CUDA_CHECK(cudaMemcpy2DAsync(dst + at * esize, m.cols * esize, m.data, stride * esize, m.cols * esize,
                               m.rows, cudaMemcpyHostToDevice, stream));
}

// Enqueues on `stream` the copy of matrix m into dst at element offset `at` as bf16, m being of another type:
// a quantized matrix dequantized on the host (kernels::dequantize_row_bf16: each exact value rounded once),
// an f32 one rounded to nearest even. The host rows go into `staging`, which must outlive the copy
// (upload_weights keeps it until its final synchronisation).
void upload_converted(const kernels::MatrixView& m, std::byte* dst, size_t at, cudaStream_t stream,
                      std::vector<std::vector<uint16_t>>& staging) {
  std::vector<uint16_t>& rows = staging.emplace_back(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    uint16_t* out = rows.data() + r * m.cols;
    if (kernels::is_quantized(m.dtype)) {
      kernels::dequantize_row_bf16(m, r, out);
    } else {
      const auto* in = static_cast<const float*>(m.data) + r * m.row_stride;
      for (int64_t c = 0; c < m.cols; ++c) out[c] = kernels::f32_to_bf16(in[c]);
    }
  }
  CUDA_CHECK(cudaMemcpyAsync(dst + at * sizeof(uint16_t), rows.data(), rows.size() * sizeof(uint16_t),
                             cudaMemcpyHostToDevice, stream));
}

// Expert matrices of `experts` stacked as [n][rows][cols] on the device in dtype `type`; `pick` selects the
// matrix.
template <typename Pick>
cuda::DeviceBuffer<std::byte> upload_stacked(std::span<const io::ExpertTensors> experts, Pick pick,
                                             kernels::DType type, cudaStream_t stream,
                                             std::vector<std::vector<uint16_t>>& staging) {
  const kernels::MatrixView& first = pick(experts[0]);
  const size_t per = static_cast<size_t>(first.rows * first.cols);
  cuda::DeviceBuffer<std::byte> buf(per * experts.size() * kernels::dtype_size(type));
  for (size_t e = 0; e < experts.size(); ++e) {
    const kernels::MatrixView& m = pick(experts[e]);
    if (m.dtype == type) {
      upload_matrix(m, buf.data(), e * per, stream);
    } else {
      upload_converted(m, buf.data(), e * per, stream, staging);
    }
  }
  return buf;
}

void upload_floats(const kernels::MatrixView& m, cuda::DeviceBuffer<float>& out, cudaStream_t stream) {
  out = cuda::DeviceBuffer<float>(static_cast<size_t>(m.rows * m.cols));
  upload_matrix(m, reinterpret_cast<std::byte*>(out.data()), 0, stream);
}

// The experts' biases of one kind stacked as [n][len] on the device (`pick` selects the span); empty when the
// experts have none. Waited for by upload_weights' final synchronisation, like the matrices (the host spans
// live in the LayerWeights the layer holds).
template <typename Pick>
cuda::DeviceBuffer<float> upload_stacked_bias(std::span<const io::ExpertTensors> experts, Pick pick,
                                              cudaStream_t stream) {
  if (pick(experts[0]).empty()) return {};
  const size_t len = pick(experts[0]).size();
  cuda::DeviceBuffer<float> buf(len * experts.size());
  for (size_t e = 0; e < experts.size(); ++e) {
    CUDA_CHECK(cudaMemcpyAsync(buf.data() + e * len, pick(experts[e]).data(), len * sizeof(float),
                               cudaMemcpyHostToDevice, stream));
  }
  return buf;
}

}  // namespace

// Device workspace for batches of up to `tokens` rows, and the pinned staging of forward().
struct CudaMoELayer::Workspace {
  int tokens = 0;
  size_t plan_bytes = 0, ffn_bytes = 0, shared_ffn_bytes = 0;
  cuda::DeviceBuffer<float> x, y, logits, route_weights, top1, pair_weight, x_rows, y_rows, shared_out,
      shared_logit;
  cuda::DeviceBuffer<int32_t> route_experts, error_row, pair_expert, pair_slot, load, offsets, slot_pairs,
      dense_offsets, dense_tiles, token_state_row, slots_held, higher_choices;
  cuda::DeviceBuffer<uint32_t> next_position, prompt_length;
  cuda::DeviceBuffer<TokenMeta> meta;
  cuda::DeviceBuffer<PairStatus> pair_status;
  cuda::DeviceBuffer<int64_t> capacity, counts;
  cuda::DeviceBuffer<PlanError> error;
  cuda::DeviceBuffer<std::byte> plan_ws, ffn_ws, shared_ffn_ws;
  std::unique_ptr<cuda::CublasExpertFfn> fast_experts, fast_shared;
  // Pinned staging: errors, counts, load, y.
  cuda::PinnedBuffer<int32_t> host_error_row{1};
  cuda::PinnedBuffer<PlanError> host_error{1};
  cuda::PinnedBuffer<int64_t> host_counts{4};
  cuda::PinnedBuffer<int32_t> host_load;
  cuda::PinnedBuffer<float> host_y;
};

CudaMoELayer::CudaMoELayer(MoELayerConfig config, std::shared_ptr<const io::LayerWeights> weights, int device)
    : config_(config.fitted_to(*weights)),
      weights_(std::move(weights)),
      device_(device),
      hidden_(weights_->shape().hidden) {
  if (config_.compute != kernels::ComputePrecision::kF32) {
    fail("compute precision '" + std::string(kernels::to_string(config_.compute)) +
         "' is not implemented on the GPU (the CUDA layer computes in fp32, bf16 weights widened): use "
         "compute "
         "fp32, or the CPU layer for bf16 compute");
  }
  weights_->require_all_experts("CudaMoELayer");
  for (const io::ExpertTensors& t : weights_->experts()) {
    int64_t d = 0, ff = 0;
    kernels::validate_ffn_weights(config_.activation, expert_ffn_weights(t, config_), &d, &ff);
  }
  if (hidden_ > INT_MAX / 2 || weights_->shape().expert_ff > INT_MAX / 2) {
    fail("hidden and expert sizes must fit the GPU kernels' int indices");
  }
  cuda::PlanShape shape{config_.max_tokens, num_experts(), top_k(), 0, config_.policy};
  num_ranked_ = rules::num_ranked_needed(config_.policy, shape.num_experts, shape.top_k);
  has_shared_ = weights_->shared().has_value();
  has_shared_gate_ = has_shared_ && weights_->shared_gate().has_value();

  std::string why;
  if (!cuda::device_available(&why))
    throw std::runtime_error("cuda moe layer: no usable CUDA device: " + why);
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    throw std::runtime_error("cuda moe layer: device " + std::to_string(device) + " does not exist (" +
                             std::to_string(count) + " visible)");
  }
  make_current(device_);
  try {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (config_.gate_kernel == kernels::KernelKind::kFast) {
      cublasHandle_t handle = nullptr;
      CUBLAS_CHECK(cublasCreate(&handle));
      cublas_ = handle;
    }
    upload_weights();
    ensure_workspace(std::max(config_.max_tokens, 1));
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

CudaMoELayer::~CudaMoELayer() {
  release();
}

void CudaMoELayer::release() noexcept {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  ws_.reset();
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_) cudaStreamDestroy(stream_);
  cublas_ = nullptr;
  stream_ = nullptr;
}

void CudaMoELayer::upload_weights() {
  const io::LayerShape& s = weights_->shape();
  const bool gelu = config_.activation == kernels::Activation::kGELU;
  // kF32 or kBF16 (f16 files are converted when loaded). Quantized matrices are dequantized to bf16 on upload
  // (docs/cuda.md: the GPU has no quantized kernels yet), and with them every expert matrix of the layer.
  const kernels::DType type = weights_->quantized() ? kernels::DType::kBF16 : weights_->storage();
  const kernels::Activation act = config_.activation;
  // GELU experts read up and down (kernels/cuda/expert_ffn.h: w1 holds the up projection).
  auto first = [gelu](const io::ExpertTensors& t) -> const kernels::MatrixView& {
    return gelu ? t.up_proj : t.gate_proj;
  };
  auto up = [](const io::ExpertTensors& t) -> const kernels::MatrixView& { return t.up_proj; };
  auto down = [](const io::ExpertTensors& t) -> const kernels::MatrixView& { return t.down_proj; };

  std::span<const io::ExpertTensors> experts = weights_->experts();
  std::vector<std::vector<uint16_t>> staging;  // dequantized rows, alive until the synchronisation below
  w1_ = upload_stacked(experts, first, type, stream_, staging);
  if (!gelu) w3_ = upload_stacked(experts, up, type, stream_, staging);
  w2_ = upload_stacked(experts, down, type, stream_, staging);
  // gpt-oss's biases (GELU experts read the up projection's bias as b1, like its matrix).
  b1_ = upload_stacked_bias(
      experts, [gelu](const io::ExpertTensors& t) { return gelu ? t.up_bias : t.gate_bias; }, stream_);
  if (!gelu)
    b3_ = upload_stacked_bias(
        experts, [](const io::ExpertTensors& t) { return t.up_bias; }, stream_);
  b2_ = upload_stacked_bias(
      experts, [](const io::ExpertTensors& t) { return t.down_bias; }, stream_);
  experts_view_ = cuda::ExpertWeightsView{type,
                                          num_experts(),
                                          static_cast<int>(s.hidden),
                                          static_cast<int>(s.expert_ff),
                                          w1_.data(),
                                          w3_.data(),
                                          w2_.data(),
                                          act,
                                          b1_.size() ? b1_.data() : nullptr,
                                          b3_.size() ? b3_.data() : nullptr,
                                          b2_.size() ? b2_.data() : nullptr,
                                          config_.swiglu_alpha,
                                          config_.swiglu_limit};
  if (has_shared_) {
    std::span<const io::ExpertTensors> one(&*weights_->shared(), 1);
    shared_w1_ = upload_stacked(one, first, type, stream_, staging);
    if (!gelu) shared_w3_ = upload_stacked(one, up, type, stream_, staging);
    shared_w2_ = upload_stacked(one, down, type, stream_, staging);
    shared_view_ = cuda::ExpertWeightsView{type,
                                           1,
                                           static_cast<int>(s.hidden),
                                           static_cast<int>(s.shared_ff),
                                           shared_w1_.data(),
                                           shared_w3_.data(),
                                           shared_w2_.data(),
                                           act,
                                           nullptr,
                                           nullptr,
                                           nullptr,
                                           config_.swiglu_alpha,
                                           config_.swiglu_limit};
  }
  upload_floats(weights_->router_gate(), gate_w_, stream_);
  if (has_shared_gate_) upload_floats(*weights_->shared_gate(), shared_gate_w_, stream_);
  if (!weights_->router_bias().empty()) {
    router_bias_ = cuda::DeviceBuffer<float>(weights_->router_bias().size());
    CUDA_CHECK(cudaMemcpyAsync(router_bias_.data(), weights_->router_bias().data(),
                               weights_->router_bias().size() * sizeof(float), cudaMemcpyHostToDevice,
                               stream_));
  }
  if (!config_.router.selection_bias.empty()) {
    bias_ = cuda::DeviceBuffer<float>(config_.router.selection_bias.size());
    bias_.upload(config_.router.selection_bias, stream_);  // ordered on stream_ and waited for
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the weights are in place for every stream
}

void CudaMoELayer::ensure_workspace(int num_tokens) {
  if (ws_ && num_tokens <= ws_->tokens) return;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  ws_.reset();  // free the old buffers before allocating the larger ones
  auto w = std::make_unique<Workspace>();
  const size_t T = static_cast<size_t>(num_tokens), E = static_cast<size_t>(num_experts());
  const size_t P = T * top_k(), R = T * num_ranked_, d = static_cast<size_t>(hidden_);
  const io::LayerShape& s = weights_->shape();
  w->tokens = num_tokens;
  w->x = cuda::DeviceBuffer<float>(T * d);
  w->y = cuda::DeviceBuffer<float>(T * d);
  w->meta = cuda::DeviceBuffer<TokenMeta>(T);
  w->logits = cuda::DeviceBuffer<float>(T * E);
  w->route_experts = cuda::DeviceBuffer<int32_t>(R);
  w->route_weights = cuda::DeviceBuffer<float>(R);
  w->top1 = cuda::DeviceBuffer<float>(T);
  w->error_row = cuda::DeviceBuffer<int32_t>(1);
  w->pair_expert = cuda::DeviceBuffer<int32_t>(P);
  w->pair_slot = cuda::DeviceBuffer<int32_t>(P);
  w->pair_weight = cuda::DeviceBuffer<float>(P);
  w->pair_status = cuda::DeviceBuffer<PairStatus>(P);
  w->load = cuda::DeviceBuffer<int32_t>(E);
  w->capacity = cuda::DeviceBuffer<int64_t>(E);
  w->offsets = cuda::DeviceBuffer<int32_t>(E + 1);
  w->slot_pairs = cuda::DeviceBuffer<int32_t>(P);
  w->counts = cuda::DeviceBuffer<int64_t>(4);
  w->error = cuda::DeviceBuffer<PlanError>(1);
  w->dense_offsets = cuda::DeviceBuffer<int32_t>(2);
  w->dense_tiles = cuda::DeviceBuffer<int32_t>(2);
  if (rules::carries_routing_state(config_.policy)) {
    w->token_state_row = cuda::DeviceBuffer<int32_t>(T);
    w->slots_held = cuda::DeviceBuffer<int32_t>(T * E);
    w->next_position = cuda::DeviceBuffer<uint32_t>(T);
    if (rules::pools_prompt(config_.policy)) {
      w->prompt_length = cuda::DeviceBuffer<uint32_t>(T);
      w->higher_choices =
          cuda::DeviceBuffer<int32_t>(T * rules::prompt_choice_counts_size(top_k(), num_experts()));
    }
  }
  const cuda::PlanShape shape{num_tokens, num_experts(), top_k(), num_ranked_, config_.policy};
  w->plan_bytes = cuda::plan_workspace_bytes(shape);
  w->plan_ws = cuda::DeviceBuffer<std::byte>(w->plan_bytes);
  w->x_rows = cuda::DeviceBuffer<float>(P * d);
  w->y_rows = cuda::DeviceBuffer<float>(P * d);
  const bool fast = config_.expert_kernel == kernels::KernelKind::kFast;
  if (fast) {
    w->fast_experts = std::make_unique<cuda::CublasExpertFfn>(experts_view_, static_cast<int>(P));
  } else {
    w->ffn_bytes = cuda::expert_ffn_invariant_workspace_bytes(num_experts(), static_cast<int>(P),
                                                              static_cast<int>(s.expert_ff));
    w->ffn_ws = cuda::DeviceBuffer<std::byte>(w->ffn_bytes);
  }
  if (has_shared_) {
    w->shared_out = cuda::DeviceBuffer<float>(T * d);
    if (has_shared_gate_) w->shared_logit = cuda::DeviceBuffer<float>(T);
    if (fast) {
      w->fast_shared = std::make_unique<cuda::CublasExpertFfn>(shared_view_, num_tokens);
    } else {
      w->shared_ffn_bytes =
          cuda::expert_ffn_invariant_workspace_bytes(1, num_tokens, static_cast<int>(s.shared_ff));
      w->shared_ffn_ws = cuda::DeviceBuffer<std::byte>(w->shared_ffn_bytes);
    }
  }
  w->host_load = cuda::PinnedBuffer<int32_t>(E);
  w->host_y = cuda::PinnedBuffer<float>(T * d);
  ws_ = std::move(w);
}

size_t CudaMoELayer::device_bytes() const {
  size_t bytes = gate_w_.size() * 4 + bias_.size() * 4 + shared_gate_w_.size() * 4 + w1_.size() + w3_.size() +
                 w2_.size() + shared_w1_.size() + shared_w3_.size() + shared_w2_.size() +
                 (router_bias_.size() + b1_.size() + b3_.size() + b2_.size()) * 4;
  if (!ws_) return bytes;
  const Workspace& w = *ws_;
  for (size_t n : {w.x.size(),
                   w.y.size(),
                   w.logits.size(),
                   w.route_weights.size(),
                   w.top1.size(),
                   w.pair_weight.size(),
                   w.x_rows.size(),
                   w.y_rows.size(),
                   w.shared_out.size(),
                   w.shared_logit.size(),
                   w.route_experts.size(),
                   w.pair_expert.size(),
                   w.pair_slot.size(),
                   w.load.size(),
                   w.offsets.size(),
                   w.slot_pairs.size(),
                   w.token_state_row.size(),
                   w.slots_held.size(),
                   w.next_position.size(),
                   w.prompt_length.size(),
                   w.higher_choices.size()}) {
    bytes += n * 4;
  }
  bytes += w.meta.size() * sizeof(TokenMeta) + w.pair_status.size() +
           (w.capacity.size() + w.counts.size()) * 8 + w.plan_ws.size() + w.ffn_ws.size() +
           w.shared_ffn_ws.size();
  return bytes;
}

// logits [T, E] = x @ W_gate^T.
void CudaMoELayer::gate(const float* x, int num_tokens, cudaStream_t stream) {
  Workspace& w = *ws_;
  const int E = num_experts(), d = static_cast<int>(hidden_);
  if (config_.gate_kernel == kernels::KernelKind::kFast) {
    auto handle = static_cast<cublasHandle_t>(cublas_);
    CUBLAS_CHECK(cublasSetStream(handle, stream));
    const float one = 1.0f, zero = 0.0f;
    // Column-major: logits^T [E, T] = W [d, E]^T x^T [d, T].
    CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, E, num_tokens, d, &one, gate_w_.data(), d, x,
                             d, &zero, w.logits.data(), E));
    if (has_shared_gate_) {
      CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, 1, num_tokens, d, &one,
                               shared_gate_w_.data(), d, x, d, &zero, w.shared_logit.data(), 1));
    }
    return;
  }
  // One group holding every row: the grouped invariant GEMM is a dense one with the same per-row order.
  cuda::single_group_offsets(w.dense_offsets.data(), num_tokens, stream);
  cuda::grouped_linear_invariant(kernels::DType::kF32, gate_w_.data(), 1, E, d, x, w.dense_offsets.data(),
                                 num_tokens, w.logits.data(), w.dense_tiles.data(), stream);
  if (has_shared_gate_) {
    cuda::grouped_linear_invariant(kernels::DType::kF32, shared_gate_w_.data(), 1, 1, d, x,
                                   w.dense_offsets.data(), num_tokens, w.shared_logit.data(),
                                   w.dense_tiles.data(), stream);
  }
}

void CudaMoELayer::experts(int max_rows, cudaStream_t stream) {
  Workspace& w = *ws_;
  if (w.fast_experts) {
    w.fast_experts->forward(w.x_rows.data(), w.offsets.data(), w.y_rows.data(), stream);
  } else {
    cuda::expert_ffn_invariant(experts_view_, w.x_rows.data(), w.offsets.data(), max_rows, w.y_rows.data(),
                               w.ffn_ws.data(), w.ffn_bytes, stream);
  }
}

// shared_out [T, d] = SharedFFN(x); dense_offsets already hold {0, T} (invariant gate) or are set here.
void CudaMoELayer::shared(const float* x, int num_tokens, cudaStream_t stream) {
  Workspace& w = *ws_;
  cuda::single_group_offsets(w.dense_offsets.data(), num_tokens, stream);
  if (w.fast_shared) {
    w.fast_shared->forward(x, w.dense_offsets.data(), w.shared_out.data(), stream);
  } else {
    cuda::expert_ffn_invariant(shared_view_, x, w.dense_offsets.data(), num_tokens, w.shared_out.data(),
                               w.shared_ffn_ws.data(), w.shared_ffn_bytes, stream);
  }
}

void CudaMoELayer::forward_device(const float* x, int num_tokens, const TokenMeta* meta, float* y,
                                  cudaStream_t stream, const DeviceRoutingTable* state) {
  if (num_tokens < 0) fail("num_tokens must be >= 0 (got " + std::to_string(num_tokens) + ")");
  if (num_tokens > ws_->tokens) {
    fail("forward_device: " + std::to_string(num_tokens) + " rows exceed the workspace of " +
         std::to_string(ws_->tokens) + " (raise MoELayerConfig::max_tokens)");
  }
  if (num_tokens > 0 && (x == nullptr || y == nullptr || meta == nullptr)) {
    fail("forward_device: x, meta and y must not be null");
  }
  make_current(device_);
  Workspace& w = *ws_;
  const int k = top_k(), E = num_experts();
  const int max_rows = num_tokens * k;
  last_tokens_ = num_tokens;
  plan_stale_ = true;

  gate(x, num_tokens, stream);
  if (router_bias_.size()) cuda::add_row_bias(w.logits.data(), num_tokens, E, router_bias_.data(), stream);
  const cuda::TopKParams params = cuda::topk_params(config_.router, num_ranked_, bias_.data());
  cuda::topk_route(params, w.logits.data(), num_tokens, w.route_experts.data(), w.route_weights.data(),
                   w.top1.data(), w.error_row.data(), stream);

  const cuda::PlanShape shape{w.tokens, E, k, num_ranked_, config_.policy};
  cuda::PlanInputs in;
  in.num_tokens = num_tokens;
  in.route_experts = w.route_experts.data();
  in.route_weights = w.route_weights.data();
  in.top1_score = w.top1.data();
  in.meta = meta;
  if (state != nullptr && rules::carries_routing_state(config_.policy)) {
    in.token_state_row = state->token_state_row;
    in.num_state_rows = state->num_rows;
    in.state_slots_held = state->slots_held;
    in.state_next_position = state->next_position;
    in.state_prompt_length = state->prompt_length;
    in.state_higher_choices = state->higher_choices;
  }
  const cuda::PlanOutputs out{
      w.pair_expert.data(), w.pair_slot.data(), w.pair_weight.data(), w.pair_status.data(), w.load.data(),
      w.capacity.data(),    w.offsets.data(),   w.slot_pairs.data(),  w.counts.data(),      w.error.data()};
  cuda::plan_dispatch(shape, in, out, w.plan_ws.data(), w.plan_bytes, stream);

  // Llama 4 (weight_on_input): each pair's weight scales its expert's input; the combine adds with weight 1.
  const float* input_weight = config_.weight_on_input ? w.pair_weight.data() : nullptr;
  cuda::gather_rows(x, static_cast<int>(hidden_), w.slot_pairs.data(), w.offsets.data(), E, k, max_rows,
                    w.x_rows.data(), stream, input_weight);
  experts(max_rows, stream);
  if (has_shared_) shared(x, num_tokens, stream);
  cuda::combine_rows_with_shared(w.y_rows.data(), static_cast<int>(hidden_), w.pair_expert.data(),
                                 w.pair_slot.data(), config_.weight_on_input ? nullptr : w.pair_weight.data(),
                                 w.offsets.data(), num_tokens, k, has_shared_ ? w.shared_out.data() : nullptr,
                                 has_shared_gate_ ? w.shared_logit.data() : nullptr, y, stream);
}

void CudaMoELayer::enqueue_error_readback(cudaStream_t stream) {
  Workspace& w = *ws_;
  CUDA_CHECK(cudaMemcpyAsync(w.host_error_row.data(), w.error_row.data(), sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(w.host_error.data(), w.error.data(), sizeof(PlanError), cudaMemcpyDeviceToHost,
                             stream));
}

// Call after the readback has completed. The router's error comes first: the CPU layer routes before it
// plans, so a bad row is what it reports even if the plan of the garbage routes also failed.
void CudaMoELayer::throw_if_device_error() {
  cuda::throw_if_topk_error(*ws_->host_error_row.data());
  throw_if_plan_error(*ws_->host_error.data());
}

void CudaMoELayer::check_device_errors(cudaStream_t stream) {
  enqueue_error_readback(stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  throw_if_device_error();
}

void CudaMoELayer::forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
                           RoutingState* state, MoEStats* stats) {
  check_forward_args(x, num_tokens, meta, y, hidden_);
  check_routing_state(state, num_experts(), top_k());
  make_current(device_);
  ensure_workspace(num_tokens);
  Workspace& w = *ws_;
  const size_t T = static_cast<size_t>(num_tokens), d = static_cast<size_t>(hidden_);
  const size_t E = static_cast<size_t>(num_experts());
  cudaStream_t s = stream_;
  if (num_tokens == 0) {
    if (stats != nullptr) {
      *stats = MoEStats{};
      stats->expert_load.assign(E, 0);
    }
    return;
  }

  CUDA_CHECK(cudaMemcpyAsync(w.x.data(), x, T * d * sizeof(float), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(w.meta.data(), meta.data(), T * sizeof(TokenMeta), cudaMemcpyHostToDevice, s));
  DeviceRoutingTable device_state;
  const bool use_state = state != nullptr && rules::carries_routing_state(config_.policy);
  const bool sequence = rules::pools_prompt(config_.policy);
  if (use_state) {
    table_.build(meta, *state, num_experts(), top_k(), RoutingRule::of(config_.policy));
    const size_t rows = static_cast<size_t>(table_.num_rows());
    CUDA_CHECK(cudaMemcpyAsync(w.token_state_row.data(), table_.token_row.data(), T * sizeof(int32_t),
                               cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(w.slots_held.data(), table_.slots_held.data(), rows * E * sizeof(int32_t),
                               cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(w.next_position.data(), table_.next_position.data(), rows * sizeof(uint32_t),
                               cudaMemcpyHostToDevice, s));
    device_state = DeviceRoutingTable{w.token_state_row.data(), static_cast<int>(rows), w.slots_held.data(),
                                      w.next_position.data()};
    if (sequence) {
      CUDA_CHECK(cudaMemcpyAsync(w.prompt_length.data(), table_.prompt_length.data(), rows * sizeof(uint32_t),
                                 cudaMemcpyHostToDevice, s));
      CUDA_CHECK(cudaMemcpyAsync(w.higher_choices.data(), table_.higher_choices.data(),
                                 rows * table_.counts_size * sizeof(int32_t), cudaMemcpyHostToDevice, s));
      device_state.prompt_length = w.prompt_length.data();
      device_state.higher_choices = w.higher_choices.data();
    }
  }
  forward_device(w.x.data(), num_tokens, w.meta.data(), w.y.data(), s, use_state ? &device_state : nullptr);

  // One synchronisation: errors, counts, load, y and the routing-state rows come back together.
  enqueue_error_readback(s);
  CUDA_CHECK(
      cudaMemcpyAsync(w.host_counts.data(), w.counts.data(), 4 * sizeof(int64_t), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(
      cudaMemcpyAsync(w.host_load.data(), w.load.data(), E * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaMemcpyAsync(w.host_y.data(), w.y.data(), T * d * sizeof(float), cudaMemcpyDeviceToHost, s));
  if (use_state) {
    const size_t rows = static_cast<size_t>(table_.num_rows());
    CUDA_CHECK(cudaMemcpyAsync(table_.slots_held.data(), w.slots_held.data(), rows * E * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(table_.next_position.data(), w.next_position.data(), rows * sizeof(uint32_t),
                               cudaMemcpyDeviceToHost, s));
    if (sequence) {
      CUDA_CHECK(cudaMemcpyAsync(table_.higher_choices.data(), w.higher_choices.data(),
                                 rows * table_.counts_size * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  throw_if_device_error();

  std::memcpy(y, w.host_y.data(), T * d * sizeof(float));
  if (use_state) {
    table_.write_back(*state, RoutingRule::of(config_.policy));
    if (state->records()) {  // the records come from the plan and the routes (one more readback)
      const DispatchPlan& plan = last_plan();
      route_choices_.resize(static_cast<size_t>(T) * num_ranked_);
      w.route_experts.download(route_choices_.data(), route_choices_.size(), s);
      state->record_rows(meta, route_choices_.data(), num_ranked_, plan.pair_expert.data());
    }
  }
  if (stats != nullptr) {
    const int64_t* c = w.host_counts.data();
    stats->num_tokens = num_tokens;
    stats->num_kept = c[0];
    stats->num_rerouted = c[1];
    stats->num_dropped = c[2];
    stats->num_tokens_fully_dropped = c[3];
    stats->expert_load.assign(w.host_load.data(), w.host_load.data() + E);
  }
}

const DispatchPlan& CudaMoELayer::last_plan() {
  if (!plan_stale_) return plan_;
  make_current(device_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  Workspace& w = *ws_;
  DispatchPlan& plan = plan_;
  int64_t counts[4] = {0, 0, 0, 0};
  w.counts.download(counts, 4, stream_);
  const int E = num_experts(), k = top_k();
  plan.num_experts = E;
  plan.top_k = k;
  plan.expert_offsets.resize(E + 1);
  plan.expert_load.resize(E);
  plan.expert_capacity.resize(E);
  w.offsets.download(plan.expert_offsets.data(), E + 1, stream_);
  w.load.download(plan.expert_load.data(), E, stream_);
  w.capacity.download(plan.expert_capacity.data(), E, stream_);
  plan.num_tokens = last_tokens_;
  const size_t P = static_cast<size_t>(last_tokens_) * k;
  plan.pair_expert.resize(P);
  plan.pair_slot.resize(P);
  plan.pair_weight.resize(P);
  plan.pair_status.resize(P);
  w.pair_expert.download(plan.pair_expert.data(), P, stream_);
  w.pair_slot.download(plan.pair_slot.data(), P, stream_);
  w.pair_weight.download(plan.pair_weight.data(), P, stream_);
  static_assert(sizeof(PairStatus) == 1);
  w.pair_status.download(plan.pair_status.data(), P, stream_);
  plan.slot_pairs.resize(plan.expert_offsets[E]);
  w.slot_pairs.download(plan.slot_pairs.data(), plan.slot_pairs.size(), stream_);
  plan.num_kept = counts[0];
  plan.num_rerouted = counts[1];
  plan.num_dropped = counts[2];
  plan.num_tokens_fully_dropped = counts[3];
  const cuda::PlanShape shape{w.tokens, E, k, num_ranked_, config_.policy};
  plan.batch_capacity = cuda::plan_batch_capacity(shape, plan.num_tokens);
  plan_stale_ = false;
  return plan;
}

Fingerprint CudaMoELayer::fingerprint() const {
  cudaDeviceProp prop{};
  std::string device = "cuda:" + std::to_string(device_);
  if (cudaGetDeviceProperties(&prop, device_) == cudaSuccess) {
    device += ' ';
    device += prop.name;
    device += " sm_";
    device += std::to_string(prop.major * 10 + prop.minor);
  }
  Fingerprint f = layer_fingerprint(config_, *weights_, std::move(device), 0);
  f.kernel = "cuda " + f.kernel;
  return f;
}

}  // namespace moe

#include "sim/deploy/step_cost.h"

#include <algorithm>

namespace moe::sim::deploy {

double a2a_seconds(const LinkRows& rows, int64_t row_bytes, const HardwareProfile& hw) {
  const int64_t nvlink = std::max(rows.nvlink_send, rows.nvlink_recv);
  const int64_t rdma = std::max(rows.rdma_send, rows.rdma_recv);
  if (nvlink == 0 && rdma == 0) return 0.0;
  const double bytes = static_cast<double>(row_bytes);
  double t = 0.0;
  if (nvlink > 0)
    t = static_cast<double>(nvlink) * bytes / (hw.nvlink_gbps * 1e9) + hw.nvlink_latency_us * 1e-6;
  if (rdma > 0)
    t = std::max(t, static_cast<double>(rdma) * bytes / (hw.rdma_gbps * 1e9) + hw.rdma_latency_us * 1e-6);
  return hw.a2a_base_us * 1e-6 + t;
}

double gemm_flops_per_second(Dtype weights, const HardwareProfile& hw) {
  double tflops = hw.bf16_tflops;
  if (weights == Dtype::kFp8 && hw.fp8_tflops > 0) tflops = hw.fp8_tflops;
  if (weights == Dtype::kMxfp4) {
    tflops = hw.fp4_tflops > 0 ? hw.fp4_tflops : (hw.fp8_tflops > 0 ? hw.fp8_tflops : hw.bf16_tflops);
  }
  return tflops * 1e12;
}

double gemm_seconds(const RankWork& work, const ModelShape& model, int64_t in_row_bytes,
                    int64_t out_row_bytes, const HardwareProfile& hw) {
  const double shared = model.shared_experts;
  const double rows = static_cast<double>(work.rows) + shared * static_cast<double>(work.home_tokens);
  if (rows == 0.0) return 0.0;
  const double hi = static_cast<double>(model.hidden) * static_cast<double>(model.intermediate);
  const double flops = 2.0 * model.matrices() * hi * rows;
  const double experts = static_cast<double>(work.active_experts) + (work.home_tokens > 0 ? shared : 0.0);
  const double bytes = model.matrices() * hi * element_bytes(model.weights) * experts +
                       rows * static_cast<double>(in_row_bytes + out_row_bytes);
  return std::max(flops / gemm_flops_per_second(model.weights, hw), bytes / (hw.hbm_gbps * 1e9));
}

}  // namespace moe::sim::deploy

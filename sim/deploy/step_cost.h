// The step-time model of one rank: its all-to-all phases from link bandwidth and latency, its expert GEMMs as
// a roofline over its experts' rows. Pure functions of counts; the accounting (sim/deploy/accounting.h)
// takes, per phase, the slowest rank's time, and the step is the sum of the phases:
//   step = max_r dispatch(r) + max_r gemm(r) + max_r combine(r).
#pragma once

#include <cstdint>

#include "sim/deploy/deploy_config.h"
#include "sim/deploy/hardware.h"

namespace moe::sim::deploy {

// The rows one rank sends and receives over each link class in one all-to-all phase (rows that stay on the
// rank use no link and are not counted).
struct LinkRows {
  int64_t nvlink_send = 0, nvlink_recv = 0, rdma_send = 0, rdma_recv = 0;
};

// Seconds of an all-to-all phase at one rank moving rows of `row_bytes`: every link class works at once, each
// taking max(sent, received) x row_bytes / its one-way bandwidth plus one hop of its latency; the phase adds
// the fixed a2a_base_us. A rank without link traffic takes 0.
//   a2a(r) = base + max over classes c with traffic of (max(send_c, recv_c) row_bytes / bw_c + latency_c)
double a2a_seconds(const LinkRows& rows, int64_t row_bytes, const HardwareProfile& hw);

// The expert work of one rank in a step.
struct RankWork {
  int64_t rows = 0;            // routed (token, expert) rows it computes
  int64_t active_experts = 0;  // distinct experts among them (each one's weights are read once)
  int64_t home_tokens = 0;     // its own tokens, which its shared experts compute
};

// The tensor-core rate the expert GEMMs of `weights` run at, FLOP/s: FP8's for FP8 weights, FP4's for MXFP4
// where the GPU has one (else FP8's, else BF16's), BF16's otherwise.
double gemm_flops_per_second(Dtype weights, const HardwareProfile& hw);

// Seconds of one rank's expert GEMMs, a roofline over all of them at once (one grouped GEMM):
//   flops = 2 x matrices x H x I x (rows + shared x home_tokens)
//   bytes = matrices x H x I x weight_bytes x (active_experts + shared [if home_tokens > 0])
//           + (rows + shared x home_tokens) x (in_row_bytes + out_row_bytes)
//   gemm  = max(flops / rate, bytes / HBM bandwidth)
// in_row_bytes / out_row_bytes: a dispatched row read, a combined row written.
double gemm_seconds(const RankWork& work, const ModelShape& model, int64_t in_row_bytes,
                    int64_t out_row_bytes, const HardwareProfile& hw);

}  // namespace moe::sim::deploy

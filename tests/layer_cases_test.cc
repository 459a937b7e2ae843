// The backend harness, in the style of ggml's test-backend-ops: one table of layer cases
// (tests/support/layer_cases.h) run on every backend present - the CPU layer always, the CUDA layer when this
// build has it and a device is there, the expert-parallel layer when built as layer_cases_mpi_test and run
// under mpirun (1, 2, 4 ranks). Accuracy (relative error against the float64 reference) and determinism
// (exact bits) are separate suites and separate ctest entries:
//   LayerCaseAccuracy      every case: per-row relative error of the case's bound against the float64
//   reference
//                          of the backend's own plan; the plan's integers equal the CPU planner's
//   LayerCaseInvariance    cases that promise invariance: a probe alone vs co-batched with strangers in
//   shuffled
//                          order, batch-of-1 vs slices of batch-N (N up to 512), repeated runs, 1 vs 2
//                          threads
//   LayerCaseChunking      cases that promise chunking invariance: a prompt in one call equals the same
//   prompt
//                          chunked over calls (with strangers in every call)
//   LayerCaseCounterCheck  greedy dispatch with invariant kernels: strangers DO change a probe's bits
//   LayerCaseCrossBackend  backends that promise the CPU layer's bits (expert parallelism): equal bits
#include "tests/support/layer_cases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "moe/layer/moe_layer.h"
#include "tests/support/layer_fixtures.h"
#include "tests/support/layer_probe.h"
#include "tests/support/layer_reference.h"
#include "tests/support/layer_runner.h"

#if MOE_LAYER_CASES_CUDA
#include "base/cuda/device.h"
#include "moe/cuda/cuda_moe_layer.h"
#endif
#if MOE_LAYER_CASES_MPI
#include <mpi.h>

#include "moe/parallel/expert_parallel_layer.h"
#include "moe/parallel/mpi_communicator.h"
#include "tests/support/ep_fixtures.h"
#include "tests/support/mpi_gtest.h"
#endif

namespace moe::testing {
namespace {

// ---- Backends ---------------------------------------------------------------------------------------------

#if MOE_LAYER_CASES_MPI
parallel::Communicator* g_comm = nullptr;  // MPI_COMM_WORLD, set by main()

// Every rank forwards its own rows of the global batch (an uneven split that depends on the batch, one rank
// possibly empty), then the ranks all-gather y so that every rank checks the whole output.
class ExpertParallelRunner final : public LayerRunner {
 public:
  ExpertParallelRunner(const MoELayerConfig& config, std::shared_ptr<const io::LayerWeights> weights)
      : layer_(config, std::move(weights), *g_comm, std::nullopt, Options()) {}
  std::vector<float> forward(const Batch& b, RoutingState* state) override {
    parallel::Communicator& comm = *g_comm;
    const int64_t T = static_cast<int64_t>(b.meta.size()), d = layer_.hidden();
    uint64_t key = static_cast<uint64_t>(T);
    for (const TokenMeta& m : b.meta) key = mix64(key ^ m.request_id * 31 ^ m.position);
    const std::vector<int64_t> offsets = SplitRows(T, comm.size(), key, key >> 7);
    const int64_t first = offsets[comm.rank()], rows = offsets[comm.rank() + 1] - first;
    std::vector<float> y_local(static_cast<size_t>(std::max<int64_t>(rows, 1) * d));
    layer_.forward(b.x.data() + first * d, static_cast<int>(rows),
                   std::span<const TokenMeta>(b.meta.data() + first, static_cast<size_t>(rows)),
                   y_local.data(), state);
    std::vector<size_t> bytes(comm.size());
    for (int r = 0; r < comm.size(); ++r)
      bytes[r] = static_cast<size_t>((offsets[r + 1] - offsets[r]) * d) * 4;
    std::vector<float> y(b.x.size());
    comm.all_gather_v(y_local.data(), bytes[comm.rank()], y.data(), bytes);
    return y;
  }
  Layer& layer() override { return layer_; }

 private:
  static parallel::ExpertParallelOptions Options() {
    parallel::ExpertParallelOptions o;
    o.verify_plan = true;  // every rank's plan equals rank 0's
    return o;
  }
  parallel::ExpertParallelLayer layer_;
};
#endif

std::vector<Backend> harness_backends() {
  std::vector<Backend> out;
#if MOE_LAYER_CASES_MPI
  Backend ep;
  ep.name = "ep";
  ep.why_unavailable = [] { return std::string(); };
  ep.make = [](const MoELayerConfig& c, std::shared_ptr<const io::LayerWeights> w) {
    return std::unique_ptr<LayerRunner>(new ExpertParallelRunner(c, std::move(w)));
  };
  ep.bitwise_equal_to_cpu = true;
  ep.mixes = 30;
  out.push_back(ep);
#else
  Backend cpu;
  cpu.name = "cpu";
  cpu.why_unavailable = [] { return std::string(); };
  cpu.make = [](const MoELayerConfig& c, std::shared_ptr<const io::LayerWeights> w) {
    return std::unique_ptr<LayerRunner>(new SingleProcessRunner(std::make_unique<MoELayer>(c, std::move(w))));
  };
  out.push_back(cpu);
#if MOE_LAYER_CASES_CUDA
  Backend gpu;
  gpu.name = "cuda";
  gpu.why_unavailable = [] {
    std::string why;
    return cuda::device_available(&why) ? std::string() : "no usable CUDA device: " + why;
  };
  gpu.bf16_compute = false;
  gpu.make = [](const MoELayerConfig& c, std::shared_ptr<const io::LayerWeights> w) {
    return std::unique_ptr<LayerRunner>(
        new SingleProcessRunner(std::make_unique<CudaMoELayer>(c, std::move(w))));
  };
  out.push_back(gpu);
#endif
#endif
  return out;
}

// ---- Parameters -------------------------------------------------------------------------------------------

struct Param {
  Backend backend;
  LayerCase c;
};

std::vector<Param> params(bool (*keep)(const Backend&, const LayerCase&)) {
  std::vector<Param> out;
  for (const Backend& b : harness_backends()) {
    for (const LayerCase& c : layer_cases()) {
      if (keep(b, c)) out.push_back({b, c});
    }
  }
  return out;
}

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.backend.name << "_" << p.c.name;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return info.param.backend.name + "_" + info.param.c.name;
}

class LayerCaseTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const std::string why = GetParam().backend.why_unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    if (lc().config.compute != kernels::ComputePrecision::kF32 && !GetParam().backend.bf16_compute) {
      GTEST_SKIP() << "the " << GetParam().backend.name
                   << " layer refuses bf16 compute (not implemented there; it throws a clear error)";
    }
  }
  const LayerCase& lc() const { return GetParam().c; }
  // Random weights of the case's shape, or its family checkpoint's layer (the same for every seed).
  std::shared_ptr<const io::LayerWeights> weights(uint64_t seed = 3) const {
    if (!lc().family.empty()) {
      const WrittenFamily& f = written_family(lc().family);
      return std::make_shared<const io::LayerWeights>(
          io::load_pretrained_layer(f.checkpoint.dir, f.checkpoint.layer, lc().storage));
    }
    return RandomWeights(lc().shape, lc().storage, seed);
  }
  std::unique_ptr<LayerRunner> runner(const MoELayerConfig& config,
                                      std::shared_ptr<const io::LayerWeights> w) const {
    return GetParam().backend.make(config, std::move(w));
  }
};

// A workload of six requests over `calls` forward calls, 1..23 rows of each per call: rows[c][r] is request
// r's row count in call c; each call continues every request's positions where the previous call left them.
constexpr int kCallRequests = 6;
uint64_t CallRequestId(int r) {
  return 10 + static_cast<uint64_t>(r) * 13;
}
std::vector<std::vector<uint32_t>> CallRows(int calls, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint32_t>> rows(calls, std::vector<uint32_t>(kCallRequests));
  for (int c = 0; c < calls; ++c) {
    for (int r = 0; r < kCallRequests; ++r) rows[c][r] = 1 + static_cast<uint32_t>(rng() % 23);
  }
  return rows;
}

// Call `call` of that workload, rows shuffled.
Batch CallBatch(int call, int64_t hidden, uint64_t seed) {
  const std::vector<std::vector<uint32_t>> rows = CallRows(call + 1, seed);
  std::vector<TokenMeta> meta;
  for (int r = 0; r < kCallRequests; ++r) {
    uint32_t next = 0;
    for (int c = 0; c < call; ++c) next += rows[c][r];
    for (uint32_t i = 0; i < rows[call][r]; ++i) meta.push_back({CallRequestId(r), next + i});
  }
  std::mt19937_64 order(seed + 1000 + static_cast<uint64_t>(call));
  std::shuffle(meta.begin(), meta.end(), order);
  return MakeBatch(meta, hidden);
}

// Under sequence scope, admits the workload's requests into `states` before its first call, as a serving
// engine does: each with a prompt of all its rows over the `calls` calls but the last 3 (at least 1), so that
// the last call ends in decode rows (positions at and past the prompt length). Other scopes: nothing.
void AdmitCallRequests(const MoELayerConfig& config, int calls, uint64_t seed,
                       std::initializer_list<RoutingState*> states) {
  if (!rules::pools_prompt(config.policy)) return;
  const std::vector<std::vector<uint32_t>> rows = CallRows(calls, seed);
  for (int r = 0; r < kCallRequests; ++r) {
    uint32_t total = 0;
    for (int c = 0; c < calls; ++c) total += rows[c][r];
    for (RoutingState* state : states) state->admit(CallRequestId(r), std::max<uint32_t>(1, total - 3));
  }
}

// One trial of the probe experiment: a probe request of 1..20 tokens alone, and the same probe co-batched
// with 1..10 strangers of 1..40 tokens (ids that are not the probe's or each other's), rows shuffled.
struct ProbeTrial {
  uint64_t probe = 0;
  Batch alone, mixed;
};

ProbeTrial MakeProbeTrial(std::mt19937_64& rng, int64_t hidden) {
  ProbeTrial t;
  t.probe = 1000 + rng() % 100;
  const int probe_len = 1 + static_cast<int>(rng() % 20);
  std::vector<TokenMeta> meta;
  for (int i = 0; i < probe_len; ++i) meta.push_back({t.probe, static_cast<uint32_t>(i)});
  t.alone = MakeBatch(meta, hidden);
  const int strangers = 1 + static_cast<int>(rng() % 10);
  for (int s = 0; s < strangers; ++s) {
    const uint64_t id = rng() % 900;  // never the probe's id
    const int len = 1 + static_cast<int>(rng() % 40);
    if (std::any_of(meta.begin(), meta.end(), [&](const TokenMeta& m) { return m.request_id == id; }))
      continue;
    for (int i = 0; i < len; ++i) meta.push_back({id, static_cast<uint32_t>(i)});
  }
  std::shuffle(meta.begin(), meta.end(), rng);
  t.mixed = MakeBatch(meta, hidden);
  return t;
}

// ---- Accuracy ---------------------------------------------------------------------------------------------

using LayerCaseAccuracy = LayerCaseTest;

TEST_P(LayerCaseAccuracy, MatchesFloat64ReferenceAndTheCpuPlan) {
  const LayerCase& c = lc();
  auto w = weights();
  auto run = runner(c.config, w);
  MoELayerConfig ref_config = c.config;
  ref_config.max_tokens = 256;
  MoELayer cpu(ref_config, w);
  // The plans are compared where the two backends compute the same logits: the gate is invariant, or both
  // run it on the same rows (a single process).
  const bool same_logits =
      c.config.gate_kernel == kernels::KernelKind::kInvariant || !GetParam().backend.bitwise_equal_to_cpu;
  RoutingState state(c.shape.num_experts), cpu_state(c.shape.num_experts);
  AdmitCallRequests(c.config, c.calls, 41, {&state, &cpu_state});
  int64_t kept = 0, undetermined = 0;
  double worst = 0.0, worst_as_rounded = 0.0;
  for (int call = 0; call < c.calls; ++call) {
    const Batch b = CallBatch(call, c.shape.hidden, 41);
    const int T = static_cast<int>(b.meta.size());
    const std::vector<float> y = run->forward(b, &state);
    std::vector<float> y_cpu(b.x.size());
    cpu.forward(b.x.data(), T, b.meta, y_cpu.data(), &cpu_state);
    const DispatchPlan& plan = run->layer().last_plan();
    const DispatchPlan& want = cpu.last_plan();
    if (same_logits) {
      EXPECT_EQ(plan.pair_expert, want.pair_expert) << "call " << call;
      EXPECT_EQ(plan.pair_slot, want.pair_slot) << "call " << call;
      EXPECT_EQ(plan.pair_status, want.pair_status) << "call " << call;
      EXPECT_EQ(plan.expert_offsets, want.expert_offsets) << "call " << call;
      EXPECT_EQ(plan.expert_load, want.expert_load) << "call " << call;
    }
    // bf16 compute: against the admissible rounding of h nearest to y (layer_reference.h).
    std::vector<HiddenChoice> choices;
    const std::vector<double> ref = Reference(*w, run->layer().config(), plan, b.x, T, &choices);
    const double err =
        MaxRowRelativeError(y, BestAdmissibleReference(y, ref, choices, c.shape.hidden), T, c.shape.hidden);
    EXPECT_LE(err, c.tolerance) << "call " << call;
    worst = std::max(worst, err);
    worst_as_rounded = std::max(worst_as_rounded, MaxRowRelativeError(y, ref, T, c.shape.hidden));
    undetermined += static_cast<int64_t>(choices.size());
    kept += plan.num_kept;
  }
  std::printf("  %s: max row relative error %.3g (bound %.3g)", c.name.c_str(), worst, c.tolerance);
  if (c.config.compute == kernels::ComputePrecision::kBF16) {
    std::printf("; %lld elements of h undetermined, %.3g against the reference's own rounding of h",
                static_cast<long long>(undetermined), worst_as_rounded);
  }
  std::printf("\n");
  EXPECT_GT(kept, 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerCaseAccuracy,
                         ::testing::ValuesIn(params([](const Backend&, const LayerCase&) { return true; })),
                         ParamName);

// ---- Invariance (exact bits) ------------------------------------------------------------------------------

using LayerCaseInvariance = LayerCaseTest;

// A probe request alone, then co-batched with random stranger mixes in shuffled row order: its rows' bits.
TEST_P(LayerCaseInvariance, ProbeIgnoresStrangersAndRowOrder) {
  const LayerCase& c = lc();
  auto run = runner(c.config, weights(21));
  const int64_t d = c.shape.hidden;
  std::mt19937_64 rng(1);
  int changed = 0;
  int64_t drops_alone = 0;
  for (int trial = 0; trial < GetParam().backend.mixes; ++trial) {
    const ProbeTrial t = MakeProbeTrial(rng, d);
    const std::vector<float> reference = ProbeRows(t.alone, run->forward(t.alone), t.probe, d);
    drops_alone += run->layer().last_plan().num_dropped;
    if (!BitEqual(ProbeRows(t.mixed, run->forward(t.mixed), t.probe, d), reference)) ++changed;
  }
  EXPECT_EQ(changed, 0);
  if (c.config.policy.scope != CapacityScope::kNone) {
    EXPECT_GT(drops_alone, 0) << "capacity must bind for the property to mean anything";
  }
}

// N single-token requests: each row is its own request, so every row of batch-N equals that row alone.
TEST_P(LayerCaseInvariance, BatchOfOneEqualsSliceOfBatchN) {
  const LayerCase& c = lc();
  MoELayerConfig config = c.config;
  config.max_tokens = 512;
  auto run = runner(config, weights(24));
  const int64_t d = c.shape.hidden;
  for (int n : {1, 2, 7, 64, 255, 512}) {
    std::vector<TokenMeta> meta;
    for (int i = 0; i < n; ++i) meta.push_back({static_cast<uint64_t>(i * 7919 % 100003), 0});
    const Batch big = MakeBatch(meta, d);
    const std::vector<float> y = run->forward(big);
    for (int i = 0; i < n; i += std::max(1, n / 9)) {
      const std::vector<float> y1 = run->forward(MakeBatch({meta[i]}, d));
      ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + i * d, d * sizeof(float)))
          << "row " << i << " of batch " << n;
    }
  }
}

TEST_P(LayerCaseInvariance, RepeatedRunsAreBitIdentical) {
  const LayerCase& c = lc();
  MoELayerConfig config = c.config;
  config.max_tokens = 300;
  auto run = runner(config, weights(25));
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 300; ++i) meta.push_back({i % 11, i / 11});
  const Batch b = MakeBatch(meta, c.shape.hidden);
  const std::vector<float> first = run->forward(b);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(BitEqual(run->forward(b), first)) << "run " << r;
}

TEST_P(LayerCaseInvariance, ThreadCountDoesNotChangeBits) {
  const LayerCase& c = lc();
  auto w = weights(26);
  MoELayerConfig one = c.config, two = c.config;
  one.num_threads = 1;
  two.num_threads = 2;
  auto a = runner(one, w);
  auto b = runner(two, w);
  for (int call = 0; call < 3; ++call) {
    const Batch batch = CallBatch(0, c.shape.hidden, 50 + static_cast<uint64_t>(call));
    EXPECT_TRUE(BitEqual(a->forward(batch), b->forward(batch))) << "batch " << call;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerCaseInvariance,
                         ::testing::ValuesIn(params([](const Backend&, const LayerCase& c) {
                           return promises_invariance(c.config);
                         })),
                         ParamName);

// A request's prompt in one forward pass followed by its decode rows, or the prompt chunked over several
// passes and then one decode row per pass, with its routing state carried (and strangers in every pass's
// batch): the same bits. Under sequence scope every request is admitted with its prompt length first.
using LayerCaseChunking = LayerCaseTest;

TEST_P(LayerCaseChunking, ChunkedPromptEqualsTheWholePrompt) {
  const LayerCase& c = lc();
  auto run = runner(c.config, weights(27));
  const int64_t d = c.shape.hidden;
  const bool sequence = rules::pools_prompt(c.config.policy);
  constexpr uint64_t kProbe = 4242;
  constexpr uint32_t kPrompt = 40, kLen = 46;  // then 6 decode rows
  std::vector<TokenMeta> whole;
  for (uint32_t p = 0; p < kLen; ++p) whole.push_back({kProbe, p});
  RoutingState whole_state(c.shape.num_experts, c.config.router.top_k);
  if (sequence) whole_state.admit(kProbe, kPrompt);
  const Batch all = MakeBatch(whole, d);
  const std::vector<float> reference = ProbeRows(all, run->forward(all, &whole_state), kProbe, d);
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 5; ++trial) {
    RoutingState state(c.shape.num_experts, c.config.router.top_k);
    if (sequence) state.admit(kProbe, kPrompt);
    std::vector<float> chunked;
    uint32_t at = 0;
    int call = 0;
    while (at < kLen) {
      const uint32_t n =
          at < kPrompt ? std::min<uint32_t>(kPrompt - at, 1 + static_cast<uint32_t>(rng() % 12)) : 1;
      std::vector<TokenMeta> meta;
      for (uint32_t p = at; p < at + n; ++p) meta.push_back({kProbe, p});
      // Strangers: fresh requests in every call (their own positions from 0), admitted with their prompt
      // length under sequence scope (a third of them go on to decode rows in the same call).
      for (int s = 0; s < 3; ++s) {
        const uint64_t id =
            100000 + static_cast<uint64_t>(trial) * 1000 + static_cast<uint64_t>(call) * 10 + s;
        const uint32_t len = 1 + static_cast<uint32_t>(rng() % 9);
        if (sequence) state.admit(id, s == 0 ? std::max<uint32_t>(1, len / 2) : len);
        for (uint32_t p = 0; p < len; ++p) meta.push_back({id, p});
      }
      std::shuffle(meta.begin(), meta.end(), rng);
      const Batch b = MakeBatch(meta, d);
      const std::vector<float> rows = ProbeRows(b, run->forward(b, &state), kProbe, d);
      chunked.insert(chunked.end(), rows.begin(), rows.end());
      at += n;
      ++call;
    }
    EXPECT_TRUE(BitEqual(chunked, reference)) << "trial " << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerCaseChunking,
                         ::testing::ValuesIn(params([](const Backend&, const LayerCase& c) {
                           return promises_chunking_invariance(c.config);
                         })),
                         ParamName);

// ---- The counter-check: greedy dispatch lets strangers change a probe's bits
// -------------------------------

using LayerCaseCounterCheck = LayerCaseTest;

TEST_P(LayerCaseCounterCheck, GreedyDispatchChangesTheProbeUnderCapacityPressure) {
  const LayerCase& c = lc();
  auto run = runner(c.config, weights(26));
  const int64_t d = c.shape.hidden;
  std::mt19937_64 rng(5);
  int changed = 0;
  const int trials = GetParam().backend.mixes;
  for (int trial = 0; trial < trials; ++trial) {
    const ProbeTrial t = MakeProbeTrial(rng, d);
    const std::vector<float> reference = ProbeRows(t.alone, run->forward(t.alone), t.probe, d);
    if (!BitEqual(ProbeRows(t.mixed, run->forward(t.mixed), t.probe, d), reference)) ++changed;
  }
  EXPECT_GT(changed, trials / 10) << "greedy dispatch should let strangers change the probe's output";
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerCaseCounterCheck,
                         ::testing::ValuesIn(params([](const Backend&, const LayerCase& c) {
                           return is_greedy_dispatch_counter_check(c);
                         })),
                         ParamName);

// ---- Cross-backend bit equality --------------------------------------------------------------------------

using LayerCaseCrossBackend = LayerCaseTest;

// Invariant kernels (any dispatch, greedy too: the global arrival order is rank-major): every backend that
// promises it gives the single-process CPU layer's bits on the same global batches, across causal calls too.
TEST_P(LayerCaseCrossBackend, BitEqualToTheCpuLayer) {
  const LayerCase& c = lc();
  auto w = weights(77);
  auto run = runner(c.config, w);
  MoELayerConfig ref_config = c.config;
  ref_config.max_tokens = 256;
  MoELayer cpu(ref_config, w);
  int64_t drops = 0;
  for (uint64_t seed : {1, 2, 3}) {
    RoutingState state(c.shape.num_experts), cpu_state(c.shape.num_experts);
    AdmitCallRequests(c.config, std::max(c.calls, 1), 60 + seed, {&state, &cpu_state});
    for (int call = 0; call < std::max(c.calls, 1); ++call) {
      const Batch b = CallBatch(call, c.shape.hidden, 60 + seed);
      std::vector<float> y_cpu(b.x.size());
      cpu.forward(b.x.data(), static_cast<int>(b.meta.size()), b.meta, y_cpu.data(), &cpu_state);
      EXPECT_TRUE(BitEqual(run->forward(b, &state), y_cpu)) << "batch " << seed << " call " << call;
      drops += cpu.last_plan().num_dropped;
    }
  }
  if (c.config.policy.scope != CapacityScope::kNone) {
    EXPECT_GT(drops, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerCaseCrossBackend,
                         ::testing::ValuesIn(params([](const Backend& b, const LayerCase& c) {
                           return b.bitwise_equal_to_cpu &&
                                  c.config.expert_kernel == kernels::KernelKind::kInvariant &&
                                  c.config.gate_kernel == kernels::KernelKind::kInvariant;
                         })),
                         ParamName);

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LayerCaseCrossBackend);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LayerCaseChunking);

}  // namespace
}  // namespace moe::testing

#if MOE_LAYER_CASES_MPI

int main(int argc, char** argv) {
  moe::parallel::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  moe::parallel::CommOptions options;
  options.timeout = std::chrono::seconds(60);
  moe::parallel::MpiCommunicator comm(MPI_COMM_WORLD, options);
  moe::testing::g_comm = &comm;
  return moe::testing::RunAllTestsOnEveryRank();
}
#endif

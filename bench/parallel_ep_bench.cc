// Expert-parallel layer step under mpirun: where the time goes and how many bytes move.
//
//   mpirun -np N build/bin/parallel_ep_bench [--hidden 1024] [--ff 1408] [--experts 16] [--top-k 2]
//       [--tokens 256] [--steps 20] [--warmup 3] [--preset deterministic|greedy] [--threads 1] [--cf 1.25]
//       [--global-tokens G] [--markdown-header]
//
// A plain program with its own timing (Google Benchmark does not know about ranks). Every rank routes
// --tokens tokens of its own (weak scaling: the global batch is N * tokens), or G / N of --global-tokens G
// (strong scaling), in requests of 64 tokens. With one rank, a single-process MoELayer on the same batch is
// timed too (the row "MoELayer"), which prices the expert-parallel machinery itself.
// Before each step all ranks meet at a barrier; the step time is the slowest rank's forward(). Per phase
// (ExpertParallelStepStats), the mean over steps of the slowest rank's time is printed; waiting for a
// slower peer shows up in the phase whose collective waits (mostly "plan": its first collective is where
// the ranks meet).
//
// Bytes: hidden rows travel as fp32. The minimum a token must move is hidden * 4 * k bytes each way (its k
// pairs to their experts and back, if every expert is remote); the measured figure counts the rows of kept
// pairs that this rank sent (all destinations, and other ranks only). Metadata is the all-gather of the
// routing records (record_bytes per token, every rank receives all of them).
// Prints one markdown table row (rank 0); --markdown-header prints the header first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/parallel/expert_parallel_layer.h"
#include "moe/parallel/mpi_communicator.h"

namespace {

struct Args {
  int64_t hidden = 1024;
  int64_t ff = 1408;
  int experts = 16;
  int top_k = 2;
  int tokens = 256;
  int steps = 20;
  int warmup = 3;
  std::string preset = "deterministic";
  int threads = 1;
  double cf = 1.25;
  int global_tokens = 0;
  bool header = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
      return argv[++i];
    };
    if (k == "--hidden")
      a.hidden = std::stoll(next());
    else if (k == "--ff")
      a.ff = std::stoll(next());
    else if (k == "--experts")
      a.experts = std::stoi(next());
    else if (k == "--top-k")
      a.top_k = std::stoi(next());
    else if (k == "--tokens")
      a.tokens = std::stoi(next());
    else if (k == "--steps")
      a.steps = std::stoi(next());
    else if (k == "--warmup")
      a.warmup = std::stoi(next());
    else if (k == "--preset")
      a.preset = next();
    else if (k == "--threads")
      a.threads = std::stoi(next());
    else if (k == "--cf")
      a.cf = std::stod(next());
    else if (k == "--global-tokens")
      a.global_tokens = std::stoi(next());
    else if (k == "--markdown-header")
      a.header = true;
    else
      throw std::invalid_argument("unknown argument " + k);
  }
  return a;
}

// Phase times of one step on one rank: route, metadata, plan, dispatch, experts, return, shared, combine,
// total.
constexpr int kPhases = 9;

}  // namespace

int main(int argc, char** argv) {
  using namespace moe;
  parallel::MpiSession session(&argc, &argv);
  parallel::MpiCommunicator comm(MPI_COMM_WORLD);
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const std::exception& e) {
    if (comm.rank() == 0) std::fprintf(stderr, "parallel_ep_bench: %s\n", e.what());
    return 2;
  }
  const int P = comm.size(), me = comm.rank();
  if (args.global_tokens > 0) {
    if (args.global_tokens % P != 0) {
      if (me == 0)
        std::fprintf(stderr, "parallel_ep_bench: --global-tokens must be a multiple of the rank count\n");
      return 2;
    }
    args.tokens = args.global_tokens / P;
  }

  io::LayerShape shape;
  shape.hidden = args.hidden;
  shape.expert_ff = args.ff;
  shape.num_experts = args.experts;
  auto weights = std::make_shared<const io::LayerWeights>(io::random_layer(shape, kernels::DType::kF32, 7));
  MoELayerConfig config = MoELayerConfig::preset(args.preset, io::Architecture::kMixtral);
  config.router.num_experts = args.experts;
  config.router.top_k = args.top_k;
  config.policy.capacity_factor = args.cf;
  config.num_threads = args.threads;
  config.max_tokens = args.tokens;
  parallel::ExpertParallelLayer layer(config, weights, comm);

  // This rank's tokens: requests of 64 tokens with ids unique across ranks; values uniform in [-1, 1).
  const int T = args.tokens;
  std::vector<float> x(static_cast<size_t>(T) * args.hidden), y(x.size());
  uint64_t h = 12345 + 977 * static_cast<uint64_t>(me);
  for (float& v : x) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(h >> 40) - (1ll << 23)) / static_cast<float>(1 << 23);
  }
  std::vector<TokenMeta> meta;
  for (int t = 0; t < T; ++t) {
    meta.push_back(
        {static_cast<uint64_t>(me) * 1000000 + static_cast<uint64_t>(t / 64), static_cast<uint32_t>(t % 64)});
  }

  std::vector<double> sums(kPhases, 0.0), mine(kPhases), all(static_cast<size_t>(kPhases) * P);
  const std::vector<size_t> bytes(P, kPhases * sizeof(double));
  for (int s = 0; s < args.warmup + args.steps; ++s) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    layer.forward(x.data(), T, meta, y.data());
    const double total =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const parallel::ExpertParallelStepStats& st = layer.last_step();
    mine = {st.route_ms,  st.metadata_ms, st.plan_ms,    st.dispatch_ms, st.experts_ms,
            st.return_ms, st.shared_ms,   st.combine_ms, total};
    comm.all_gather_v(mine.data(), kPhases * sizeof(double), all.data(), bytes);
    if (s < args.warmup) continue;
    for (int p = 0; p < kPhases; ++p) {
      double worst = 0;
      for (int r = 0; r < P; ++r) worst = std::max(worst, all[static_cast<size_t>(r) * kPhases + p]);
      sums[p] += worst;
    }
  }
  for (double& v : sums) v /= args.steps;

  // Bytes of the last step, summed over ranks.
  const parallel::ExpertParallelStepStats& st = layer.last_step();
  std::vector<size_t> rows(P), remote(P), meta_in(P);
  comm.all_gather_sizes(static_cast<size_t>(st.rows_sent), rows);
  comm.all_gather_sizes(static_cast<size_t>(st.rows_sent_remote), remote);
  comm.all_gather_sizes(static_cast<size_t>(st.metadata_bytes_received), meta_in);
  double rows_total = 0, remote_total = 0, meta_total = 0;
  for (int r = 0; r < P; ++r) {
    rows_total += static_cast<double>(rows[r]);
    remote_total += static_cast<double>(remote[r]);
    meta_total += static_cast<double>(meta_in[r]);
  }
  if (me == 0) {
    const double global_tokens = static_cast<double>(T) * P;
    const double row_bytes = static_cast<double>(args.hidden) * sizeof(float);
    const double min_per_token = row_bytes * args.top_k;
    const double sent_per_token = rows_total * row_bytes / global_tokens;
    const double remote_per_token = remote_total * row_bytes / global_tokens;
    const double meta_per_token = meta_total / global_tokens;  // all ranks' receipts per token
    const double payload = rows_total * row_bytes * 2;         // dispatch + return
    if (args.header) {
      std::printf(
          "| ranks | preset | T/rank | step ms | tokens/s | route | metadata | plan | dispatch a2a | experts "
          "|"
          " return a2a | shared + combine | B/token each way (all / remote / min) | metadata B/token |"
          " metadata / payload |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    std::printf(
        "| %d | %s | %d | %.1f | %.0f | %.2f | %.2f | %.2f | %.2f | %.1f | %.2f | %.2f | %.0f / %.0f / %.0f "
        "| "
        "%.0f (%zu x %d ranks) | %.4f |\n",
        P, args.preset.c_str(), T, sums[8], global_tokens / sums[8] * 1e3, sums[0], sums[1], sums[2], sums[3],
        sums[4], sums[5], sums[6] + sums[7], sent_per_token, remote_per_token, min_per_token, meta_per_token,
        layer.record_bytes(), P, meta_total / payload);
    if (P == 1) {
      // The same batch through a single-process MoELayer: what the expert-parallel machinery costs.
      MoELayer single(config, weights);
      std::vector<float> y_single(y.size());
      double total = 0;
      for (int s = 0; s < args.warmup + args.steps; ++s) {
        const auto start = std::chrono::steady_clock::now();
        single.forward(x.data(), T, meta, y_single.data());
        if (s >= args.warmup) {
          total +=
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        }
      }
      total /= args.steps;
      std::printf("| 1 (MoELayer) | %s | %d | %.1f | %.0f | | | | | | | | | | %s |\n", args.preset.c_str(), T,
                  total, T / total * 1e3,
                  std::memcmp(y.data(), y_single.data(), y.size() * sizeof(float)) == 0 ? "bits equal"
                                                                                        : "bits differ");
    }
    std::fflush(stdout);
  }
  return 0;
}

// Expert-parallel layer step under mpirun: where the time goes, how many bytes move, how the load spreads
// over the ranks, and how much memory each rank holds.
//
//   mpirun -np N build/bin/parallel_ep_bench [--hidden 1024] [--ff 1408] [--experts 16] [--top-k 2]
//       [--tokens 256] [--steps 20] [--warmup 3] [--preset deterministic|greedy] [--threads 1] [--cf 1.25]
//       [--global-tokens G] [--planning global|home] [--zipf S] [--redundant F] [--storage f32|bf16|fp8]
//       [--checkpoint DIR] [--mode step|balance|memory] [--markdown-header]
//
// A plain program with its own timing (Google Benchmark does not know about ranks). Every rank routes
// --tokens tokens of its own (weak scaling: the global batch is N * tokens), or G / N of --global-tokens G
// (strong scaling), in requests of 64 tokens that live on their rank. Before each step all ranks meet at a
// barrier; the step time is the slowest rank's forward(). Per phase (ExpertParallelStepStats), the mean over
// steps of the slowest rank's time is printed. Prints markdown table rows (rank 0); --markdown-header first
// prints the header of the mode's table.
//
// Modes:
//   step     time per phase, bytes: hidden rows (fp32) of kept pairs sent per token (all destinations, other
//            ranks only, and the minimum hidden * 4 * k), and the small exchanges per rank and step: the
//            sizes' all-gather, the routing records' all-gather (global planning) or the O(E) counts (home).
//            With one rank, a single-process MoELayer on the same batch is timed too ("MoELayer").
//   balance  --zipf S skews the routing (expert of popularity rank i gets a gate bias -S ln(i + 1); ranks
//            shuffled over the experts); the expert loads of the first step feed DeepSeek's EPLB (global
//            policy) with --redundant F * E extra slots (rounded to a multiple of N); the rows each rank
//            computes, max / mean over the ranks, with the contiguous placement and with EPLB's.
//   memory   the layer is read from --checkpoint DIR (a Mixtral-style safetensors directory that rank 0
//   writes
//            first if it has no config.json), each rank only its experts; the rank's resident memory
//            (/proc/self/status VmRSS, RssAnon, RssFile) before the layer, after building it and after the
//            steps, against the bytes of its part (its experts + the router gate) and its workspace.
//            --storage fp8 writes the experts as F8_E4M3 with 128 x 128 block scales (DeepSeek-V3's layout,
//            config.json's quantization_config) and holds them as stored: the quantized kernels' panels are
//            a copy of the part (anonymous memory) and the mapped file pages are only read while they are
//            made (clean page cache the kernel may reclaim).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/quant_formats.h"
#include "moe/io/pretrained.h"
#include "moe/parallel/eplb.h"
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
  std::string planning = "global";
  double zipf = 0.0;
  double redundant = 0.0;
  std::string storage = "f32";
  std::string checkpoint;
  std::string mode = "step";
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
    else if (k == "--planning")
      a.planning = next();
    else if (k == "--zipf")
      a.zipf = std::stod(next());
    else if (k == "--redundant")
      a.redundant = std::stod(next());
    else if (k == "--storage")
      a.storage = next();
    else if (k == "--checkpoint")
      a.checkpoint = next();
    else if (k == "--mode")
      a.mode = next();
    else if (k == "--markdown-header")
      a.header = true;
    else
      throw std::invalid_argument("unknown argument " + k);
  }
  if (a.mode != "step" && a.mode != "balance" && a.mode != "memory") {
    throw std::invalid_argument("--mode must be step, balance or memory");
  }
  if (a.storage != "f32" && a.storage != "bf16" && a.storage != "fp8")
    throw std::invalid_argument("--storage must be f32, bf16 or fp8");
  if (a.storage == "fp8" && a.mode != "memory")
    throw std::invalid_argument("--storage fp8 is for --mode memory (a checkpoint held as stored)");
  if (a.mode == "memory" && a.checkpoint.empty())
    throw std::invalid_argument("--mode memory needs --checkpoint");
  return a;
}

// Phase times of one step on one rank: route, metadata, plan, dispatch, experts, return, shared, combine,
// total.
constexpr int kPhases = 9;

// /proc/self/status fields in bytes: VmRSS, RssAnon, RssFile, VmHWM (the peak of VmRSS).
struct Rss {
  double total = 0, anon = 0, file = 0, peak = 0;
};
Rss read_rss() {
  Rss r;
  std::ifstream f("/proc/self/status");
  std::string key;
  double kb = 0;
  std::string unit;
  while (f >> key) {
    double* field = key == "VmRSS:"     ? &r.total
                    : key == "RssAnon:" ? &r.anon
                    : key == "RssFile:" ? &r.file
                    : key == "VmHWM:"   ? &r.peak
                                        : nullptr;
    if (field != nullptr) {
      f >> kb >> unit;
      *field = kb * 1024.0;
    } else {
      std::getline(f, unit);
    }
  }
  return r;
}

// A Mixtral-style checkpoint directory of any size (config.json + model.safetensors), written tensor by
// tensor without holding the layer: the F32 router gate, then each expert's w1, w3, w2 in `storage` (values
// uniform in +-1/sqrt(in), bf16 by truncation; FP8: e4m3 codes of value / s with one scale s = bound / 448
// per 128 x 128 block, written as "<name>_scale_inv" beside each matrix), so that a layer larger than this
// host's memory can be written.
void write_checkpoint(const std::filesystem::path& dir, const Args& a, moe::kernels::DType storage) {
  std::filesystem::create_directories(dir);
  const int64_t E = a.experts, d = a.hidden, ff = a.ff;
  const bool fp8 = storage == moe::kernels::DType::kFP8;
  const size_t es = fp8 ? 1 : moe::kernels::dtype_size(storage);
  const std::string dtype = fp8 ? "F8_E4M3" : storage == moe::kernels::DType::kBF16 ? "BF16" : "F32";
  constexpr int64_t kBlock = 128;
  // An entry is a matrix (the gate in F32, an expert in `dtype`) or an FP8 matrix's F32 block scales.
  struct Entry {
    std::string name;
    int64_t rows, cols;
    bool f32;
    float scale = 0;  // scales: every block's
  };
  std::vector<Entry> entries = {{"model.layers.0.block_sparse_moe.gate.weight", E, d, true}};
  for (int64_t e = 0; e < E; ++e) {
    const std::string base = "model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".";
    for (const auto& [name, rows, cols] :
         {std::tuple{"w1", ff, d}, std::tuple{"w3", ff, d}, std::tuple{"w2", d, ff}}) {
      entries.push_back({base + name + ".weight", rows, cols, false});
      if (fp8) {
        const float bound = 1.0f / std::sqrt(static_cast<float>(cols));
        entries.push_back({base + name + ".weight_scale_inv", (rows + kBlock - 1) / kBlock,
                           (cols + kBlock - 1) / kBlock, true, bound / 448.0f});
      }
    }
  }
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t offset = 0;
  for (const Entry& t : entries) {
    const uint64_t bytes = static_cast<uint64_t>(t.rows * t.cols) * (t.f32 ? 4 : es);
    header += ",\"" + t.name + "\":{\"dtype\":\"" + (t.f32 ? std::string("F32") : dtype) + "\",\"shape\":[" +
              std::to_string(t.rows) + "," + std::to_string(t.cols) + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), static_cast<std::streamsize>(n));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  std::vector<char> buf;
  for (const Entry& t : entries) {
    const size_t count = static_cast<size_t>(t.rows * t.cols), size = t.f32 ? 4 : es;
    buf.resize(count * size);
    if (t.scale > 0) {  // an FP8 matrix's block scales
      for (size_t i = 0; i < count; ++i) std::memcpy(buf.data() + i * 4, &t.scale, 4);
      out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
      continue;
    }
    const float bound = 1.0f / std::sqrt(static_cast<float>(t.cols));
    for (size_t i = 0; i < count; ++i) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      const float v = (static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f) * bound;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (size == 4) {
        std::memcpy(buf.data() + i * 4, &v, 4);
      } else if (fp8) {
        buf[i] = static_cast<char>(moe::kernels::f32_to_e4m3(v / (bound / 448.0f)));
      } else {
        const uint16_t top = static_cast<uint16_t>(bits >> 16);
        std::memcpy(buf.data() + i * 2, &top, 2);
      }
    }
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  out.close();
  std::ofstream(dir / "config.json")
      << "{\"model_type\": \"mixtral\", \"hidden_size\": " << d << ", \"intermediate_size\": " << ff
      << ", \"num_local_experts\": " << E << ", \"num_experts_per_tok\": " << a.top_k
      << ", \"num_hidden_layers\": 1, \"vocab_size\": 32, \"num_attention_heads\": 8, "
         "\"num_key_value_heads\": 8,"
         " \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-5, \"hidden_act\": \"silu\""
      << (fp8 ? ", \"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", "
                "\"weight_block_size\": [128, 128]}"
              : "")
      << "}";
}

double gb(double bytes) {
  return bytes / 1e9;
}

// The per-rank values of `v`, gathered (every rank calls).
std::vector<double> gather(moe::parallel::Communicator& comm, double v) {
  std::vector<double> all(comm.size());
  const std::vector<size_t> bytes(comm.size(), sizeof(double));
  comm.all_gather_v(&v, sizeof(double), all.data(), bytes);
  return all;
}

double max_of(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}
double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moe;
  parallel::MpiSession session(&argc, &argv);
  parallel::CommOptions comm_options;
  comm_options.timeout = std::chrono::hours(1);  // rank 0 may write a large checkpoint while the others wait
  parallel::MpiCommunicator comm(MPI_COMM_WORLD, comm_options);
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
  const kernels::DType storage = args.storage == "bf16"  ? kernels::DType::kBF16
                                 : args.storage == "fp8" ? kernels::DType::kFP8
                                                         : kernels::DType::kF32;
  const Rss rss_start = read_rss();

  io::LayerShape shape;
  shape.hidden = args.hidden;
  shape.expert_ff = args.ff;
  shape.num_experts = args.experts;
  MoELayerConfig config = MoELayerConfig::preset(args.preset, io::Architecture::kMixtral);
  config.router.num_experts = args.experts;
  config.router.top_k = args.top_k;
  config.policy.capacity_factor = args.cf;
  config.num_threads = args.threads;
  config.max_tokens = args.tokens;
  parallel::ExpertParallelOptions options;
  options.planning = parallel::parse_ep_planning(args.planning);

  // Zipf skew: the router gate's column 0 carries -S ln(popularity rank + 1), and every token's x[0] = 1.
  std::vector<int> popularity(args.experts);
  std::iota(popularity.begin(), popularity.end(), 0);
  std::shuffle(popularity.begin(), popularity.end(), std::mt19937_64(5));
  std::shared_ptr<const io::LayerWeights> weights;
  if (args.mode != "memory") {
    io::LayerWeights w = io::random_layer(shape, storage, 7);
    if (args.zipf > 0) {
      std::vector<float> gate(static_cast<const float*>(w.router_gate().data),
                              static_cast<const float*>(w.router_gate().data) + args.experts * args.hidden);
      for (int e = 0; e < args.experts; ++e) {
        gate[static_cast<size_t>(e) * args.hidden] =
            static_cast<float>(-args.zipf * std::log(popularity[e] + 1.0));
      }
      io::LayerViews views;
      views.router_gate =
          kernels::MatrixView{gate.data(), kernels::DType::kF32, args.experts, args.hidden, args.hidden};
      views.experts.assign(w.experts().begin(), w.experts().end());
      w = io::weights_from_views(shape, views, storage, io::Ownership::kCopy);
    }
    weights = std::make_shared<const io::LayerWeights>(std::move(w));
  } else if (me == 0 && !std::filesystem::exists(std::filesystem::path(args.checkpoint) / "config.json")) {
    write_checkpoint(args.checkpoint, args, storage);
  }
  comm.barrier();
  const Rss rss_before = read_rss();

  // This rank's tokens: requests of 64 tokens with ids unique across ranks; values uniform in [-1, 1).
  const int T = args.tokens;
  std::vector<float> x(static_cast<size_t>(T) * args.hidden), y(x.size());
  uint64_t h = 12345 + 977 * static_cast<uint64_t>(me);
  for (float& v : x) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(h >> 40) - (1ll << 23)) / static_cast<float>(1 << 23);
  }
  if (args.zipf > 0) {
    for (int t = 0; t < T; ++t) x[static_cast<size_t>(t) * args.hidden] = 1.0f;
  }
  std::vector<TokenMeta> meta;
  for (int t = 0; t < T; ++t) {
    meta.push_back(
        {static_cast<uint64_t>(me) * 1000000 + static_cast<uint64_t>(t / 64), static_cast<uint32_t>(t % 64)});
  }
  // The steps: per phase, the slowest rank's time. No routing state: each request's rows are its whole prompt
  // (sequence and prefix scopes) or start at position 0 (causal).
  auto run_steps = [&](parallel::ExpertParallelLayer& layer, std::vector<double>& sums,
                       std::vector<double>& rows) {
    sums.assign(kPhases, 0.0);
    rows.assign(P, 0.0);
    std::vector<double> mine(kPhases), all(static_cast<size_t>(kPhases) * P);
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
      const std::vector<double> computed = gather(comm, static_cast<double>(st.rows_computed));
      if (s < args.warmup) continue;
      for (int p = 0; p < kPhases; ++p) {
        double worst = 0;
        for (int r = 0; r < P; ++r) worst = std::max(worst, all[static_cast<size_t>(r) * kPhases + p]);
        sums[p] += worst / args.steps;
      }
      for (int r = 0; r < P; ++r) rows[r] += computed[r] / args.steps;
    }
  };

  if (args.mode == "memory") {
    // FP8 as stored (storage nullopt: a quantized checkpoint's default); f32 / bf16 as the file holds them.
    auto layer = parallel::ExpertParallelLayer::from_pretrained(
        args.checkpoint, 0, args.preset, comm, std::nullopt, options,
        storage == kernels::DType::kFP8 ? std::optional<kernels::DType>()
                                        : std::optional<kernels::DType>(storage));
    const Rss rss_built = read_rss();
    std::vector<double> sums, rows;
    run_steps(*layer, sums, rows);
    const Rss rss_after = read_rss();
    const io::LayerWeights& w = layer->weights();
    // An FP8 expert: one byte per weight and its fp32 block scales.
    const double fp8_scales = 4.0 * ((args.ff + 127) / 128) * ((args.hidden + 127) / 128) * 3.0;
    const double expert_bytes =
        storage == kernels::DType::kFP8
            ? 3.0 * static_cast<double>(args.hidden) * args.ff + fp8_scales
            : 3.0 * static_cast<double>(args.hidden) * args.ff * kernels::dtype_size(storage);
    const double part = static_cast<double>(w.held().list().size()) * expert_bytes +
                        static_cast<double>(args.experts) * args.hidden * 4.0;
    const double layer_bytes =
        args.experts * expert_bytes + static_cast<double>(args.experts) * args.hidden * 4.0;
    const double work = static_cast<double>(layer->workspace_bytes());
    const std::vector<double> d_built = gather(comm, rss_built.total - rss_before.total);
    const std::vector<double> d_after = gather(comm, rss_after.total - rss_before.total);
    const std::vector<double> file = gather(comm, rss_after.file - rss_before.file);
    const std::vector<double> anon = gather(comm, rss_after.anon - rss_before.anon);
    const std::vector<double> parts = gather(comm, part), works = gather(comm, work);
    const std::vector<double> totals = gather(comm, rss_after.total);
    const std::vector<double> peaks = gather(comm, rss_after.peak);
    if (me == 0) {
      if (args.header) {
        std::printf(
            "| ranks | layer GB | planning | storage | part GB (its experts + gate) | workspace GB | RSS "
            "delta "
            "after load GB | RSS delta after steps GB (file / anon) | RSS delta / (part + workspace) | "
            "process "
            "RSS GB (peak) | step ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
      }
      for (int r = 0; r < P; ++r) {
        std::printf(
            "| %d (rank %d) | %.2f | %s | %s | %.3f | %.3f | %.3f | %.3f (%.3f / %.3f) | %.3f | %.3f "
            "(%.3f) | %.1f |\n",
            P, r, gb(layer_bytes), args.planning.c_str(), args.storage.c_str(), gb(parts[r]), gb(works[r]),
            gb(d_built[r]), gb(d_after[r]), gb(file[r]), gb(anon[r]), d_after[r] / (parts[r] + works[r]),
            gb(totals[r]), gb(peaks[r]), sums[8]);
      }
      std::printf("<!-- process RSS at start %.3f GB (rank 0) -->\n", gb(rss_start.total));
      std::fflush(stdout);
    }
    return 0;
  }

  if (args.mode == "balance") {
    // The contiguous placement first; its first step's expert loads feed EPLB.
    parallel::ExpertParallelLayer plain(config, weights, comm, std::nullopt, options);
    MoEStats stats;
    plain.forward(x.data(), T, meta, y.data(), nullptr, &stats);
    std::vector<float> load(args.experts, 0.0f);
    for (int e = 0; e < args.experts; ++e) {
      const std::vector<double> per_rank =
          gather(comm, plain.plans_locally() || me == 0 ? stats.expert_load[e] : 0);
      load[e] = static_cast<float>(std::accumulate(per_rank.begin(), per_rank.end(), 0.0));
    }
    int slots = args.experts + static_cast<int>(std::lround(args.redundant * args.experts));
    slots = (slots + P - 1) / P * P;
    const parallel::ExpertReplication replication = parallel::eplb::rebalance_global(load, slots, P);
    const parallel::ExpertPlacement eplb = parallel::ExpertPlacement::from_replication(replication);
    parallel::ExpertParallelLayer balanced(config, weights, comm, eplb, options);
    std::vector<double> sums_plain, rows_plain, sums_eplb, rows_eplb;
    run_steps(plain, sums_plain, rows_plain);
    run_steps(balanced, sums_eplb, rows_eplb);
    const std::vector<double> model_eplb = parallel::eplb::gpu_loads(load, replication);
    if (me == 0) {
      double max_load = 0, sum_load = 0;
      for (float l : load) {
        max_load = std::max<double>(max_load, l);
        sum_load += l;
      }
      if (args.header) {
        std::printf(
            "| ranks | zipf s | hottest expert's share | placement | slots / rank | rows per rank max / mean "
            "(measured) | EPLB's model max / mean | step ms | experts ms (slowest rank) |\n"
            "|---|---|---|---|---|---|---|---|---|\n");
      }
      std::printf("| %d | %.2f | %.1f %% | contiguous | %d | %.3f | - | %.1f | %.1f |\n", P, args.zipf,
                  100.0 * max_load / sum_load, (args.experts + P - 1) / P,
                  max_of(rows_plain) / mean_of(rows_plain), sums_plain[8], sums_plain[4]);
      std::printf("| %d | %.2f | %.1f %% | EPLB global, %d redundant | %d | %.3f | %.3f | %.1f | %.1f |\n", P,
                  args.zipf, 100.0 * max_load / sum_load, slots - args.experts, slots / P,
                  max_of(rows_eplb) / mean_of(rows_eplb), parallel::eplb::imbalance(model_eplb), sums_eplb[8],
                  sums_eplb[4]);
      std::fflush(stdout);
    }
    return 0;
  }

  parallel::ExpertParallelLayer layer(config, weights, comm, std::nullopt, options);
  std::vector<double> sums, rows;
  run_steps(layer, sums, rows);

  // Bytes of the last step, summed (rows, metadata) or per rank (small exchanges) over ranks.
  const parallel::ExpertParallelStepStats& st = layer.last_step();
  const std::vector<double> rows_sent = gather(comm, static_cast<double>(st.rows_sent));
  const std::vector<double> remote = gather(comm, static_cast<double>(st.rows_sent_remote));
  const std::vector<double> small = gather(
      comm, static_cast<double>(st.size_bytes_sent + st.size_bytes_received + st.metadata_bytes_sent +
                                st.metadata_bytes_received + st.count_bytes_sent + st.count_bytes_received));
  if (me == 0) {
    const double global_tokens = static_cast<double>(T) * P;
    const double row_bytes = static_cast<double>(args.hidden) * sizeof(float);
    const double min_per_token = row_bytes * args.top_k;
    const double rows_total = std::accumulate(rows_sent.begin(), rows_sent.end(), 0.0);
    const double remote_total = std::accumulate(remote.begin(), remote.end(), 0.0);
    const double sent_per_token = rows_total * row_bytes / global_tokens;
    const double remote_per_token = remote_total * row_bytes / global_tokens;
    const double payload_per_rank = rows_total * row_bytes * 2 / P;  // dispatch + return, sent + received
    if (args.header) {
      std::printf(
          "| ranks | preset | planning | T/rank | step ms | tokens/s | route | metadata | plan | dispatch "
          "a2a | "
          "experts | return a2a | shared + combine | B/token each way (all / remote / min) | small exchanges "
          "B per "
          "rank per step (sent + received) | small / payload |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    std::printf(
        "| %d | %s | %s%s | %d | %.1f | %.0f | %.2f | %.2f | %.2f | %.2f | %.1f | %.2f | %.2f | %.0f / %.0f "
        "/ %.0f "
        "| %.0f | %.5f |\n",
        P, args.preset.c_str(), args.planning.c_str(),
        args.planning == "home" && !layer.plans_locally() ? " (gathers: the policy needs the batch)" : "", T,
        sums[8], global_tokens / sums[8] * 1e3, sums[0], sums[1], sums[2], sums[3], sums[4], sums[5],
        sums[6] + sums[7], sent_per_token, remote_per_token, min_per_token, max_of(small),
        max_of(small) / payload_per_rank);
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
      std::printf("| 1 (MoELayer) | %s | | %d | %.1f | %.0f | | | | | | | | | | %s |\n", args.preset.c_str(),
                  T, total, T / total * 1e3,
                  std::memcmp(y.data(), y_single.data(), y.size() * sizeof(float)) == 0 ? "bits equal"
                                                                                        : "bits differ");
    }
    std::fflush(stdout);
  }
  return 0;
}

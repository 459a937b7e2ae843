// ggml_moe_peer: llama.cpp's MoE FFN as a ggml graph on ggml's CPU backend, timed the way layer_bench times
// our layer (bench/layer_bench.cc), for bench/ggml_peer.sh. Built by that script against a ggml checkout
// outside this tree; not part of the project's CMake build.
//
// The graph is the one llama.cpp's llm_graph_context::build_moe_ffn builds for Mixtral, Qwen3-MoE and
// DeepSeek-style layers (softmax gating, renormalised top-k weights, SwiGLU experts):
//   logits   = mul_mat(gate_inp, x)                      [E, T]   (router in f32)
//   probs    = soft_max(logits)                          [E, T]
//   selected = argsort_top_k(probs, k)                   [k, T]   (i32)
//   weights  = get_rows(probs, selected) / sum_rows(...) [1, k, T] (norm_w; the sum clamped at 6.1e-5)
//   up, gate = mul_mat_id(up_exps | gate_exps, x, selected)   [ff, k, T]
//   experts  = mul_mat_id(down_exps, swiglu_split(gate, up), selected) * weights   [d, k, T]
//   moe_out  = experts[:, 0] + ... + experts[:, k-1]     [d, T]   (views, added in order)
// plus, where the shape has one, the shared expert as llama.cpp's build_ffn (LLM_FFN_SILU, LLM_FFN_PAR):
// down_sh(swiglu_split(gate_sh x, up_sh x)), added to moe_out.
//
// Weights: the expert (and shared expert) matrices in one type (f32, bf16, q8_0, q4_k, q6_k, mxfp4), the
// router in f32; seeded uniform values quantized by ggml_quantize_chunk (ggml's own quantizers). As llama.cpp
// places a weight, each one goes into the first of the CPU device's extra buffer types that supports its op
// (CPU_REPACK: ggml's interleaved layouts, on AVX2 machines for q4_K and mxfp4), else the plain CPU buffer;
// --no-repack keeps every weight in the plain CPU buffer (llama.cpp's --no-repack).
//
// Timing, as layer_bench: kInputs different input batches (tokens drawn with layer_bench's generator) are
// cycled so that a small batch does not find its experts' weights in cache from the previous call; one
// warm-up call per input; then --reps repetitions, each the mean time per call over at least --min-time
// seconds of calls; the median and best repetition are reported in milliseconds per call. Copying a batch
// into the graph's input tensor is not timed. weight_MB: the bytes one call touches - the router, the experts
// the batch selects (averaged over the inputs) and the shared expert, in their stored types - as layer_bench
// counts them; GBps = weight_MB / median time.
//
// Before timing, the graph's output for a few tokens is checked against a float64 reference computed from the
// dequantized weights (ggml's to_float) on the same routing rule; the error left is ggml's own rounding of
// the activations (to the type's vec_dot type: bf16, q8_0, q8_K). A wrong graph fails the run.
//
// Output: one JSON line per (T, threads) on stdout; progress on stderr.
// Usage: ggml_moe_peer --shape NAME --type TYPE [--tokens 1,16,256,2048] [--threads 1,2] [--reps 5]
//                      [--min-time 0.3] [--no-repack] [--ggml-commit SHA]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/layer_shapes.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

constexpr int kInputs = 8;  // as layer_bench
constexpr int kCheckTokens = 4;

struct Options {
  std::string shape, type;
  std::vector<int> tokens{1, 16, 256, 2048};
  std::vector<int> threads{1, 2};
  int reps = 5;
  double min_time = 0.3;
  bool repack = true;
  std::string ggml_commit = "unknown";
};

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error(message);
}

moe::bench::LayerBenchShape shape_named(const std::string& name) {
  for (const auto& s : {moe::bench::MixtralLike(), moe::bench::DeepSeekLike(), moe::bench::Qwen3_30bA3b()}) {
    if (name == s.name) return s;
  }
  fail("unknown --shape '" + name + "' (known: mixtral_like, deepseek_like, qwen3_30b_a3b)");
}

ggml_type type_named(const std::string& name) {
  static const std::pair<const char*, ggml_type> kTypes[] = {
      {"f32", GGML_TYPE_F32},   {"bf16", GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0},
      {"q4_k", GGML_TYPE_Q4_K}, {"q6_k", GGML_TYPE_Q6_K}, {"mxfp4", GGML_TYPE_MXFP4}};
  for (const auto& [n, t] : kTypes) {
    if (name == n) return t;
  }
  fail("unknown --type '" + name + "' (known: f32, bf16, q8_0, q4_k, q6_k, mxfp4)");
}

std::vector<int> positive_list(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 1 || v > (1 << 20)) {
      fail(flag + " takes a comma-separated list of positive integers (got '" + text + "')");
    }
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--shape") {
      o.shape = value();
    } else if (a == "--type") {
      o.type = value();
    } else if (a == "--tokens") {
      o.tokens = positive_list(a, value());
    } else if (a == "--threads") {
      o.threads = positive_list(a, value());
    } else if (a == "--reps") {
      const std::vector<int> v = positive_list(a, value());
      if (v.size() != 1) fail("--reps takes one positive integer");
      o.reps = v[0];
    } else if (a == "--min-time") {
      const std::string v = value();
      char* end = nullptr;
      o.min_time = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(o.min_time >= 0 && o.min_time <= 60)) {
        fail("--min-time takes seconds in [0, 60] (got '" + v + "')");
      }
    } else if (a == "--no-repack") {
      o.repack = false;
    } else if (a == "--ggml-commit") {
      o.ggml_commit = value();
    } else {
      fail("unknown argument '" + a +
           "' (usage: ggml_moe_peer --shape NAME --type TYPE [--tokens LIST] [--threads LIST] [--reps N] "
           "[--min-time S] [--no-repack] [--ggml-commit SHA])");
    }
  }
  if (o.shape.empty() || o.type.empty()) fail("--shape and --type are required");
  return o;
}

// layer_bench's generator (an LCG, values in [-1, 1)), seeded per stream.
struct Lcg {
  uint64_t h;
  float next() {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(h >> 40) - (1ll << 23)) / static_cast<float>(1 << 23);
  }
};

// The weights of one matrix stack: `ne2` matrices of `rows` x `cols` (ggml: ne0 = cols, ne1 = rows).
struct MatrixSpec {
  int id;  // seed stream
  int64_t cols, rows, count;
  float scale;  // values uniform in [-scale, scale)
};

// One matrix's values, regenerated identically on every call (the reference check needs them again).
std::vector<float> matrix_values(const MatrixSpec& m, int64_t index) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  Lcg g{0x9e3779b97f4a7c15ull * static_cast<uint64_t>(m.id + 1) +
        static_cast<uint64_t>(index) * 0x632be59bd9b4e019ull};
  for (float& x : v) x = m.scale * g.next();
  return v;
}

// The matrix quantized (or converted) to `type` by ggml, in ggml's storage layout (rows of blocks).
std::vector<uint8_t> matrix_bytes(const MatrixSpec& m, int64_t index, ggml_type type) {
  const std::vector<float> v = matrix_values(m, index);
  std::vector<uint8_t> out(ggml_row_size(type, m.cols) * static_cast<size_t>(m.rows));
  const size_t written = ggml_quantize_chunk(type, v.data(), out.data(), 0, m.rows, m.cols, nullptr);
  if (written != out.size()) fail("ggml_quantize_chunk wrote an unexpected size");
  return out;
}

// The matrix as the graph computes with it: its stored values widened to float64.
std::vector<double> matrix_dequantized(const MatrixSpec& m, int64_t index, ggml_type type) {
  const std::vector<uint8_t> q = matrix_bytes(m, index, type);
  std::vector<float> f(static_cast<size_t>(m.rows * m.cols));
  if (type == GGML_TYPE_F32) {
    std::memcpy(f.data(), q.data(), q.size());
  } else {
    const ggml_type_traits* traits = ggml_get_type_traits(type);
    if (!traits->to_float) fail(std::string("ggml has no to_float for ") + ggml_type_name(type));
    traits->to_float(q.data(), f.data(), m.rows * m.cols);
  }
  return std::vector<double>(f.begin(), f.end());
}

struct Weights {
  MatrixSpec gate_inp, up, gate, down, up_sh, gate_sh, down_sh;
  ggml_type type;
  bool shared;
  ggml_tensor *t_gate_inp = nullptr, *t_up = nullptr, *t_gate = nullptr, *t_down = nullptr;
  ggml_tensor *t_up_sh = nullptr, *t_gate_sh = nullptr, *t_down_sh = nullptr;
  std::string expert_buffer = "CPU";
  double expert_bytes = 0;  // one routed expert's three matrices
  double fixed_bytes = 0;   // router (f32) + shared expert, touched by every call
};

Weights weight_specs(const moe::bench::LayerBenchShape& s, ggml_type type) {
  const int64_t d = s.layer.hidden, ff = s.layer.expert_ff, e = s.layer.num_experts, sff = s.layer.shared_ff;
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(d));
  Weights w;
  w.type = type;
  w.shared = s.layer.num_shared_experts > 0;
  w.gate_inp = {0, d, e, 1, in_scale};
  w.up = {1, d, ff, e, in_scale};
  w.gate = {2, d, ff, e, in_scale};
  w.down = {3, ff, d, e, 1.0f / std::sqrt(static_cast<float>(ff))};
  w.up_sh = {4, d, sff, 1, in_scale};
  w.gate_sh = {5, d, sff, 1, in_scale};
  w.down_sh = {6, sff, d, 1, w.shared ? 1.0f / std::sqrt(static_cast<float>(sff)) : 0.0f};
  w.expert_bytes = 3.0 * static_cast<double>(ggml_row_size(type, d) * ff);
  w.fixed_bytes = static_cast<double>(ggml_row_size(GGML_TYPE_F32, d) * e) +
                  (w.shared ? 3.0 * static_cast<double>(ggml_row_size(type, d) * sff) : 0.0);
  return w;
}

ggml_tensor* new_weight(ggml_context* ctx, const MatrixSpec& m, ggml_type type, const char* name) {
  ggml_tensor* t = m.count > 1 ? ggml_new_tensor_3d(ctx, type, m.cols, m.rows, m.count)
                               : ggml_new_tensor_2d(ctx, type, m.cols, m.rows);
  ggml_set_name(t, name);
  return t;
}

// llama.cpp's weight_buft_supported for an expert stack: does the CPU device run the layer's mul_mat_id on a
// weight held in `buft`?
bool expert_op_supported(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft, const MatrixSpec& m,
                         ggml_type type, int64_t k) {
  ggml_init_params params{ggml_tensor_overhead() * 8, nullptr, true};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* w = new_weight(ctx, m, type, "probe");
  ggml_tensor* b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, m.cols, k, 512);
  ggml_tensor* ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, k, 512);
  ggml_tensor* op = ggml_mul_mat_id(ctx, w, b, ids);
  w->buffer = ggml_backend_buft_alloc_buffer(buft, 0);
  const bool ok = ggml_backend_dev_supports_op(dev, op);
  ggml_backend_buffer_free(w->buffer);
  w->buffer = nullptr;
  ggml_free(ctx);
  return ok;
}

// Fills a weight tensor: each of its matrices generated and quantized (on `workers` threads), then one
// ggml_backend_tensor_set of the whole stack (a repacking buffer converts it there).
void fill(ggml_tensor* t, const MatrixSpec& m, ggml_type type, int workers) {
  const size_t matrix = ggml_row_size(type, m.cols) * static_cast<size_t>(m.rows);
  std::vector<uint8_t> staging(matrix * static_cast<size_t>(m.count));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      for (int64_t i = w; i < m.count; i += workers) {
        const std::vector<uint8_t> q = matrix_bytes(m, i, type);
        std::memcpy(staging.data() + static_cast<size_t>(i) * matrix, q.data(), matrix);
      }
    });
  }
  for (auto& th : pool) th.join();
  ggml_backend_tensor_set(t, staging.data(), 0, staging.size());
}

struct WeightStore {
  ggml_context* ctx_plain = nullptr;
  ggml_context* ctx_experts = nullptr;
  ggml_backend_buffer_t buf_plain = nullptr, buf_experts = nullptr;
  ~WeightStore() {
    if (buf_plain) ggml_backend_buffer_free(buf_plain);
    if (buf_experts) ggml_backend_buffer_free(buf_experts);
    if (ctx_plain) ggml_free(ctx_plain);
    if (ctx_experts) ggml_free(ctx_experts);
  }
};

ggml_backend_buffer_t alloc_or_fail(ggml_context* ctx, ggml_backend_buffer_type_t buft) {
  const size_t size = ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, buft);
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
  if (!buf) {
    fail("cannot allocate " + std::to_string(size / 1e9) + " GB of weights in " +
         ggml_backend_buft_name(buft));
  }
  ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  return buf;
}

void load_weights(Weights& w, WeightStore& store, const moe::bench::LayerBenchShape& s, bool repack,
                  int workers) {
  ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!dev) fail("ggml has no CPU device");
  ggml_backend_buffer_type_t expert_buft = ggml_backend_cpu_buffer_type();
  if (repack) {
    // llama.cpp's buffer list for CPU weights: the device's extra buffer types first, then the CPU buffer.
    auto get_extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts"));
    for (ggml_backend_buffer_type_t* b = get_extra ? get_extra(dev) : nullptr; b && *b; ++b) {
      if (expert_op_supported(dev, *b, w.up, w.type, s.top_k) &&
          expert_op_supported(dev, *b, w.down, w.type, s.top_k)) {
        expert_buft = *b;
        break;
      }
    }
  }
  w.expert_buffer = ggml_backend_buft_name(expert_buft);
  ggml_init_params params{ggml_tensor_overhead() * 8, nullptr, true};
  store.ctx_plain = ggml_init(params);
  store.ctx_experts = ggml_init(params);
  w.t_gate_inp = new_weight(store.ctx_plain, w.gate_inp, GGML_TYPE_F32, "ffn_gate_inp");
  w.t_up = new_weight(store.ctx_experts, w.up, w.type, "ffn_up_exps");
  w.t_gate = new_weight(store.ctx_experts, w.gate, w.type, "ffn_gate_exps");
  w.t_down = new_weight(store.ctx_experts, w.down, w.type, "ffn_down_exps");
  if (w.shared) {
    w.t_up_sh = new_weight(store.ctx_plain, w.up_sh, w.type, "ffn_up_shexp");
    w.t_gate_sh = new_weight(store.ctx_plain, w.gate_sh, w.type, "ffn_gate_shexp");
    w.t_down_sh = new_weight(store.ctx_plain, w.down_sh, w.type, "ffn_down_shexp");
  }
  store.buf_plain = alloc_or_fail(store.ctx_plain, ggml_backend_cpu_buffer_type());
  store.buf_experts = alloc_or_fail(store.ctx_experts, expert_buft);
  fill(w.t_gate_inp, w.gate_inp, GGML_TYPE_F32, workers);
  fill(w.t_up, w.up, w.type, workers);
  fill(w.t_gate, w.gate, w.type, workers);
  fill(w.t_down, w.down, w.type, workers);
  if (w.shared) {
    fill(w.t_up_sh, w.up_sh, w.type, workers);
    fill(w.t_gate_sh, w.gate_sh, w.type, workers);
    fill(w.t_down_sh, w.down_sh, w.type, workers);
  }
}

// The layer's graph for T tokens (the op sequence of llama.cpp's build_moe_ffn and build_ffn, above).
struct Graph {
  ggml_context* ctx = nullptr;
  ggml_cgraph* gf = nullptr;
  ggml_gallocr_t galloc = nullptr;
  ggml_tensor *x = nullptr, *out = nullptr, *argsort = nullptr;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph() = default;
  ~Graph() {
    if (galloc) ggml_gallocr_free(galloc);
    if (ctx) ggml_free(ctx);
  }
};

void build_graph(Graph& g, const Weights& w, int64_t d, int64_t n_expert, int k, int64_t T) {
  ggml_init_params params{ggml_tensor_overhead() * 256 + ggml_graph_overhead(), nullptr, true};
  g.ctx = ggml_init(params);
  ggml_context* ctx = g.ctx;
  g.gf = ggml_new_graph(ctx);
  g.x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d, T);
  ggml_set_input(g.x);

  ggml_tensor* logits = ggml_mul_mat(ctx, w.t_gate_inp, g.x);  // [E, T]
  ggml_tensor* probs = ggml_soft_max(ctx, logits);             // [E, T]
  ggml_tensor* selected = ggml_argsort_top_k(ctx, probs, k);   // [k, T]
  g.argsort = selected->view_src;                              // [E, T]: read back for the bytes touched
  ggml_set_output(g.argsort);
  ggml_tensor* weights =
      ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, n_expert, T), selected);  // [1, k, T]
  weights = ggml_reshape_2d(ctx, weights, k, T);
  ggml_tensor* weights_sum = ggml_sum_rows(ctx, weights);  // [1, T]
  weights_sum = ggml_clamp(ctx, weights_sum, 6.103515625e-5f, INFINITY);
  weights = ggml_div(ctx, weights, weights_sum);
  weights = ggml_reshape_3d(ctx, weights, 1, k, T);
  ggml_build_forward_expand(g.gf, weights);

  ggml_tensor* cur = ggml_reshape_3d(ctx, g.x, d, 1, T);
  ggml_tensor* up = ggml_mul_mat_id(ctx, w.t_up, cur, selected);      // [ff, k, T]
  ggml_tensor* gate = ggml_mul_mat_id(ctx, w.t_gate, cur, selected);  // [ff, k, T]
  ggml_tensor* act = ggml_swiglu_split(ctx, gate, up);
  ggml_tensor* experts = ggml_mul_mat_id(ctx, w.t_down, act, selected);  // [d, k, T]
  experts = ggml_mul(ctx, experts, weights);
  ggml_build_forward_expand(g.gf, experts);

  std::vector<ggml_tensor*> views(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    views[i] = ggml_view_2d(ctx, experts, d, T, experts->nb[2], static_cast<size_t>(i) * experts->nb[1]);
    ggml_build_forward_expand(g.gf, views[i]);
  }
  ggml_tensor* moe_out = views[0];
  for (int i = 1; i < k; ++i) {
    moe_out = ggml_add(ctx, moe_out, views[i]);
    ggml_build_forward_expand(g.gf, moe_out);
  }
  if (k == 1) moe_out = ggml_cont(ctx, moe_out);

  if (w.shared) {
    ggml_tensor* sh_up = ggml_mul_mat(ctx, w.t_up_sh, g.x);
    ggml_tensor* sh_gate = ggml_mul_mat(ctx, w.t_gate_sh, g.x);
    ggml_tensor* sh = ggml_mul_mat(ctx, w.t_down_sh, ggml_swiglu_split(ctx, sh_gate, sh_up));
    moe_out = ggml_add(ctx, moe_out, sh);
  }
  g.out = moe_out;
  ggml_set_output(g.out);
  ggml_build_forward_expand(g.gf, g.out);

  g.galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
  if (!ggml_gallocr_alloc_graph(g.galloc, g.gf))
    fail("cannot allocate the graph's buffers (T = " + std::to_string(T) + ")");
}

void compute(ggml_backend_t backend, Graph& g) {
  if (ggml_backend_graph_compute(backend, g.gf) != GGML_STATUS_SUCCESS)
    fail("ggml_backend_graph_compute failed");
}

std::vector<int32_t> top_k_of(const Graph& g, int64_t n_expert, int k, int64_t T) {
  std::vector<int32_t> order(static_cast<size_t>(n_expert * T));
  ggml_backend_tensor_get(g.argsort, order.data(), 0, order.size() * sizeof(int32_t));
  std::vector<int32_t> top;
  for (int64_t t = 0; t < T; ++t)
    top.insert(top.end(), order.begin() + t * n_expert, order.begin() + t * n_expert + k);
  return top;
}

std::vector<std::vector<float>> make_inputs(int64_t T, int64_t d, uint64_t seed) {
  std::vector<std::vector<float>> xs(kInputs, std::vector<float>(static_cast<size_t>(T * d)));
  Lcg g{seed};
  for (auto& x : xs) {
    for (float& v : x) v = g.next();
  }
  return xs;
}

// float64 reference of the layer for the rows of x, from the dequantized weights; returns max over rows of
// |y - ref| / |ref|, and fails if a row's experts differ from the graph's.
double check_against_reference(ggml_backend_t backend, const Weights& w,
                               const moe::bench::LayerBenchShape& s) {
  const int64_t d = s.layer.hidden, ff = s.layer.expert_ff, n_expert = s.layer.num_experts;
  const int k = s.top_k;
  const int64_t T = kCheckTokens;
  Graph g;
  build_graph(g, w, d, n_expert, k, T);
  const std::vector<float> x = make_inputs(T, d, 777).front();
  ggml_backend_tensor_set(g.x, x.data(), 0, x.size() * sizeof(float));
  compute(backend, g);
  std::vector<float> y(static_cast<size_t>(T * d));
  ggml_backend_tensor_get(g.out, y.data(), 0, y.size() * sizeof(float));
  const std::vector<int32_t> top = top_k_of(g, n_expert, k, T);

  auto matvec = [](const std::vector<double>& m, int64_t rows, int64_t cols, const double* v) {
    std::vector<double> r(static_cast<size_t>(rows), 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < cols; ++j) acc += m[i * cols + j] * v[j];
      r[i] = acc;
    }
    return r;
  };
  auto swiglu_ffn = [&](const std::vector<double>& up, const std::vector<double>& gate,
                        const std::vector<double>& down, int64_t f, const double* v) {
    const std::vector<double> u = matvec(up, f, d, v), gt = matvec(gate, f, d, v);
    std::vector<double> a(static_cast<size_t>(f));
    for (int64_t i = 0; i < f; ++i) a[i] = gt[i] / (1.0 + std::exp(-gt[i])) * u[i];
    return matvec(down, d, f, a.data());
  };
  const std::vector<double> router = matrix_dequantized(w.gate_inp, 0, GGML_TYPE_F32);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> xt(x.begin() + t * d, x.begin() + (t + 1) * d);
    std::vector<double> logits = matvec(router, n_expert, d, xt.data());
    const double mx = *std::max_element(logits.begin(), logits.end());
    std::vector<int> idx(static_cast<size_t>(n_expert));
    for (int64_t e = 0; e < n_expert; ++e) idx[e] = static_cast<int>(e);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    std::set<int> ref_set(idx.begin(), idx.begin() + k);
    std::set<int> ggml_set(top.begin() + t * k, top.begin() + (t + 1) * k);
    if (ref_set != ggml_set) fail("reference check: token " + std::to_string(t) + " routed to other experts");
    double wsum = 0;
    for (int j = 0; j < k; ++j) wsum += std::exp(logits[idx[j]] - mx);
    std::vector<double> ref(static_cast<size_t>(d), 0.0);
    for (int j = 0; j < k; ++j) {
      const int e = idx[j];
      const std::vector<double> o =
          swiglu_ffn(matrix_dequantized(w.up, e, w.type), matrix_dequantized(w.gate, e, w.type),
                     matrix_dequantized(w.down, e, w.type), ff, xt.data());
      const double weight = std::exp(logits[e] - mx) / wsum;
      for (int64_t i = 0; i < d; ++i) ref[i] += weight * o[i];
    }
    if (w.shared) {
      const std::vector<double> o =
          swiglu_ffn(matrix_dequantized(w.up_sh, 0, w.type), matrix_dequantized(w.gate_sh, 0, w.type),
                     matrix_dequantized(w.down_sh, 0, w.type), s.layer.shared_ff, xt.data());
      for (int64_t i = 0; i < d; ++i) ref[i] += o[i];
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < d; ++i) {
      num += (y[t * d + i] - ref[i]) * (y[t * d + i] - ref[i]);
      den += ref[i] * ref[i];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

// Error bound of the check: ggml rounds the activations to the vec_dot type of the weights (f32: none, bf16:
// 8 bits, q8_0 / q8_K: 8-bit blocks), so the graph's output differs from the reference by about that.
double check_tolerance(ggml_type type) {
  if (type == GGML_TYPE_F32) return 1e-4;
  if (type == GGML_TYPE_BF16) return 2e-2;
  return 5e-2;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void run(const Options& o) {
  const moe::bench::LayerBenchShape s = shape_named(o.shape);
  const ggml_type type = type_named(o.type);
  const int64_t d = s.layer.hidden, n_expert = s.layer.num_experts;
  const int k = s.top_k;
  const int max_threads = *std::max_element(o.threads.begin(), o.threads.end());

  ggml_backend_t backend = ggml_backend_cpu_init();
  if (!backend) fail("ggml_backend_cpu_init failed");
  std::unique_ptr<ggml_backend, void (*)(ggml_backend_t)> backend_guard(backend, ggml_backend_free);

  Weights w = weight_specs(s, type);
  WeightStore store;
  const auto t_load = std::chrono::steady_clock::now();
  load_weights(w, store, s, o.repack, max_threads);
  std::fprintf(stderr, "ggml_moe_peer %s %s: weights in %.1f s (experts in %s)\n", o.shape.c_str(),
               o.type.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(),
               w.expert_buffer.c_str());

  ggml_backend_cpu_set_n_threads(backend, max_threads);
  const double check = check_against_reference(backend, w, s);
  std::fprintf(stderr, "ggml_moe_peer %s %s: relative error vs float64 reference %.2e (bound %.0e)\n",
               o.shape.c_str(), o.type.c_str(), check, check_tolerance(type));
  if (!(check <= check_tolerance(type))) {
    fail("the graph's output is off the float64 reference by " + std::to_string(check));
  }

  for (int T : o.tokens) {
    Graph g;
    build_graph(g, w, d, n_expert, k, T);
    const std::vector<std::vector<float>> xs = make_inputs(T, d, 12345);
    for (int threads : o.threads) {
      ggml_backend_cpu_set_n_threads(backend, threads);
      // Warm-up: each input once; the experts each selects, for the bytes touched.
      double active = 0;
      for (const auto& x : xs) {
        ggml_backend_tensor_set(g.x, x.data(), 0, x.size() * sizeof(float));
        compute(backend, g);
        const std::vector<int32_t> top = top_k_of(g, n_expert, k, T);
        active += static_cast<double>(std::set<int32_t>(top.begin(), top.end()).size());
      }
      active /= kInputs;
      std::vector<double> rep_ms;
      int64_t calls = 0;
      size_t next = 0;
      for (int r = 0; r < o.reps; ++r) {
        double seconds = 0;
        int64_t n = 0;
        while (n == 0 || seconds < o.min_time) {
          ggml_backend_tensor_set(g.x, xs[next].data(), 0, xs[next].size() * sizeof(float));
          const auto t0 = std::chrono::steady_clock::now();
          compute(backend, g);
          seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          next = (next + 1) % kInputs;
          ++n;
        }
        rep_ms.push_back(1e3 * seconds / static_cast<double>(n));
        calls += n;
      }
      const double ms = median(rep_ms), best = *std::min_element(rep_ms.begin(), rep_ms.end());
      const double bytes = w.fixed_bytes + active * w.expert_bytes;
      std::printf(
          "{\"peer\": \"ggml\", \"shape\": \"%s\", \"type\": \"%s\", \"T\": %d, \"threads\": %d, \"ms\": "
          "%.4f, "
          "\"best_ms\": %.4f, \"reps\": %d, \"calls\": %lld, \"active_experts\": %.2f, \"weight_MB\": %.3f, "
          "\"GBps\": %.3f, \"expert_buffer\": \"%s\", \"check_rel_err\": %.3e, \"ggml_version\": \"%s\", "
          "\"ggml_commit\": \"%s\"}\n",
          o.shape.c_str(), o.type.c_str(), T, threads, ms, best, o.reps, static_cast<long long>(calls),
          active, bytes / 1e6, bytes / (ms * 1e-3) / 1e9, w.expert_buffer.c_str(), check, ggml_version(),
          o.ggml_commit.c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "ggml_moe_peer %s %s T=%d threads=%d: %.3f ms (best %.3f), %.1f GB/s\n",
                   o.shape.c_str(), o.type.c_str(), T, threads, ms, best, bytes / (ms * 1e-3) / 1e9);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ggml_moe_peer: %s\n", e.what());
    return 1;
  }
  return 0;
}

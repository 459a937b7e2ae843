#include "moe/api/builders.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <system_error>

#include "moe/io/checkpoint.h"
#include "moe/io/safetensors.h"
#include "router/dispatch_policy.h"

namespace moe::api {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument(msg);
}

// Removes a file when it goes out of scope (also on a throw).
class TempFile {
 public:
  TempFile() {
    static std::atomic<uint64_t> counter{0};
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            ("moe-weights-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
             std::to_string(now) + ".safetensors");
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::span<const std::byte> bytes_of(const void* p, int64_t rows, int64_t cols, kernels::DType dtype) {
  return {static_cast<const std::byte*>(p),
          static_cast<size_t>(rows) * static_cast<size_t>(cols) * kernels::dtype_size(dtype)};
}

}  // namespace

io::LayerWeights weights_from_buffers(const io::LayerShape& shape, const WeightBuffers& b) {
  shape.validate();
  if (b.dtype != kernels::DType::kF32 && b.dtype != kernels::DType::kBF16) {
    fail("weight buffers: dtype must be f32 or bf16");
  }
  // The naming family only decides the staging file's tensor names: the one whose rules fit the shape.
  const io::Architecture arch = shape.score_bias ? io::Architecture::kDeepseekV3
                                : (shape.num_shared_experts > 0 || shape.shared_expert_gate)
                                    ? io::Architecture::kQwen2Moe
                                    : io::Architecture::kMixtral;
  shape.validate_for(arch);
  const size_t E = static_cast<size_t>(shape.num_experts);
  const int64_t d = shape.hidden, ff = shape.expert_ff, sff = shape.shared_ff;
  if (b.router_gate == nullptr) fail("weight buffers: router_gate is required");
  if (shape.score_bias != (b.score_bias != nullptr)) {
    fail(shape.score_bias ? "weight buffers: score_bias is required (shape.score_bias is set)"
                          : "weight buffers: score_bias given but shape.score_bias is not set");
  }
  if (b.gate_proj.size() != E || b.up_proj.size() != E || b.down_proj.size() != E) {
    fail("weight buffers: expected " + std::to_string(E) + " expert pointers for each projection");
  }
  for (size_t e = 0; e < E; ++e) {
    if (!b.gate_proj[e] || !b.up_proj[e] || !b.down_proj[e]) {
      fail("weight buffers: expert " + std::to_string(e) + " has a null gate/up/down pointer");
    }
  }
  const bool has_shared = shape.num_shared_experts > 0;
  const bool any_shared = b.shared_gate_proj || b.shared_up_proj || b.shared_down_proj;
  if (has_shared && !(b.shared_gate_proj && b.shared_up_proj && b.shared_down_proj)) {
    fail(
        "weight buffers: the shape has a shared expert: shared_gate_proj, shared_up_proj and "
        "shared_down_proj are "
        "required");
  }
  if (!has_shared && any_shared)
    fail("weight buffers: shared expert buffers given but num_shared_experts is 0");
  if (shape.shared_expert_gate != (b.shared_expert_gate != nullptr)) {
    fail(shape.shared_expert_gate
             ? "weight buffers: shared_expert_gate is required (shape.shared_expert_gate is set)"
             : "weight buffers: shared_expert_gate given but shape.shared_expert_gate is not set");
  }

  const std::string prefix =
      std::string("model.layers.0.") + (arch == io::Architecture::kMixtral ? "block_sparse_moe." : "mlp.");
  const std::string dt(io::safetensors_dtype_name(b.dtype));
  std::vector<io::TensorToWrite> tensors;
  tensors.reserve(3 * E + 6);
  tensors.push_back({prefix + "gate.weight",
                     "F32",
                     {shape.num_experts, d},
                     bytes_of(b.router_gate, shape.num_experts, d, kernels::DType::kF32)});
  if (shape.score_bias) {
    tensors.push_back({prefix + "gate.e_score_correction_bias",
                       "F32",
                       {shape.num_experts},
                       bytes_of(b.score_bias, 1, shape.num_experts, kernels::DType::kF32)});
  }
  for (size_t e = 0; e < E; ++e) {
    const std::string base = prefix + "experts." + std::to_string(e) + ".";
    const bool mixtral = arch == io::Architecture::kMixtral;
    tensors.push_back({base + (mixtral ? "w1.weight" : "gate_proj.weight"),
                       dt,
                       {ff, d},
                       bytes_of(b.gate_proj[e], ff, d, b.dtype)});
    tensors.push_back({base + (mixtral ? "w3.weight" : "up_proj.weight"),
                       dt,
                       {ff, d},
                       bytes_of(b.up_proj[e], ff, d, b.dtype)});
    tensors.push_back({base + (mixtral ? "w2.weight" : "down_proj.weight"),
                       dt,
                       {d, ff},
                       bytes_of(b.down_proj[e], d, ff, b.dtype)});
  }
  if (has_shared) {
    const std::string base =
        prefix + (arch == io::Architecture::kDeepseekV3 ? "shared_experts." : "shared_expert.");
    tensors.push_back(
        {base + "gate_proj.weight", dt, {sff, d}, bytes_of(b.shared_gate_proj, sff, d, b.dtype)});
    tensors.push_back({base + "up_proj.weight", dt, {sff, d}, bytes_of(b.shared_up_proj, sff, d, b.dtype)});
    tensors.push_back(
        {base + "down_proj.weight", dt, {d, sff}, bytes_of(b.shared_down_proj, d, sff, b.dtype)});
  }
  if (shape.shared_expert_gate) {
    tensors.push_back({prefix + "shared_expert_gate.weight",
                       "F32",
                       {1, d},
                       bytes_of(b.shared_expert_gate, 1, d, kernels::DType::kF32)});
  }

  TempFile file;
  io::write_safetensors(file.path(), tensors);
  // The mapping outlives the unlinked file: the weights keep the Checkpoint (and its mapping) alive.
  return io::load_layer(io::Checkpoint::open(file.path()), arch, 0, shape, b.dtype);
}

MoELayerConfig make_config(const LayerOptions& o, const io::LayerWeights& weights) {
  const std::string preset = o.preset.empty() ? "deterministic" : o.preset;
  const std::string router = o.router.empty() ? "mixtral" : o.router;
  MoELayerConfig c;
  bool is_arch = true;
  io::Architecture arch = io::Architecture::kMixtral;
  try {
    arch = io::parse_architecture(router);
  } catch (const std::invalid_argument&) {
    is_arch = false;
  }
  if (is_arch) {
    c = MoELayerConfig::preset(preset, arch);
  } else {
    c = MoELayerConfig::preset(preset, io::Architecture::kMixtral);
    try {
      c.router = RouterConfig::preset(router);
    } catch (const std::invalid_argument&) {
      fail("unknown router '" + router + "' (known: mixtral, qwen2-moe, deepseek-v3, olmoe, switch)");
    }
  }
  c.router.num_experts = weights.shape().num_experts;
  if (o.top_k < 0) fail("top_k must be >= 0 (0 keeps the router's; got " + std::to_string(o.top_k) + ")");
  if (o.top_k > 0) c.router.top_k = o.top_k;
  if (c.router.top_k > c.router.num_experts && o.top_k == 0) c.router.top_k = c.router.num_experts;
  if (o.renormalize >= 0) c.router.renormalize = o.renormalize != 0;
  if (o.num_groups > 0) c.router.num_groups = o.num_groups;
  if (o.topk_groups > 0) c.router.topk_groups = o.topk_groups;
  if (o.capacity_factor > 0) c.policy.capacity_factor = o.capacity_factor;
  if (!o.scope.empty()) c.policy.scope = parse_capacity_scope(o.scope);
  if (!o.priority.empty()) c.policy.priority = parse_priority(o.priority);
  if (!o.overflow.empty()) c.policy.overflow = parse_overflow(o.overflow);
  if (!o.kernel.empty()) {
    if (o.kernel == "invariant") {
      c.expert_kernel = c.gate_kernel = kernels::KernelKind::kInvariant;
    } else if (o.kernel == "fast") {
      c.expert_kernel = c.gate_kernel = kernels::KernelKind::kFast;
    } else {
      fail("unknown kernel '" + o.kernel + "' (known: invariant, fast)");
    }
  }
  if (o.num_threads < 0)
    fail("num_threads must be >= 0 (0 = 1 thread; got " + std::to_string(o.num_threads) + ")");
  if (o.num_threads > 0) c.num_threads = o.num_threads;
  if (o.max_tokens < 0) fail("max_tokens must be >= 0 (0 = 256; got " + std::to_string(o.max_tokens) + ")");
  if (o.max_tokens > 0) c.max_tokens = o.max_tokens;
  c.validate();
  return c;
}

}  // namespace moe::api

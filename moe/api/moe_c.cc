// The C API: handles wrap the C++ objects; every entry point catches everything and maps it to a status.
#include "moe/api/moe_c.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "moe/api/builders.h"
#include "moe/api/ep_factory.h"
#include "moe/api/layer_factory.h"
#include "moe/io/checkpoint.h"
#include "moe/io/io_error.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer.h"
#include "moe/parallel/eplb.h"
#include "router/routing_state.h"
#include "router/token_meta.h"

struct moe_weights {
  std::shared_ptr<const moe::io::LayerWeights> weights;
};

struct moe_layer_config {
  moe::api::LayerOptions options;
};

struct moe_layer {
  std::unique_ptr<moe::Layer> layer;
  std::vector<moe::TokenMeta> meta;  // reused across calls
  moe::MoEStats stats;               // of the last successful forward
  bool has_run = false;
};

struct moe_routing_state {
  moe_routing_state(int num_experts, int top_k, bool record = false) : state(num_experts, top_k, record) {}
  moe::RoutingState state;
};

namespace {

thread_local std::string t_last_error;

moe_status_t set_error(moe_status_t status, const std::string& message) {
  t_last_error = message;
  return status;
}

// Runs `fn` (returning moe_status_t), mapping every exception to a status and the thread's message by its
// type: io::IoError and filesystem/system errors are MOE_IO_ERROR, std::invalid_argument and
// std::out_of_range MOE_INVALID_ARGUMENT, std::bad_alloc and io::OutOfMemory MOE_OUT_OF_MEMORY, anything else
// MOE_RUNTIME_ERROR.
template <class Fn>
moe_status_t guarded(const char* where, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::invalid_argument& e) {
    return set_error(MOE_INVALID_ARGUMENT, std::string(where) + ": " + e.what());
  } catch (const std::out_of_range& e) {
    return set_error(MOE_INVALID_ARGUMENT, std::string(where) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return set_error(MOE_OUT_OF_MEMORY, std::string(where) + ": out of memory");
  } catch (const moe::io::OutOfMemory& e) {
    return set_error(MOE_OUT_OF_MEMORY, std::string(where) + ": " + e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    return set_error(MOE_IO_ERROR, std::string(where) + ": " + e.what());
  } catch (const std::system_error& e) {
    return set_error(MOE_IO_ERROR, std::string(where) + ": " + e.what());
  } catch (const moe::io::IoError& e) {
    return set_error(MOE_IO_ERROR, std::string(where) + ": " + e.what());
  } catch (const std::exception& e) {
    return set_error(MOE_RUNTIME_ERROR, std::string(where) + ": " + e.what());
  } catch (...) {
    return set_error(MOE_RUNTIME_ERROR, std::string(where) + ": unknown error");
  }
}

// Expert parallelism runs the CPU layer on every rank.
void check_ep_device(const moe::api::LayerOptions& o) {
  if (o.device != "cpu") {
    throw std::invalid_argument("expert parallelism runs the CPU layer (device \"cpu\"), not \"" + o.device +
                                "\"");
  }
}

moe_status_t null_arg(const char* where, const char* what) {
  return set_error(MOE_INVALID_ARGUMENT, std::string(where) + ": " + what + " must not be NULL");
}

moe::io::LayerShape to_shape(const moe_layer_shape_t& s) {
  moe::io::LayerShape shape;
  shape.hidden = s.hidden;
  shape.expert_ff = s.expert_ff;
  shape.num_experts = s.num_experts;
  shape.num_shared_experts = s.num_shared_experts;
  shape.shared_ff = s.num_shared_experts > 0 ? s.shared_ff : 0;
  shape.shared_expert_gate = s.shared_expert_gate != 0;
  shape.score_bias = s.score_bias != 0;
  return shape;
}

moe_layer_shape_t from_shape(const moe::io::LayerShape& s) {
  moe_layer_shape_t out;
  out.hidden = s.hidden;
  out.expert_ff = s.expert_ff;
  out.num_experts = s.num_experts;
  out.num_shared_experts = s.num_shared_experts;
  out.shared_ff = s.shared_ff;
  out.shared_expert_gate = s.shared_expert_gate ? 1 : 0;
  out.score_bias = s.score_bias ? 1 : 0;
  return out;
}

// moe_dtype_t and kernels::DType share their numbering (f16, 2, is a file dtype only).
constexpr moe::kernels::DType kDtypes[] = {moe::kernels::DType::kF32,  moe::kernels::DType::kBF16,
                                           moe::kernels::DType::kQ8_0, moe::kernels::DType::kQ4_K,
                                           moe::kernels::DType::kQ6_K, moe::kernels::DType::kMXFP4,
                                           moe::kernels::DType::kFP8};

moe::kernels::DType to_dtype(int32_t d, const char* where) {
  for (moe::kernels::DType t : kDtypes) {
    if (d == static_cast<int32_t>(t)) return t;
  }
  throw std::invalid_argument(std::string(where) +
                              " must be MOE_DTYPE_F32, _BF16, _Q8_0, _Q4_K, _Q6_K, _MXFP4 or _FP8 (got " +
                              std::to_string(d) + ")");
}

// Caller buffers are plain matrices (a quantized one needs its blocks' layout and, for FP8, its scales).
moe::kernels::DType to_plain_dtype(int32_t d, const char* where) {
  if (d == MOE_DTYPE_F32) return moe::kernels::DType::kF32;
  if (d == MOE_DTYPE_BF16) return moe::kernels::DType::kBF16;
  throw std::invalid_argument(std::string(where) + " must be MOE_DTYPE_F32 or MOE_DTYPE_BF16 (got " +
                              std::to_string(d) + ")");
}

// The int a C caller passed as a moe_dtype_t. C lets an enum object hold any int; in C++ a value outside the
// enumerators' range is undefined behaviour to load as the enum type, so its bytes are read as an int
// instead.
int32_t enum_bits(const moe_dtype_t& value) {
  static_assert(sizeof(moe_dtype_t) == sizeof(int32_t));
  int32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

moe_status_t wrap_weights(moe::io::LayerWeights&& w, moe_weights_t** out) {
  auto handle = std::make_unique<moe_weights>();
  handle->weights = std::make_shared<const moe::io::LayerWeights>(std::move(w));
  *out = handle.release();
  return MOE_OK;
}

}  // namespace

extern "C" {

const char* moe_last_error(void) {
  return t_last_error.c_str();
}

const char* moe_status_string(moe_status_t status) {
  switch (status) {
    case MOE_OK:
      return "MOE_OK";
    case MOE_INVALID_ARGUMENT:
      return "MOE_INVALID_ARGUMENT";
    case MOE_IO_ERROR:
      return "MOE_IO_ERROR";
    case MOE_RUNTIME_ERROR:
      return "MOE_RUNTIME_ERROR";
    case MOE_OUT_OF_MEMORY:
      return "MOE_OUT_OF_MEMORY";
    case MOE_BUFFER_TOO_SMALL:
      return "MOE_BUFFER_TOO_SMALL";
  }
  return "MOE_UNKNOWN_STATUS";
}

const char* moe_version(void) {
  return MOE_VERSION;
}

const char* moe_preset_description(const char* preset) {
  // One string per known preset, built once (thread-safe static initialisation) and never freed.
  static const std::vector<std::pair<std::string, std::string>> descriptions = [] {
    std::vector<std::pair<std::string, std::string>> all;
    for (const auto& name : moe::MoELayerConfig::preset_names()) {
      all.emplace_back(name, moe::MoELayerConfig::preset_description(name));
    }
    return all;
  }();
  if (preset == nullptr) {
    null_arg("moe_preset_description", "preset");
    return nullptr;
  }
  std::string known;
  for (const auto& [name, description] : descriptions) {
    if (name == preset) return description.c_str();
    known += (known.empty() ? "" : ", ") + name;
  }
  set_error(MOE_INVALID_ARGUMENT,
            std::string("moe_preset_description: unknown preset '") + preset + "' (known: " + known + ")");
  return nullptr;
}

// ---- Weights --------------------------------------------------------------------------------------------

moe_status_t moe_weights_load(const char* path, const char* architecture, int32_t layer_index,
                              const moe_layer_shape_t* shape, int32_t storage, moe_weights_t** out) {
  static constexpr const char* kWhere = "moe_weights_load";
  if (out == nullptr) return null_arg(kWhere, "out");
  *out = nullptr;
  if (path == nullptr) return null_arg(kWhere, "path");
  if (architecture == nullptr) return null_arg(kWhere, "architecture");
  if (shape == nullptr) return null_arg(kWhere, "shape");
  return guarded(kWhere, [&] {
    const moe::io::Architecture arch = moe::io::parse_architecture(architecture);
    std::optional<moe::kernels::DType> dtype;
    if (storage != -1) dtype = to_dtype(storage, "storage");
    if (layer_index < 0) {
      throw std::invalid_argument("layer_index must be >= 0 (got " + std::to_string(layer_index) + ")");
    }
    auto checkpoint = moe::io::Checkpoint::open(path);
    return wrap_weights(
        moe::io::load_layer(std::move(checkpoint), arch, layer_index, to_shape(*shape), dtype), out);
  });
}

moe_status_t moe_weights_load_pretrained(const char* dir, int32_t layer_index, int32_t storage,
                                         moe_weights_t** out) {
  static constexpr const char* kWhere = "moe_weights_load_pretrained";
  if (out == nullptr) return null_arg(kWhere, "out");
  *out = nullptr;
  if (dir == nullptr) return null_arg(kWhere, "dir");
  return guarded(kWhere, [&] {
    std::optional<moe::kernels::DType> dtype;
    if (storage != -1) dtype = to_dtype(storage, "storage");
    return wrap_weights(moe::io::load_pretrained_layer(dir, layer_index, dtype), out);
  });
}

moe_status_t moe_weights_random(const moe_layer_shape_t* shape, moe_dtype_t storage, uint64_t seed,
                                moe_weights_t** out) {
  static constexpr const char* kWhere = "moe_weights_random";
  if (out == nullptr) return null_arg(kWhere, "out");
  *out = nullptr;
  if (shape == nullptr) return null_arg(kWhere, "shape");
  return guarded(kWhere, [&] {
    return wrap_weights(
        moe::io::random_layer(to_shape(*shape), to_dtype(enum_bits(storage), "storage"), seed), out);
  });
}

moe_status_t moe_weights_from_buffers(const moe_layer_shape_t* shape, const moe_weight_buffers_t* buffers,
                                      moe_weights_t** out) {
  static constexpr const char* kWhere = "moe_weights_from_buffers";
  if (out == nullptr) return null_arg(kWhere, "out");
  *out = nullptr;
  if (shape == nullptr) return null_arg(kWhere, "shape");
  if (buffers == nullptr) return null_arg(kWhere, "buffers");
  return guarded(kWhere, [&] {
    const moe::io::LayerShape s = to_shape(*shape);
    s.validate();
    moe::api::WeightBuffers b;
    b.dtype = to_plain_dtype(enum_bits(buffers->dtype), "buffers->dtype");
    b.router_gate = buffers->router_gate;
    b.score_bias = buffers->score_bias;
    if (!buffers->expert_gate_proj || !buffers->expert_up_proj || !buffers->expert_down_proj) {
      throw std::invalid_argument("expert_gate_proj, expert_up_proj and expert_down_proj must not be NULL");
    }
    b.gate_proj.assign(buffers->expert_gate_proj, buffers->expert_gate_proj + s.num_experts);
    b.up_proj.assign(buffers->expert_up_proj, buffers->expert_up_proj + s.num_experts);
    b.down_proj.assign(buffers->expert_down_proj, buffers->expert_down_proj + s.num_experts);
    b.shared_gate_proj = buffers->shared_gate_proj;
    b.shared_up_proj = buffers->shared_up_proj;
    b.shared_down_proj = buffers->shared_down_proj;
    b.shared_expert_gate = buffers->shared_expert_gate;
    return wrap_weights(moe::api::weights_from_buffers(s, b), out);
  });
}

moe_status_t moe_weights_shape(const moe_weights_t* weights, moe_layer_shape_t* shape) {
  if (weights == nullptr) return null_arg("moe_weights_shape", "weights");
  if (shape == nullptr) return null_arg("moe_weights_shape", "shape");
  *shape = from_shape(weights->weights->shape());
  return MOE_OK;
}

moe_status_t moe_weights_storage(const moe_weights_t* weights, moe_dtype_t* storage) {
  if (weights == nullptr) return null_arg("moe_weights_storage", "weights");
  if (storage == nullptr) return null_arg("moe_weights_storage", "storage");
  *storage = static_cast<moe_dtype_t>(static_cast<int32_t>(weights->weights->storage()));
  return MOE_OK;
}

moe_status_t moe_weights_hash(const moe_weights_t* weights, uint64_t* hash) {
  if (weights == nullptr) return null_arg("moe_weights_hash", "weights");
  if (hash == nullptr) return null_arg("moe_weights_hash", "hash");
  return guarded("moe_weights_hash", [&] {
    *hash = weights->weights->content_hash();
    return MOE_OK;
  });
}

void moe_weights_destroy(moe_weights_t* weights) {
  delete weights;
}

// ---- Layer ----------------------------------------------------------------------------------------------

moe_status_t moe_layer_config_create(moe_layer_config_t** out) {
  if (out == nullptr) return null_arg("moe_layer_config_create", "out");
  *out = nullptr;
  return guarded("moe_layer_config_create", [&] {
    *out = new moe_layer_config();
    return MOE_OK;
  });
}

void moe_layer_config_destroy(moe_layer_config_t* config) {
  delete config;
}

}  // extern "C"

namespace {

// A setter: null checks, then `set` on a copy of the options, stored only when it succeeds (a rejected value
// leaves the config unchanged).
template <class Set>
moe_status_t set_option(const char* where, moe_layer_config_t* config, Set&& set) {
  if (config == nullptr) return null_arg(where, "config");
  return guarded(where, [&] {
    moe::api::LayerOptions o = config->options;
    set(o);
    config->options = std::move(o);
    return MOE_OK;
  });
}

template <class Set>
moe_status_t set_name(const char* where, moe_layer_config_t* config, const char* value, Set&& set) {
  if (value == nullptr) return null_arg(where, "value");
  return set_option(where, config, [&](moe::api::LayerOptions& o) { set(o, std::string(value)); });
}

}  // namespace

namespace {

// The turn ends a C caller passes: a span, or an error naming the argument.
std::span<const uint32_t> turn_ends_arg(const char* where, const uint32_t* turn_ends, int64_t count) {
  if (turn_ends == nullptr) throw std::invalid_argument(std::string(where) + ": turn_ends is null");
  if (count < 1 || count > (int64_t{1} << 30)) {
    throw std::invalid_argument(std::string(where) + ": num_turn_ends must be in [1, 2^30] (got " +
                                std::to_string(count) + ")");
  }
  return std::span<const uint32_t>(turn_ends, static_cast<size_t>(count));
}

moe_status_t restore_prefix(const char* kWhere, moe_routing_state_t* state, uint64_t request_id,
                            const uint32_t* turn_ends, int64_t num_turn_ends, uint32_t prompt_length,
                            const uint8_t* const* segments, const int64_t* segment_sizes,
                            int64_t num_segments) {
  if (state == nullptr) return null_arg(kWhere, "state");
  if (num_segments < 0) {
    return set_error(MOE_INVALID_ARGUMENT, std::string(kWhere) + ": num_segments must be >= 0 (got " +
                                               std::to_string(num_segments) + ")");
  }
  if (num_segments > 0 && (segments == nullptr || segment_sizes == nullptr)) {
    return null_arg(kWhere, segments == nullptr ? "segments" : "segment_sizes");
  }
  return guarded(kWhere, [&] {
    std::vector<moe::RoutingSegment> prefix;
    for (int64_t i = 0; i < num_segments; ++i) {
      if (segments[i] == nullptr || segment_sizes[i] < 0) {
        throw std::invalid_argument("segment " + std::to_string(i) + " is null or has a negative size");
      }
      prefix.push_back(moe::RoutingSegment::parse(
          std::span<const uint8_t>(segments[i], static_cast<size_t>(segment_sizes[i]))));
    }
    if (turn_ends != nullptr || num_turn_ends != 0) {
      state->state.restore(request_id, turn_ends_arg(kWhere, turn_ends, num_turn_ends), prefix);
    } else {
      state->state.restore(request_id, prompt_length, prefix);
    }
    return MOE_OK;
  });
}

}  // namespace

extern "C" {

moe_status_t moe_layer_config_set_preset(moe_layer_config_t* c, const char* v) {
  return set_name("moe_layer_config_set_preset", c, v,
                  [](auto& o, const std::string& s) { o.set_preset(s); });
}
moe_status_t moe_layer_config_set_router(moe_layer_config_t* c, const char* v) {
  return set_name("moe_layer_config_set_router", c, v,
                  [](auto& o, const std::string& s) { o.set_router(s); });
}
moe_status_t moe_layer_config_set_top_k(moe_layer_config_t* c, int32_t v) {
  return set_option("moe_layer_config_set_top_k", c, [&](auto& o) { o.set_top_k(v); });
}
moe_status_t moe_layer_config_set_renormalize(moe_layer_config_t* c, int32_t v) {
  return set_option("moe_layer_config_set_renormalize", c, [&](auto& o) { o.set_renormalize(v); });
}
moe_status_t moe_layer_config_set_groups(moe_layer_config_t* c, int32_t groups, int32_t kept) {
  return set_option("moe_layer_config_set_groups", c, [&](auto& o) {
    o.set_num_groups(groups);
    o.set_topk_groups(kept);
    if (kept > groups) {
      throw std::invalid_argument("topk_groups (" + std::to_string(kept) + ") exceeds num_groups (" +
                                  std::to_string(groups) + ")");
    }
  });
}
moe_status_t moe_layer_config_set_capacity_factor(moe_layer_config_t* c, double v) {
  return set_option("moe_layer_config_set_capacity_factor", c, [&](auto& o) { o.set_capacity_factor(v); });
}
moe_status_t moe_layer_config_set_min_capacity(moe_layer_config_t* c, int32_t v) {
  return set_option("moe_layer_config_set_min_capacity", c, [&](auto& o) { o.set_min_capacity(v); });
}
moe_status_t moe_layer_config_set_scope(moe_layer_config_t* c, const char* v) {
  return set_name("moe_layer_config_set_scope", c, v, [](auto& o, const std::string& s) { o.set_scope(s); });
}
moe_status_t moe_layer_config_set_lookahead(moe_layer_config_t* c, int64_t v) {
  return set_option("moe_layer_config_set_lookahead", c, [&](auto& o) { o.set_lookahead(v); });
}
moe_status_t moe_layer_config_set_priority(moe_layer_config_t* c, const char* v) {
  return set_name("moe_layer_config_set_priority", c, v,
                  [](auto& o, const std::string& s) { o.set_priority(s); });
}
moe_status_t moe_layer_config_set_overflow(moe_layer_config_t* c, const char* v) {
  return set_name("moe_layer_config_set_overflow", c, v,
                  [](auto& o, const std::string& s) { o.set_overflow(s); });
}
moe_status_t moe_layer_config_set_reroute_depth(moe_layer_config_t* c, int32_t v) {
  return set_option("moe_layer_config_set_reroute_depth", c, [&](auto& o) { o.set_reroute_depth(v); });
}
moe_status_t moe_layer_config_set_kernel(moe_layer_config_t* c, const char* v) {
  return set_name("moe_layer_config_set_kernel", c, v,
                  [](auto& o, const std::string& s) { o.set_kernel(s); });
}
moe_status_t moe_layer_config_set_compute(moe_layer_config_t* c, const char* v) {
  return set_name("moe_layer_config_set_compute", c, v,
                  [](auto& o, const std::string& s) { o.set_compute(s); });
}
moe_status_t moe_layer_config_set_storage(moe_layer_config_t* c, moe_dtype_t v) {
  return set_option("moe_layer_config_set_storage", c,
                    [&](auto& o) { o.storage = to_dtype(enum_bits(v), "storage"); });
}
moe_status_t moe_layer_config_set_num_threads(moe_layer_config_t* c, int32_t v) {
  return set_option("moe_layer_config_set_num_threads", c, [&](auto& o) { o.set_num_threads(v); });
}
moe_status_t moe_layer_config_set_max_tokens(moe_layer_config_t* c, int32_t v) {
  return set_option("moe_layer_config_set_max_tokens", c, [&](auto& o) { o.set_max_tokens(v); });
}
moe_status_t moe_layer_config_set_device(moe_layer_config_t* c, const char* v) {
  return set_name("moe_layer_config_set_device", c, v,
                  [](auto& o, const std::string& s) { o.set_device(s); });
}

moe_status_t moe_layer_config_set_expert_parallel(moe_layer_config_t* config, const char* backend,
                                                  const char* planning) {
  static constexpr const char* kWhere = "moe_layer_config_set_expert_parallel";
  if (config == nullptr) return null_arg(kWhere, "config");
  return guarded(kWhere, [&] {
    config->options.set_expert_parallel(backend ? backend : "", planning ? planning : "global");
    return MOE_OK;
  });
}

moe_status_t moe_layer_config_set_expert_placement(moe_layer_config_t* config,
                                                   const int32_t* physical_to_logical, int64_t num_slots) {
  static constexpr const char* kWhere = "moe_layer_config_set_expert_placement";
  if (config == nullptr) return null_arg(kWhere, "config");
  if (num_slots < 0) return set_error(MOE_INVALID_ARGUMENT, std::string(kWhere) + ": num_slots is negative");
  if (num_slots > 0 && physical_to_logical == nullptr) return null_arg(kWhere, "physical_to_logical");
  return guarded(kWhere, [&] {
    config->options.set_expert_placement(
        num_slots > 0 ? std::vector<int32_t>(physical_to_logical, physical_to_logical + num_slots)
                      : std::vector<int32_t>{});
    return MOE_OK;
  });
}

moe_status_t moe_eplb_rebalance(const float* load, int32_t num_experts, int32_t num_replicas,
                                int32_t num_groups, int32_t num_nodes, int32_t num_gpus,
                                int32_t* physical_to_logical) {
  static constexpr const char* kWhere = "moe_eplb_rebalance";
  if (load == nullptr) return null_arg(kWhere, "load");
  if (physical_to_logical == nullptr) return null_arg(kWhere, "physical_to_logical");
  if (num_experts < 1)
    return set_error(MOE_INVALID_ARGUMENT, std::string(kWhere) + ": num_experts must be >= 1");
  return guarded(kWhere, [&] {
    const moe::parallel::ExpertReplication r =
        moe::parallel::eplb::rebalance(std::span<const float>(load, static_cast<size_t>(num_experts)),
                                       num_replicas, num_groups, num_nodes, num_gpus);
    std::copy(r.physical_to_logical.begin(), r.physical_to_logical.end(), physical_to_logical);
    return MOE_OK;
  });
}

moe_status_t moe_layer_expert_parallel(const moe_layer_t* layer, int32_t* rank, int32_t* world_size,
                                       int32_t* plans_locally) {
  if (layer == nullptr) return null_arg("moe_layer_expert_parallel", "layer");
  const std::optional<moe::api::ExpertParallelInfo> info = moe::api::expert_parallel_info(*layer->layer);
  if (rank) *rank = info ? info->rank : 0;
  if (world_size) *world_size = info ? info->world_size : 0;
  if (plans_locally) *plans_locally = info && info->plans_locally ? 1 : 0;
  return MOE_OK;
}

moe_status_t moe_layer_create(const moe_weights_t* weights, const moe_layer_config_t* config,
                              moe_layer_t** out) {
  static constexpr const char* kWhere = "moe_layer_create";
  if (out == nullptr) return null_arg(kWhere, "out");
  *out = nullptr;
  if (weights == nullptr) return null_arg(kWhere, "weights");
  return guarded(kWhere, [&] {
    const moe::api::LayerOptions o = config ? config->options : moe::api::LayerOptions{};
    auto handle = std::make_unique<moe_layer>();
    if (o.expert_parallel.enabled()) {
      check_ep_device(o);
      handle->layer = moe::api::make_expert_parallel_layer(
          o.expert_parallel, moe::api::make_config(o, *weights->weights), weights->weights);
    } else {
      handle->layer =
          moe::api::make_layer(o.device, moe::api::make_config(o, *weights->weights), weights->weights);
    }
    handle->meta.reserve(handle->layer->config().max_tokens);
    handle->stats.expert_load.assign(handle->layer->num_experts(), 0);
    *out = handle.release();
    return MOE_OK;
  });
}

moe_status_t moe_layer_create_pretrained(const char* dir, int32_t layer_index,
                                         const moe_layer_config_t* config, moe_layer_t** out) {
  static constexpr const char* kWhere = "moe_layer_create_pretrained";
  if (out == nullptr) return null_arg(kWhere, "out");
  *out = nullptr;
  if (dir == nullptr) return null_arg(kWhere, "dir");
  return guarded(kWhere, [&] {
    if (config != nullptr && config->options.expert_parallel.enabled()) {  // each rank reads its part
      check_ep_device(config->options);
      auto handle = std::make_unique<moe_layer>();
      handle->layer = moe::api::make_expert_parallel_layer(config->options, dir, layer_index);
      handle->meta.reserve(handle->layer->config().max_tokens);
      handle->stats.expert_load.assign(handle->layer->num_experts(), 0);
      *out = handle.release();
      return MOE_OK;
    }
    const moe::io::Pretrained p = moe::io::open_pretrained(dir);
    const moe::api::LayerOptions o =
        moe::api::pretrained_options(config ? config->options : moe::api::LayerOptions{}, p.config);
    auto weights = std::make_shared<const moe::io::LayerWeights>(
        moe::io::load_pretrained_layer(p, layer_index, o.storage));
    auto handle = std::make_unique<moe_layer>();
    handle->layer = moe::api::make_layer(o.device, moe::api::make_config(o, *weights), weights);
    handle->meta.reserve(handle->layer->config().max_tokens);
    handle->stats.expert_load.assign(handle->layer->num_experts(), 0);
    *out = handle.release();
    return MOE_OK;
  });
}

void moe_layer_destroy(moe_layer_t* layer) {
  delete layer;
}

moe_status_t moe_layer_dims(const moe_layer_t* layer, int64_t* hidden, int32_t* num_experts, int32_t* top_k) {
  if (layer == nullptr) return null_arg("moe_layer_dims", "layer");
  if (hidden) *hidden = layer->layer->hidden();
  if (num_experts) *num_experts = layer->layer->num_experts();
  if (top_k) *top_k = layer->layer->top_k();
  return MOE_OK;
}

moe_status_t moe_routing_state_create(const moe_layer_t* layer, moe_routing_state_t** out) {
  if (out == nullptr) return null_arg("moe_routing_state_create", "out");
  *out = nullptr;
  if (layer == nullptr) return null_arg("moe_routing_state_create", "layer");
  return guarded("moe_routing_state_create", [&] {
    *out = new moe_routing_state(layer->layer->num_experts(), layer->layer->top_k());
    return MOE_OK;
  });
}

moe_status_t moe_routing_state_create_recording(const moe_layer_t* layer, moe_routing_state_t** out) {
  if (out == nullptr) return null_arg("moe_routing_state_create_recording", "out");
  *out = nullptr;
  if (layer == nullptr) return null_arg("moe_routing_state_create_recording", "layer");
  return guarded("moe_routing_state_create_recording", [&] {
    *out = new moe_routing_state(layer->layer->num_experts(), layer->layer->top_k(), true);
    return MOE_OK;
  });
}

moe_status_t moe_routing_state_segment(const moe_routing_state_t* state, uint64_t request_id, uint32_t begin,
                                       uint32_t end, uint8_t* buf, int64_t buf_len, int64_t* size) {
  static constexpr const char* kWhere = "moe_routing_state_segment";
  if (state == nullptr) return null_arg(kWhere, "state");
  if (size == nullptr) return null_arg(kWhere, "size");
  return guarded(kWhere, [&] {
    const std::vector<uint8_t> bytes = state->state.segment(request_id, begin, end).serialize();
    *size = static_cast<int64_t>(bytes.size());
    if (buf == nullptr || buf_len < *size) {
      return set_error(MOE_BUFFER_TOO_SMALL, std::string(kWhere) + ": the segment takes " +
                                                 std::to_string(*size) + " bytes, the buffer holds " +
                                                 std::to_string(buf == nullptr ? 0 : buf_len));
    }
    std::memcpy(buf, bytes.data(), bytes.size());
    return MOE_OK;
  });
}

moe_status_t moe_routing_state_restore_turns(moe_routing_state_t* state, uint64_t request_id,
                                             const uint32_t* turn_ends, int64_t num_turn_ends,
                                             const uint8_t* const* segments, const int64_t* segment_sizes,
                                             int64_t num_segments) {
  if (turn_ends == nullptr) return null_arg("moe_routing_state_restore_turns", "turn_ends");
  return restore_prefix("moe_routing_state_restore_turns", state, request_id, turn_ends, num_turn_ends, 0,
                        segments, segment_sizes, num_segments);
}

moe_status_t moe_routing_state_admit_turns(moe_routing_state_t* state, uint64_t request_id,
                                           const uint32_t* turn_ends, int64_t num_turn_ends) {
  static constexpr const char* kWhere = "moe_routing_state_admit_turns";
  if (state == nullptr) return null_arg(kWhere, "state");
  return guarded(kWhere, [&] {
    state->state.admit(request_id, turn_ends_arg(kWhere, turn_ends, num_turn_ends));
    return MOE_OK;
  });
}

moe_status_t moe_prefix_cache_salt_turns(const moe_layer_t* layer, uint32_t prefix_end,
                                         const uint32_t* turn_ends, int64_t num_turn_ends, uint64_t* salt) {
  static constexpr const char* kWhere = "moe_prefix_cache_salt_turns";
  if (layer == nullptr) return null_arg(kWhere, "layer");
  if (salt == nullptr) return null_arg(kWhere, "salt");
  return guarded(kWhere, [&] {
    *salt = moe::prefix_cache_salt(layer->layer->config().policy, prefix_end,
                                   turn_ends_arg(kWhere, turn_ends, num_turn_ends));
    return MOE_OK;
  });
}

moe_status_t moe_routing_state_restore(moe_routing_state_t* state, uint64_t request_id,
                                       uint32_t prompt_length, const uint8_t* const* segments,
                                       const int64_t* segment_sizes, int64_t num_segments) {
  return restore_prefix("moe_routing_state_restore", state, request_id, nullptr, 0, prompt_length, segments,
                        segment_sizes, num_segments);
}

moe_status_t moe_routing_state_rollback(moe_routing_state_t* state, uint64_t request_id, uint32_t position) {
  if (state == nullptr) return null_arg("moe_routing_state_rollback", "state");
  return guarded("moe_routing_state_rollback", [&] {
    state->state.rollback(request_id, position);
    return MOE_OK;
  });
}

moe_status_t moe_prefix_cache_salt(const moe_layer_t* layer, uint32_t prefix_end, uint32_t prompt_length,
                                   uint64_t* salt) {
  if (layer == nullptr) return null_arg("moe_prefix_cache_salt", "layer");
  if (salt == nullptr) return null_arg("moe_prefix_cache_salt", "salt");
  *salt = moe::prefix_cache_salt(layer->layer->config().policy, prefix_end, prompt_length);
  return MOE_OK;
}

moe_status_t moe_routing_state_admit(moe_routing_state_t* state, uint64_t request_id,
                                     uint32_t prompt_length) {
  if (state == nullptr) return null_arg("moe_routing_state_admit", "state");
  return guarded("moe_routing_state_admit", [&] {
    state->state.admit(request_id, prompt_length);
    return MOE_OK;
  });
}

moe_status_t moe_routing_state_release(moe_routing_state_t* state, uint64_t request_id) {
  if (state == nullptr) return null_arg("moe_routing_state_release", "state");
  return guarded("moe_routing_state_release", [&] {
    state->state.release(request_id);
    return MOE_OK;
  });
}

moe_status_t moe_routing_state_num_requests(const moe_routing_state_t* state, int64_t* out) {
  if (state == nullptr) return null_arg("moe_routing_state_num_requests", "state");
  if (out == nullptr) return null_arg("moe_routing_state_num_requests", "out");
  *out = static_cast<int64_t>(state->state.num_requests());
  return MOE_OK;
}

void moe_routing_state_destroy(moe_routing_state_t* state) {
  delete state;
}

moe_status_t moe_layer_forward(moe_layer_t* layer, const float* x, int64_t num_tokens, int64_t hidden,
                               const uint64_t* request_ids, const uint32_t* positions, float* y,
                               moe_routing_state_t* state) {
  static constexpr const char* kWhere = "moe_layer_forward";
  if (layer == nullptr) return null_arg(kWhere, "layer");
  if (num_tokens < 0 || num_tokens > INT32_MAX) {
    return set_error(MOE_INVALID_ARGUMENT, std::string(kWhere) + ": num_tokens must be in [0, 2^31) (got " +
                                               std::to_string(num_tokens) + ")");
  }
  if (hidden != layer->layer->hidden()) {
    return set_error(MOE_INVALID_ARGUMENT, std::string(kWhere) + ": hidden (" + std::to_string(hidden) +
                                               ") does not match the layer's hidden size (" +
                                               std::to_string(layer->layer->hidden()) + ")");
  }
  if (num_tokens > 0) {
    if (x == nullptr) return null_arg(kWhere, "x");
    if (y == nullptr) return null_arg(kWhere, "y");
    if (request_ids == nullptr) return null_arg(kWhere, "request_ids");
    if (positions == nullptr) return null_arg(kWhere, "positions");
  }
  return guarded(kWhere, [&] {
    layer->meta.resize(static_cast<size_t>(num_tokens));
    for (int64_t t = 0; t < num_tokens; ++t) layer->meta[t] = moe::TokenMeta{request_ids[t], positions[t]};
    layer->layer->forward(x, static_cast<int>(num_tokens), layer->meta, y, state ? &state->state : nullptr,
                          &layer->stats);
    layer->has_run = true;
    return MOE_OK;
  });
}

moe_status_t moe_layer_stats(const moe_layer_t* layer, moe_stats_t* stats, int32_t* expert_load,
                             int64_t expert_load_len) {
  static constexpr const char* kWhere = "moe_layer_stats";
  if (layer == nullptr) return null_arg(kWhere, "layer");
  const int num_experts = layer->layer->num_experts();
  if (expert_load != nullptr && expert_load_len < num_experts) {
    return set_error(MOE_BUFFER_TOO_SMALL,
                     std::string(kWhere) + ": expert_load holds " + std::to_string(expert_load_len) +
                         " entries but the layer has " + std::to_string(num_experts) + " experts");
  }
  const moe::MoEStats& s = layer->stats;
  if (stats != nullptr) {
    stats->num_tokens = layer->has_run ? s.num_tokens : 0;
    stats->num_kept = layer->has_run ? s.num_kept : 0;
    stats->num_rerouted = layer->has_run ? s.num_rerouted : 0;
    stats->num_dropped = layer->has_run ? s.num_dropped : 0;
    stats->num_tokens_fully_dropped = layer->has_run ? s.num_tokens_fully_dropped : 0;
  }
  if (expert_load != nullptr) {
    for (int e = 0; e < num_experts; ++e) {
      expert_load[e] = layer->has_run && e < static_cast<int>(s.expert_load.size()) ? s.expert_load[e] : 0;
    }
  }
  return MOE_OK;
}

moe_status_t moe_layer_last_plan(const moe_layer_t* layer, int32_t* pair_expert, int32_t* pair_slot,
                                 float* pair_weight, uint8_t* pair_status, int64_t capacity,
                                 int64_t* num_pairs) {
  static constexpr const char* kWhere = "moe_layer_last_plan";
  if (layer == nullptr) return null_arg(kWhere, "layer");
  if (num_pairs == nullptr) return null_arg(kWhere, "num_pairs");
  const moe::DispatchPlan& plan = layer->layer->last_plan();
  const int64_t n = layer->has_run ? plan.num_pairs() : 0;
  *num_pairs = n;
  const bool any = pair_expert || pair_slot || pair_weight || pair_status;
  if (any && capacity < n) {
    return set_error(MOE_BUFFER_TOO_SMALL, std::string(kWhere) + ": buffers hold " +
                                               std::to_string(capacity) + " entries but the plan has " +
                                               std::to_string(n) + " pairs");
  }
  for (int64_t p = 0; p < n; ++p) {
    if (pair_expert) pair_expert[p] = plan.pair_expert[p];
    if (pair_slot) pair_slot[p] = plan.pair_slot[p];
    if (pair_weight) pair_weight[p] = plan.pair_weight[p];
    if (pair_status) pair_status[p] = static_cast<uint8_t>(plan.pair_status[p]);
  }
  return MOE_OK;
}

moe_status_t moe_layer_fingerprint(const moe_layer_t* layer, char* buffer, size_t buffer_size,
                                   size_t* required) {
  static constexpr const char* kWhere = "moe_layer_fingerprint";
  if (layer == nullptr) return null_arg(kWhere, "layer");
  return guarded(kWhere, [&] {
    const std::string json = layer->layer->fingerprint().to_json();
    const size_t need = json.size() + 1;
    if (required != nullptr) *required = need;
    if (buffer == nullptr && buffer_size == 0) return MOE_OK;
    if (buffer == nullptr) return null_arg(kWhere, "buffer (with buffer_size > 0)");
    if (buffer_size < need) {
      return set_error(MOE_BUFFER_TOO_SMALL, std::string(kWhere) + ": buffer holds " +
                                                 std::to_string(buffer_size) +
                                                 " bytes but the fingerprint needs " + std::to_string(need));
    }
    std::memcpy(buffer, json.c_str(), need);
    return MOE_OK;
  });
}

}  // extern "C"

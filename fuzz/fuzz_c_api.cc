// The C API's argument checking (moe/api/moe_c.h): shapes, dtypes, buffers, config values, forward arguments
// and output buffer sizes taken from the input. Every call returns a status of the enum; a failed call leaves
// a message and its outputs as documented (handles NULL, y unchanged); no call crashes or reads past a
// buffer. The harness passes only honest buffers (as large as the sizes it states), and keeps the sizes the
// caller asks to allocate small (a layer's shape when its weights are built, max_tokens, num_threads): those
// are the caller's memory, which the API may use as asked (allocation failure is MOE_OUT_OF_MEMORY).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/c_caller.h"
#include "fuzz/fuzz_util.h"
#include "moe/api/moe_c.h"

namespace {

// Reads the input front to back; past the end every read is 0.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }
  // Mostly small values around the valid range, sometimes any 64-bit value.
  int64_t int_value(int64_t lo, int64_t hi) {
    const uint8_t b = byte();
    if (b < 224) return lo + static_cast<int64_t>(b % static_cast<uint64_t>(hi - lo + 1));
    if (b < 240) return -static_cast<int64_t>(b & 7);
    return static_cast<int64_t>(u64());
  }
  float value() {
    const uint8_t b = byte();
    if (b == 255) return std::nanf("");
    if (b == 254) return INFINITY;
    return (static_cast<float>(b) - 127.0f) / 32.0f;
  }
  std::string text(const char* const* names, size_t n) {
    const uint8_t b = byte();
    if (b < 224) return names[b % n];
    std::string s;
    for (int len = byte() % 12; len > 0; --len) s += static_cast<char>(byte());
    return s;
  }
  bool flag() { return byte() & 1; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

void check_status(moe_status_t s) {
  MOE_FUZZ_CHECK(s >= MOE_OK && s <= MOE_BUFFER_TOO_SMALL);
  if (s != MOE_OK) MOE_FUZZ_CHECK(moe_last_error()[0] != '\0');
}

int32_t clamp32(int64_t v) {
  return static_cast<int32_t>(v);  // wraps: any 32-bit value is a valid test of the argument check
}

// Honest buffers for a small shape.
struct Buffers {
  std::vector<float> gate, bias, shared_gate_vec;
  std::vector<std::vector<uint8_t>> experts;  // 3 per expert
  std::vector<uint8_t> shared[3];
  std::vector<const void*> gate_ptrs, up_ptrs, down_ptrs;
  moe_weight_buffers_t b{};
};

void fill(std::vector<uint8_t>& v, size_t bytes, Input& in) {
  v.assign(bytes, 0);
  for (size_t i = 0; i < bytes; i += 2) v[i] = in.byte() & 0x3f;  // small finite f32 / bf16 patterns
}

moe_weights_t* make_weights(const moe_layer_shape_t& shape, bool small, Input& in) {
  moe_weights_t* w = nullptr;
  const int32_t dtype =
      in.flag() ? MOE_DTYPE_F32 : (in.flag() ? MOE_DTYPE_BF16 : static_cast<int32_t>(in.byte()));
  if (!small) {
    // A shape too large to back with buffers: the call must refuse it without reading any (no expert arrays).
    moe_weight_buffers_t b{};
    c_caller_set_dtype(&b, dtype);
    const moe_status_t s = moe_weights_from_buffers(&shape, &b, &w);
    check_status(s);
    MOE_FUZZ_CHECK(s != MOE_OK && w == nullptr);
    return nullptr;
  }
  if (in.flag()) {
    const moe_status_t s = c_caller_weights_random(&shape, dtype, in.u64(), &w);
    check_status(s);
    MOE_FUZZ_CHECK((s == MOE_OK) == (w != nullptr));
    return w;
  }
  const size_t elem = dtype == MOE_DTYPE_BF16 ? 2 : 4;
  const size_t E = static_cast<size_t>(shape.num_experts > 0 ? shape.num_experts : 0);
  const size_t d = static_cast<size_t>(shape.hidden > 0 ? shape.hidden : 0);
  const size_t ff = static_cast<size_t>(shape.expert_ff > 0 ? shape.expert_ff : 0);
  const size_t sff = static_cast<size_t>(shape.shared_ff > 0 ? shape.shared_ff : 0);
  Buffers buf;
  c_caller_set_dtype(&buf.b, dtype);
  buf.gate.assign(E * d, 0.01f);
  buf.b.router_gate = in.byte() == 0 ? nullptr : buf.gate.data();
  buf.bias.assign(E, 0.0f);
  buf.b.score_bias = in.flag() ? buf.bias.data() : nullptr;
  buf.experts.resize(3 * E);
  for (size_t e = 0; e < E; ++e) {
    fill(buf.experts[3 * e], ff * d * elem, in);
    fill(buf.experts[3 * e + 1], ff * d * elem, in);
    fill(buf.experts[3 * e + 2], d * ff * elem, in);
    buf.gate_ptrs.push_back(buf.experts[3 * e].data());
    buf.up_ptrs.push_back(buf.experts[3 * e + 1].data());
    buf.down_ptrs.push_back(buf.experts[3 * e + 2].data());
  }
  // A null entry in an expert array, sometimes.
  if (E > 0 && in.byte() == 1) buf.up_ptrs[E - 1] = nullptr;
  buf.b.expert_gate_proj = E > 0 ? buf.gate_ptrs.data() : nullptr;
  buf.b.expert_up_proj = E > 0 ? buf.up_ptrs.data() : nullptr;
  buf.b.expert_down_proj = E > 0 ? buf.down_ptrs.data() : nullptr;
  if (in.flag()) {
    for (auto& s : buf.shared) fill(s, sff * d * elem, in);
    buf.b.shared_gate_proj = buf.shared[0].data();
    buf.b.shared_up_proj = buf.shared[1].data();
    buf.b.shared_down_proj = buf.shared[2].data();
  }
  buf.shared_gate_vec.assign(d, 0.1f);
  buf.b.shared_expert_gate = in.flag() ? buf.shared_gate_vec.data() : nullptr;
  const moe_status_t s = moe_weights_from_buffers(&shape, &buf.b, &w);
  check_status(s);
  MOE_FUZZ_CHECK((s == MOE_OK) == (w != nullptr));
  return w;
}

moe_layer_config_t* make_config(Input& in) {
  static const char* const kPresets[] = {"deterministic", "greedy"};
  static const char* const kRouters[] = {"mixtral", "qwen2-moe", "deepseek-v3", "olmoe", "switch"};
  static const char* const kScopes[] = {"batch", "request", "causal", "sequence", "none"};
  static const char* const kPriorities[] = {"arrival", "request", "score", "random"};
  static const char* const kOverflows[] = {"drop", "reroute"};
  static const char* const kKernels[] = {"invariant", "fast"};
  static const char* const kDevices[] = {"cpu", "cuda", "cuda:0"};
  moe_layer_config_t* c = nullptr;
  check_status(moe_layer_config_create(&c));
  MOE_FUZZ_CHECK(c != nullptr);
  for (int n = in.byte() % 8; n > 0; --n) {
    moe_status_t s = MOE_OK;
    switch (in.byte() % 14) {
      case 0:
        s = moe_layer_config_set_preset(c, in.text(kPresets, 2).c_str());
        break;
      case 1:
        s = moe_layer_config_set_router(c, in.text(kRouters, 5).c_str());
        break;
      case 2:
        s = moe_layer_config_set_top_k(c, clamp32(in.int_value(0, 9)));
        break;
      case 3:
        s = moe_layer_config_set_renormalize(c, clamp32(in.int_value(0, 2)));
        break;
      case 4:
        s = moe_layer_config_set_groups(c, clamp32(in.int_value(0, 5)), clamp32(in.int_value(0, 5)));
        break;
      case 5:
        s = moe_layer_config_set_capacity_factor(c, in.flag() ? in.value() : static_cast<double>(in.u64()));
        break;
      case 6:
        s = moe_layer_config_set_min_capacity(c, clamp32(in.int_value(0, 4)));
        break;
      case 7:
        s = moe_layer_config_set_scope(c, in.text(kScopes, 5).c_str());
        break;
      case 8:
        s = moe_layer_config_set_priority(c, in.text(kPriorities, 4).c_str());
        break;
      case 9:
        s = moe_layer_config_set_overflow(c, in.text(kOverflows, 2).c_str());
        break;
      case 10:
        s = moe_layer_config_set_reroute_depth(c, clamp32(in.int_value(0, 4)));
        break;
      case 11:
        s = moe_layer_config_set_kernel(c, in.text(kKernels, 2).c_str());
        break;
      case 12:
        s = moe_layer_config_set_num_threads(c, static_cast<int32_t>(in.byte() % 4) - 1);
        break;
      case 13:
        s = in.flag() ? moe_layer_config_set_max_tokens(c, static_cast<int32_t>(in.byte() % 40) - 2)
                      : moe_layer_config_set_device(c, in.text(kDevices, 3).c_str());
        break;
    }
    check_status(s);
  }
  return c;
}

void exercise_layer(moe_layer_t* layer, Input& in) {
  int64_t hidden = 0;
  int32_t E = 0, k = 0;
  check_status(moe_layer_dims(layer, &hidden, &E, &k));
  MOE_FUZZ_CHECK(hidden >= 1 && E >= 1 && k >= 1 && k <= E);
  moe_routing_state_t* state = nullptr;
  if (in.flag()) {
    check_status(moe_routing_state_create(layer, &state));
    for (int n = in.byte() % 4; n > 0; --n) {
      check_status(moe_routing_state_admit(state, in.byte() % 4, static_cast<uint32_t>(in.int_value(0, 6))));
    }
  }
  for (int pass = in.byte() % 4; pass > 0; --pass) {
    const bool wild = in.byte() == 7;
    const int64_t T = wild ? static_cast<int64_t>(in.u64()) : static_cast<int64_t>(in.byte() % 20) - 1;
    const int64_t h = in.byte() < 240 ? hidden : in.int_value(0, 3 * hidden);
    const size_t rows = T > 0 && !wild ? static_cast<size_t>(T) : 0;
    const size_t width = static_cast<size_t>(hidden);
    std::vector<float> x(rows * width), y(rows * width, 12345.0f);
    for (float& v : x) v = in.value();
    std::vector<uint64_t> ids(rows);
    std::vector<uint32_t> pos(rows);
    for (size_t t = 0; t < rows; ++t) {
      ids[t] = in.byte() % 4;
      pos[t] = in.byte() % 8;
    }
    const bool null_x = in.byte() == 3;
    // Pointers for a wild T are NULL: the API must refuse before reading (T out of range, or NULL rows).
    const moe_status_t s =
        moe_layer_forward(layer, null_x || wild ? nullptr : x.data(), T, h, wild ? nullptr : ids.data(),
                          wild ? nullptr : pos.data(), wild ? nullptr : y.data(), state);
    check_status(s);
    if (wild && T != 0) MOE_FUZZ_CHECK(s != MOE_OK);
    if (s != MOE_OK) {
      for (float v : y) MOE_FUZZ_CHECK(v == 12345.0f);  // y unchanged on an error
    }
  }
  moe_stats_t stats;
  const int64_t load_len = in.int_value(0, 2 * E);
  std::vector<int32_t> load(load_len > 0 && load_len <= 64 ? static_cast<size_t>(load_len) : 0);
  const bool give_load = !load.empty() || in.flag();
  int32_t no_room = 0;  // a non-NULL buffer of length 0
  int32_t* load_ptr = give_load ? (load.empty() ? &no_room : load.data()) : nullptr;
  const moe_status_t ss = moe_layer_stats(layer, in.flag() ? &stats : nullptr, load_ptr,
                                          give_load ? static_cast<int64_t>(load.size()) : load_len);
  check_status(ss);
  if (give_load && static_cast<int64_t>(load.size()) < E) MOE_FUZZ_CHECK(ss == MOE_BUFFER_TOO_SMALL);
  const int64_t cap = in.int_value(0, 64);
  const size_t n = cap > 0 && cap <= 256 ? static_cast<size_t>(cap) : 0;
  // At least one element each, so that a capacity of 0 still comes with non-NULL buffers.
  std::vector<int32_t> pe(n + 1), ps(n + 1);
  std::vector<float> pw(n + 1);
  std::vector<uint8_t> pst(n + 1);
  int64_t num_pairs = -1;
  const uint8_t which = in.byte();
  const moe_status_t ps_status =
      moe_layer_last_plan(layer, which & 1 ? pe.data() : nullptr, which & 2 ? ps.data() : nullptr,
                          which & 4 ? pw.data() : nullptr, which & 8 ? pst.data() : nullptr,
                          static_cast<int64_t>(n), which & 16 ? nullptr : &num_pairs);
  check_status(ps_status);
  if (ps_status == MOE_OK)
    MOE_FUZZ_CHECK(num_pairs >= 0 && (!(which & 15) || num_pairs <= static_cast<int64_t>(n)));
  size_t required = 0;
  const size_t size = in.byte() % 2 ? 0 : in.byte() * 8;
  std::vector<char> fp(size + 1);
  const moe_status_t fs =
      moe_layer_fingerprint(layer, size ? fp.data() : (in.flag() ? nullptr : fp.data()), size, &required);
  check_status(fs);
  if (fs == MOE_OK && size > 0) MOE_FUZZ_CHECK(std::strlen(fp.data()) + 1 == required);
  moe_routing_state_destroy(state);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  moe_layer_shape_t shape;
  shape.hidden = in.int_value(1, 8);
  shape.expert_ff = in.int_value(1, 8);
  shape.num_experts = clamp32(in.int_value(1, 6));
  shape.num_shared_experts = clamp32(in.int_value(0, 2));
  shape.shared_ff = in.int_value(0, 8);
  shape.shared_expert_gate = clamp32(in.int_value(0, 1));
  shape.score_bias = clamp32(in.int_value(0, 1));
  const bool small =
      shape.hidden <= 16 && shape.expert_ff <= 16 && shape.num_experts <= 16 && shape.shared_ff <= 16;
  moe_weights_t* w = make_weights(shape, small, in);
  if (w == nullptr) return 0;
  moe_layer_shape_t back;
  check_status(moe_weights_shape(w, &back));
  MOE_FUZZ_CHECK(back.hidden == shape.hidden && back.num_experts == shape.num_experts);
  uint64_t hash = 0;
  check_status(moe_weights_hash(w, &hash));
  moe_layer_config_t* config = in.flag() ? make_config(in) : nullptr;
  moe_layer_t* layer = nullptr;
  const moe_status_t s = moe_layer_create(w, config, &layer);
  check_status(s);
  MOE_FUZZ_CHECK((s == MOE_OK) == (layer != nullptr));
  moe_layer_config_destroy(config);
  moe_weights_destroy(w);  // the layer keeps its own reference
  if (layer != nullptr) exercise_layer(layer, in);
  moe_layer_destroy(layer);
  return 0;
}

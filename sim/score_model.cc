#include "sim/score_model.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "sim/errors.h"
#include "sim/normal_draw.h"
#include "sim/rng.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

constexpr uint64_t kTopicTag = 0x544f504943ull;    // "TOPIC"
constexpr uint64_t kPopularityTag = 0x504f50ull;   // "POP"
constexpr uint64_t kTopicPosition = ~uint64_t{0};  // a position no token has
constexpr int kMaxDrawn = 2048;                    // noise drawn per block (on the stack)

}  // namespace

Skew Skew::parse(std::string_view spec) {
  Skew s;
  if (spec == "none") return s;
  if (spec == "explicit") {
    s.kind = Kind::kExplicit;
    return s;
  }
  const size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  if (colon == std::string_view::npos || (kind != "zipf" && kind != "dirichlet")) {
    throw UsageError("bad skew '" + std::string(spec) +
                     "' (expected none, zipf:S, dirichlet:ALPHA or explicit with popularity = [...])");
  }
  s.kind = kind == "zipf" ? Kind::kZipf : Kind::kDirichlet;
  s.param = parse_double(spec.substr(colon + 1), "skew " + std::string(kind));
  if (s.kind == Kind::kZipf && !(s.param >= 0.0 && std::isfinite(s.param))) {
    throw UsageError("bad skew '" + std::string(spec) + "': the zipf exponent must be finite and >= 0");
  }
  if (s.kind == Kind::kDirichlet && !(s.param > 0.0 && std::isfinite(s.param))) {
    throw UsageError("bad skew '" + std::string(spec) +
                     "': the dirichlet concentration must be finite and > 0");
  }
  return s;
}

Skew Skew::explicit_values(std::vector<double> values) {
  if (values.empty()) throw UsageError("popularity is empty (one value per expert)");
  for (size_t e = 0; e < values.size(); ++e) {
    if (!std::isfinite(values[e])) {
      throw UsageError("popularity value " + std::to_string(e) + " is not finite (" +
                       format_double(values[e]) + ")");
    }
  }
  Skew s;
  s.kind = Kind::kExplicit;
  s.values = std::move(values);
  return s;
}

std::string Skew::to_string() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kZipf:
      return "zipf:" + format_double(param);
    case Kind::kDirichlet:
      return "dirichlet:" + format_double(param);
    case Kind::kExplicit:
      return "explicit";
  }
  return "none";
}

void ScoreModelConfig::validate() const {
  if (!(temperature > 0.0) || !std::isfinite(temperature)) {
    throw UsageError("temperature must be finite and > 0 (got " + format_double(temperature) + ")");
  }
  if (!(topic_rho >= 0.0 && topic_rho <= 1.0)) {
    throw UsageError("topic-rho must be in [0, 1] (got " + format_double(topic_rho) + ")");
  }
  if (!(noise_std >= 0.0) || !std::isfinite(noise_std)) {
    throw UsageError("noise-std must be finite and >= 0 (got " + format_double(noise_std) + ")");
  }
  if (skew.kind == Skew::Kind::kExplicit) {
    if (skew.values.empty()) {
      throw UsageError(
          "skew explicit needs its values: popularity = [...] (--popularity LIST, one per expert)");
    }
    Skew::explicit_values(skew.values);  // throws for a value that is not finite
  }
}

ScoreModelConfig named_score_model(std::string_view name) {
  ScoreModelConfig c;
  if (name == "gaussian") return c;
  if (name == "mixtral-8x7b") {
    // The fit (docs/cli.md "Score models"): zipf and rho chosen on a grid so that, at E 8 k 2, the routing
    // statistics sit nearest the centres of the published ranges (minimax of |stat - centre| / half-width).
    c.name = "mixtral-8x7b";
    c.skew = Skew::parse("zipf:0.18");
    c.topic_rho = 0.43;
    c.noise_std = 1.0;
    c.temperature = 1.0;
    return c;
  }
  std::string known;
  for (const auto& n : score_model_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("unknown score model '" + std::string(name) + "' (known: " + known + ")");
}

const std::vector<std::string>& score_model_names() {
  static const std::vector<std::string> names = {"gaussian", "mixtral-8x7b"};
  return names;
}

ScoreModel::ScoreModel(const ScoreModelConfig& config, int num_experts, uint64_t seed)
    : config_(config), num_experts_(num_experts), seed_(seed), popularity_(num_experts, 0.0) {
  config_.validate();
  if (num_experts < 1) throw UsageError("score model: num_experts must be >= 1");
  switch (config_.skew.kind) {
    case Skew::Kind::kNone:
      break;
    case Skew::Kind::kZipf:
      for (int e = 0; e < num_experts; ++e) popularity_[e] = -config_.skew.param * std::log(e + 1.0);
      break;
    case Skew::Kind::kDirichlet: {
      Rng rng(stream_key(seed, kPopularityTag));
      double mean = 0.0;
      for (int e = 0; e < num_experts; ++e) {
        // Normalising p does not change ln(p) - mean ln(p), so the gamma draws are used directly.
        const double g = std::max(rng.gamma(config_.skew.param), 1e-300);
        popularity_[e] = std::log(g);
        mean += popularity_[e];
      }
      mean /= num_experts;
      for (double& p : popularity_) p -= mean;
      break;
    }
    case Skew::Kind::kExplicit:
      if (config_.skew.values.size() != static_cast<size_t>(num_experts)) {
        throw UsageError("popularity has " + std::to_string(config_.skew.values.size()) +
                         " values, the router has " + std::to_string(num_experts) +
                         " experts (one value per expert)");
      }
      popularity_ = config_.skew.values;
      break;
  }
  const double inv_t = 1.0 / config_.temperature;
  pop_base_.resize(num_experts);
  for (int e = 0; e < num_experts; ++e) pop_base_[e] = popularity_[e] * inv_t;
  noise_scale_ = config_.noise_std * std::sqrt(1.0 - config_.topic_rho * config_.topic_rho) * inv_t;
}

void ScoreModel::base_of(uint64_t request_id, double* out) const {
  const double rho = config_.topic_rho;
  const double inv_t = 1.0 / config_.temperature;
  std::vector<float> z(num_experts_);
  draw_normals(stream_key(seed_, request_id, kTopicPosition, kTopicTag), 0, num_experts_, z.data());
  for (int e = 0; e < num_experts_; ++e) out[e] = (popularity_[e] + config_.noise_std * rho * z[e]) * inv_t;
}

void ScoreModel::token_from_base(const TokenMeta& token, const double* base, float* out) const {
  float noise[kMaxDrawn];
  const double c = noise_scale_;
  const uint64_t key = stream_key(seed_, token.request_id, token.position);
  for (int first = 0; first < num_experts_; first += kMaxDrawn) {
    const int n = std::min(kMaxDrawn, num_experts_ - first);
    draw_normals(key, first, n, noise);
    for (int e = 0; e < n; ++e) out[first + e] = static_cast<float>(base[first + e] + c * noise[e]);
  }
}

ScoreModel::TopicCache::TopicCache(const ScoreModel& model)
    : model_(&model),
      slots_(model.config_.topic_rho > 0.0
                 ? std::bit_floor(static_cast<size_t>(std::clamp((1 << 18) / model.num_experts_, 16, 16384)))
                 : 0),
      ids_(slots_),
      valid_(slots_, false),
      values_(slots_ * static_cast<size_t>(model.num_experts_)) {}

const double* ScoreModel::TopicCache::base(uint64_t request_id) {
  if (slots_ == 0) return model_->pop_base_.data();
  const size_t slot = static_cast<size_t>(request_id & (slots_ - 1));  // slots_ is a power of two
  double* v = values_.data() + slot * static_cast<size_t>(model_->num_experts_);
  if (!valid_[slot] || ids_[slot] != request_id) {
    model_->base_of(request_id, v);
    ids_[slot] = request_id;
    valid_[slot] = true;
  }
  return v;
}

void ScoreModel::token_logits(const TokenMeta& token, float* out) const {
  if (config_.topic_rho > 0.0) {
    std::vector<double> base(num_experts_);
    base_of(token.request_id, base.data());
    token_from_base(token, base.data(), out);
  } else {
    token_from_base(token, pop_base_.data(), out);
  }
}

void ScoreModel::logits(std::span<const TokenMeta> rows, float* out, TopicCache& cache) const {
  const int E = num_experts_;
  if (E > kMaxDrawn) {
    for (size_t i = 0; i < rows.size(); ++i) {
      token_from_base(rows[i], cache.base(rows[i].request_id), out + i * E);
    }
    return;
  }
  // Rows in groups whose noise fits kMaxDrawn floats, drawn together (draw_normals_rows: the same draws as
  // token_from_base's), then token_from_base's expression.
  uint64_t keys[kMaxDrawn];
  float noise[kMaxDrawn];
  const size_t group = static_cast<size_t>(kMaxDrawn / E);
  const double c = noise_scale_;
  const uint64_t seed_hash = mix64(seed_);
  const double* base = nullptr;  // the topic of request base_id, once looked up
  uint64_t base_id = 0;
  for (size_t i0 = 0; i0 < rows.size(); i0 += group) {
    const size_t m = std::min(group, rows.size() - i0);
    for (size_t r = 0; r < m; ++r) {
      keys[r] = stream_key_hashed(seed_hash, rows[i0 + r].request_id, rows[i0 + r].position);
    }
    draw_normals_rows(keys, static_cast<int>(m), E, noise);
    for (size_t r = 0; r < m; ++r) {
      // A prompt chunk's rows share their request: its topic is looked up once per run of rows (the pointer
      // stays valid until the cache is asked for another request).
      if (base == nullptr || rows[i0 + r].request_id != base_id) {
        base_id = rows[i0 + r].request_id;
        base = cache.base(base_id);
      }
      const float* n = noise + r * E;
      float* o = out + (i0 + r) * E;
      for (int e = 0; e < E; ++e) o[e] = static_cast<float>(base[e] + c * n[e]);
    }
  }
}

void ScoreModel::logits(std::span<const TokenMeta> rows, std::vector<float>& out) const {
  out.resize(rows.size() * static_cast<size_t>(num_experts_));
  TopicCache cache(*this);
  logits(rows, out.data(), cache);
}

}  // namespace moe::sim

#include "sim/diverge/record.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "moe/model/model.h"
#include "sim/errors.h"
#include "sim/npy.h"

namespace moe::sim::diverge {

RecordSummary record_router_logits(std::shared_ptr<const model::ModelWeights> weights,
                                   std::span<const int32_t> text, const std::filesystem::path& dir,
                                   int64_t max_tokens, int window) {
  const model::ModelShape& s = weights->shape;
  if (window < 1 || window > s.max_positions) {
    throw std::invalid_argument("record-logits: window (" + std::to_string(window) + ") must be in [1, " +
                                std::to_string(s.max_positions) + "]");
  }
  if (text.empty()) throw std::invalid_argument("record-logits: the text has no tokens");
  const int64_t total = max_tokens > 0 ? std::min<int64_t>(max_tokens, text.size()) : text.size();
  model::ModelOptions o;
  o.kernel = kernels::KernelKind::kInvariant;
  o.policy = model::ModelOptions::dispatch_mode("dropless", 1.0);
  o.max_tokens = window;
  model::Model m(weights, o);
  const int E = s.num_experts;
  std::vector<LogitsMatrix> layers(s.num_layers);
  for (auto& l : layers) {
    l.cols = E;
    l.values.reserve(static_cast<size_t>(total) * E);
  }
  std::vector<std::pair<int64_t, int64_t>> meta;
  std::vector<model::BatchRow> rows;
  std::vector<int32_t> out_rows;
  std::vector<float> logits;
  RecordSummary summary;
  for (int64_t start = 0; start < total; start += window, ++summary.windows) {
    const int64_t n = std::min<int64_t>(window, total - start);
    const uint64_t id = static_cast<uint64_t>(summary.windows);
    rows.clear();
    for (int64_t t = 0; t < n; ++t) {
      rows.push_back({id, static_cast<uint32_t>(t), text[start + t]});
      meta.emplace_back(summary.windows, t);
    }
    m.forward(rows, out_rows, logits);
    m.release(id);
    for (int l = 0; l < s.num_layers; ++l) {
      const auto r = m.moe_layer(l).last_router_logits();
      layers[l].values.insert(layers[l].values.end(), r.begin(), r.end());
    }
  }
  summary.tokens = total;
  std::filesystem::create_directories(dir);
  for (int l = 0; l < s.num_layers; ++l) {
    layers[l].rows = total;
    const auto path = dir / ("layer" + std::to_string(l) + ".npy");
    write_npy_f32(path.string(), layers[l]);
    summary.files.push_back(path);
  }
  const auto meta_path = dir / "meta.csv";
  std::ofstream f(meta_path);
  f << "request_id,position\n";
  for (const auto& [r, p] : meta) f << r << ',' << p << '\n';
  if (!f) throw DataError("record-logits: cannot write " + meta_path.string());
  summary.files.push_back(meta_path);
  return summary;
}

}  // namespace moe::sim::diverge

// The trained model through the C++ side end to end: tokenizer.json + config.json + model.safetensors loaded
// by the project's loaders, the held-out text scored as python/train/train_moe.py's evaluate() does (windows
// of max_position_embeddings inputs at that stride, every token but the first predicted once, dropless,
// fp32), and the mean loss compared with training.json's held-out loss within 1e-5 relative (the torch side
// sums fp32 losses per batch of 8 windows, this side sums in double; both use the same logits to ~1e-6).
// Two threads score alternate windows; the sum runs in window order, so the result does not depend on them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "moe/model/model.h"
#include "moe/model/tokenizer.h"

namespace moe::model {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(MOE_SOURCE_DIR) / "models" / "kjv-moe";
const fs::path kCorpus = MOE_KJV_CORPUS;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(KjvModel, HeldOutPerplexityEqualsTraining) {
  const fs::path held = kCorpus / "heldout.txt";
  ASSERT_TRUE(fs::exists(held)) << held << " is missing: run scripts/fetch-corpus.sh " << kCorpus.string()
                                << " (packages from scripts/install-deps.sh)";
  const auto report = nlohmann::json::parse(read_file(kModel / "training.json"));
  const Tokenizer tok = Tokenizer::load(kModel);
  const std::vector<int32_t> stream = tok.encode(read_file(held));
  auto weights = load_pretrained(kModel);
  const int window = weights->shape.max_positions;
  ModelOptions o;
  o.kernel = kernels::KernelKind::kFast;
  o.policy = ModelOptions::dispatch_mode("dropless", 1.0);
  o.max_tokens = window;
  const int V = weights->shape.vocab_size;
  const int64_t N = static_cast<int64_t>(stream.size());
  std::vector<int64_t> starts;
  for (int64_t s = 0; s < N - 1; s += window) starts.push_back(s);
  // Each window's summed loss, computed on two threads (one Model each), added in window order.
  std::vector<double> window_loss(starts.size(), 0.0);
  auto score = [&](size_t first, size_t step) {
    Model m(weights, o);
    std::vector<BatchRow> rows;
    std::vector<int32_t> out_rows;
    std::vector<float> logits;
    for (size_t w = first; w < starts.size(); w += step) {
      const int64_t s = starts[w];
      const int64_t n = std::min<int64_t>(window, N - 1 - s);
      rows.clear();
      for (int64_t t = 0; t < n; ++t) rows.push_back({1, static_cast<uint32_t>(t), stream[s + t]});
      m.forward(rows, out_rows, logits, nullptr, LogitRows::kEvery);
      m.release(1);
      double sum_w = 0;
      for (int64_t t = 0; t < n; ++t) {
        const float* z = logits.data() + t * V;
        double mx = z[0];
        for (int v = 1; v < V; ++v) mx = std::max(mx, double(z[v]));
        double sum = 0;
        for (int v = 0; v < V; ++v) sum += std::exp(double(z[v]) - mx);
        sum_w += mx + std::log(sum) - double(z[stream[s + t + 1]]);
      }
      window_loss[w] = sum_w;
    }
  };
  std::thread helper(score, 1, 2);
  score(0, 2);
  helper.join();
  double total = 0;
  for (double l : window_loss) total += l;
  const int64_t count = N - 1;
  const double loss = total / static_cast<double>(count);
  const double want = report["heldout"]["loss"].get<double>();
  std::printf(
      "held-out: %lld tokens, loss %.7f (perplexity %.4f); training.json %.7f (%.4f), rel diff %.2g\n",
      static_cast<long long>(count), loss, std::exp(loss), want, std::exp(want),
      std::fabs(loss - want) / want);
  EXPECT_EQ(count, report["heldout"]["tokens"].get<int64_t>());
  EXPECT_LE(std::fabs(loss - want), 1e-5 * want);
}

}  // namespace
}  // namespace moe::model

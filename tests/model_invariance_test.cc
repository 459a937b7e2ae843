// moe/model bit-equality: a request's logits alone vs in a batch, chunked vs whole prefill, KV-cache decoding
// vs full recomputation (invariant kernels; memcmp, never a tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/splitmix64.h"
#include "moe/model/model.h"
#include "moe/model/ops.h"

namespace moe::model {
namespace {

std::vector<int32_t> prompt_of(int length, int vocab, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int32_t> p(length);
  for (auto& t : p) t = static_cast<int32_t>(rng.uniform_int(0, vocab - 1));
  return p;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

ModelOptions options(const char* mode, kernels::KernelKind kind = kernels::KernelKind::kInvariant) {
  ModelOptions o;
  o.kernel = kind;
  o.policy = ModelOptions::dispatch_mode(mode, 1.0);
  return o;
}

class ModelInvariance : public ::testing::TestWithParam<const char*> {};

// Request 7's rows alone, then the same rows inside a batch of strangers (prefill chunks and decode rows,
// interleaved, in several orders): its logits must be the same bits.
TEST_P(ModelInvariance, RequestAloneEqualsRequestInBatch) {
  const ModelShape shape = ModelShape::tiny();
  auto w = random_model(shape, 5);
  const auto probe = prompt_of(12, shape.vocab_size, 1);
  std::vector<int32_t> out_rows;
  std::vector<float> logits;

  Model alone(w, options(GetParam()));
  alone.admit(7, 12);
  std::vector<BatchRow> rows;
  for (int p = 0; p < 12; ++p) rows.push_back({7, static_cast<uint32_t>(p), probe[p]});
  alone.forward(rows, out_rows, logits);
  const std::vector<float> want(logits.begin(), logits.end());

  for (int order = 0; order < 4; ++order) {
    Model crowded(w, options(GetParam()));
    crowded.admit(7, 12);
    // Strangers 1..5 first prefill their prompts so that they decode next to the probe.
    std::vector<BatchRow> warm;
    for (uint64_t s = 1; s <= 5; ++s) {
      auto sp = prompt_of(3 + 4 * static_cast<int>(s), shape.vocab_size, 100 + s + 10 * order);
      crowded.admit(s, static_cast<uint32_t>(sp.size()));
      for (size_t p = 0; p < sp.size(); ++p) warm.push_back({s, static_cast<uint32_t>(p), sp[p]});
    }
    crowded.forward(warm, out_rows, logits);
    std::vector<BatchRow> batch;
    for (uint64_t s = 1; s <= 5; ++s) {
      batch.push_back(
          {s, crowded.cache_length(s), static_cast<int32_t>((s * 13 + order) % shape.vocab_size)});
    }
    for (int p = 0; p < 12; ++p) batch.push_back({7, static_cast<uint32_t>(p), probe[p]});
    for (uint64_t s = 8; s < 8 + static_cast<uint64_t>(order) * 3; ++s) {
      crowded.admit(s, 6);
      for (uint32_t p = 0; p < 6; ++p)
        batch.push_back({s, p, static_cast<int32_t>((s + p) % shape.vocab_size)});
    }
    // Reorder rows between requests (a request's own rows keep ascending positions).
    if (order % 2 == 1) {
      std::vector<BatchRow> mixed;
      std::vector<BatchRow> rest;
      for (const auto& r : batch) (r.request_id == 7 ? mixed : rest).push_back(r);
      std::vector<BatchRow> interleaved;
      size_t a = 0, b = 0;
      while (a < mixed.size() || b < rest.size()) {
        if (b < rest.size()) interleaved.push_back(rest[b++]);
        if (a < mixed.size()) interleaved.push_back(mixed[a++]);
      }
      batch = interleaved;
    }
    crowded.forward(batch, out_rows, logits);
    int found = -1;
    for (size_t i = 0; i < out_rows.size(); ++i) {
      if (batch[out_rows[i]].request_id == 7) found = static_cast<int>(i);
    }
    ASSERT_GE(found, 0);
    EXPECT_TRUE(
        same_bits(logits.data() + static_cast<size_t>(found) * shape.vocab_size, want.data(), want.size()))
        << GetParam() << " order " << order;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ModelInvariance,
                         ::testing::Values("stable", "request", "causal", "dropless"));

// Sequence (stable) and causal scopes: prefilling in chunks of 1, 3, 5 or all at once gives the same bits.
TEST(ModelChunking, ChunkedPrefillEqualsWholePrefill) {
  const ModelShape shape = ModelShape::tiny();
  auto w = random_model(shape, 9);
  const auto prompt = prompt_of(23, shape.vocab_size, 3);
  for (const char* mode : {"stable", "causal"}) {
    std::vector<float> want;
    for (int chunk : {0, 1, 3, 5, 16}) {
      Model m(w, options(mode));
      m.admit(1, 23);
      std::vector<int32_t> out_rows;
      std::vector<float> logits;
      const int step = chunk == 0 ? 23 : chunk;
      for (int b = 0; b < 23; b += step) {
        std::vector<BatchRow> rows;
        for (int p = b; p < std::min(23, b + step); ++p)
          rows.push_back({1, static_cast<uint32_t>(p), prompt[p]});
        m.forward(rows, out_rows, logits);
      }
      if (want.empty()) {
        want = logits;
      } else {
        EXPECT_TRUE(same_bits(logits.data(), want.data(), want.size())) << mode << " chunk " << chunk;
      }
    }
  }
}

// The counter-check: request scope sizes a request's budget from its rows in the forward pass, so chunking
// the same prompt changes some logits (the model is sensitive to drops at cf 1).
TEST(ModelChunking, RequestScopeDependsOnTheChunking) {
  const ModelShape shape = ModelShape::tiny();
  auto w = random_model(shape, 9);
  int changed = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const auto prompt = prompt_of(23, shape.vocab_size, 30 + seed);
    std::vector<float> want;
    for (int chunk : {0, 1, 3}) {
      Model m(w, options("request"));
      std::vector<int32_t> out_rows;
      std::vector<float> logits;
      const int step = chunk == 0 ? 23 : chunk;
      for (int b = 0; b < 23; b += step) {
        std::vector<BatchRow> rows;
        for (int p = b; p < std::min(23, b + step); ++p)
          rows.push_back({1, static_cast<uint32_t>(p), prompt[p]});
        m.forward(rows, out_rows, logits);
      }
      if (want.empty()) {
        want = logits;
      } else if (!same_bits(logits.data(), want.data(), want.size())) {
        ++changed;
      }
    }
  }
  EXPECT_GT(changed, 0) << "request scope should depend on the chunking";
}

// Decoding token by token with the KV cache equals recomputing the whole sequence in one pass, bit for bit
// (invariant kernels; sequence, causal and dropless dispatch, whose decisions do not depend on the chunking;
// under sequence scope the recomputation admits the same prompt length, so its later rows are decode rows).
TEST(ModelKvCache, DecodeEqualsFullRecomputation) {
  for (const char* mode : {"stable", "causal", "dropless"}) {
    for (const ModelShape& shape : {ModelShape::tiny(), ModelShape{}}) {
      auto w = random_model(shape, 11);
      const int gen = shape.hidden == 64 ? 24 : 6;
      auto seq = prompt_of(10, shape.vocab_size, 4);
      Model cached(w, options(mode));
      cached.admit(1, static_cast<uint32_t>(seq.size()));
      std::vector<int32_t> out_rows;
      std::vector<float> logits;
      std::vector<BatchRow> rows;
      for (size_t p = 0; p < seq.size(); ++p) rows.push_back({1, static_cast<uint32_t>(p), seq[p]});
      cached.forward(rows, out_rows, logits);
      for (int t = 0; t < gen; ++t) {
        // Full recomputation of the sequence so far in a fresh model.
        Model fresh(w, options(mode));
        fresh.admit(1, 10);
        std::vector<BatchRow> all;
        for (size_t p = 0; p < seq.size(); ++p) all.push_back({1, static_cast<uint32_t>(p), seq[p]});
        std::vector<int32_t> fr;
        std::vector<float> fl;
        fresh.forward(all, fr, fl);
        ASSERT_TRUE(same_bits(fl.data(), logits.data(), logits.size()))
            << mode << " d " << shape.hidden << " step " << t;
        const int32_t next = Model::argmax(logits.data(), shape.vocab_size);
        seq.push_back(next);
        rows.assign(1, BatchRow{1, static_cast<uint32_t>(seq.size() - 1), next});
        cached.forward(rows, out_rows, logits);
      }
    }
  }
}

// generate() with chunked prefill equals generate() with one pass (sequence or causal scope, invariant).
TEST(ModelKvCache, GenerateIsChunkInvariant) {
  auto w = random_model(ModelShape::tiny(), 2);
  const auto prompt = prompt_of(17, 128, 8);
  for (const char* mode : {"stable", "causal"}) {
    Model m(w, options(mode));
    const auto a = m.generate(1, prompt, 20, 0);
    EXPECT_EQ(m.num_requests(), 0u);
    EXPECT_EQ(m.generate(2, prompt, 20, 4), a) << mode;
    EXPECT_EQ(m.generate(3, prompt, 20, 1), a) << mode;
  }
}

// The row ops' fast paths keep the contract's bits (moe/model/ops.h: the order of every float operation is
// written there): attention_row (eight keys' dot products side by side, eight output elements side by side
// on AVX2 machines) equals the contract's loop, written out here, bit for bit - key counts around the
// vectors' width, head dims that take the vector path (multiples of 8) and one that does not; and the rotary
// embedding from kept angles (rope_angles + rotate_rope, the model's path) equals apply_rope.
TEST(ModelOps, FastPathsKeepTheContractsBits) {
  auto contract = [](const float* q, const float* keys, const float* values, int64_t num_keys, int heads,
                     int head_dim, float* out) {
    const int64_t width = int64_t{heads} * head_dim;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    std::vector<float> scores(static_cast<size_t>(num_keys));
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + int64_t{h} * head_dim;
      float max_score = -INFINITY;
      for (int64_t j = 0; j < num_keys; ++j) {
        const float* kh = keys + j * width + int64_t{h} * head_dim;
        float dot = 0.0f;
        for (int i = 0; i < head_dim; ++i) dot += qh[i] * kh[i];
        scores[j] = dot * scale;
        if (scores[j] > max_score) max_score = scores[j];
      }
      float* oh = out + int64_t{h} * head_dim;
      for (int i = 0; i < head_dim; ++i) oh[i] = 0.0f;
      float sum = 0.0f;
      for (int64_t j = 0; j < num_keys; ++j) {
        const float p = std::exp(scores[j] - max_score);
        sum += p;
        const float* vh = values + j * width + int64_t{h} * head_dim;
        for (int i = 0; i < head_dim; ++i) oh[i] += p * vh[i];
      }
      const float inv = 1.0f / sum;
      for (int i = 0; i < head_dim; ++i) oh[i] *= inv;
    }
  };
  SplitMix64 rng(2029);
  auto fill = [&](std::vector<float>& v, float scale) {
    for (float& x : v) x = (2.0f * rng.uniform_float() - 1.0f) * scale;
  };
  for (int head_dim : {8, 12, 64}) {
    for (int64_t keys : {1, 7, 8, 9, 15, 16, 17, 40, 203}) {
      const int heads = 4;
      const size_t width = static_cast<size_t>(heads * head_dim);
      std::vector<float> q(width), k(width * keys), v(width * keys), got(width), want(width), scratch(keys);
      fill(q, 3.0f);
      fill(k, 3.0f);
      fill(v, 1.0f);
      attention_row(q.data(), k.data(), v.data(), keys, heads, head_dim, got.data(), scratch.data());
      contract(q.data(), k.data(), v.data(), keys, heads, head_dim, want.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), width * sizeof(float)), 0)
          << "head_dim " << head_dim << ", " << keys << " keys";
    }
    for (uint32_t position : {0u, 5u, 300u, 4000u}) {
      std::vector<float> a(static_cast<size_t>(4 * head_dim)), cos(head_dim / 2), sin(head_dim / 2);
      fill(a, 2.0f);
      std::vector<float> b = a;
      apply_rope(a.data(), 4, head_dim, position, 10000.0f);
      rope_angles(position, head_dim, 10000.0f, cos.data(), sin.data());
      rotate_rope(b.data(), 4, head_dim, cos.data(), sin.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "position " << position;
    }
  }
}

}  // namespace
}  // namespace moe::model

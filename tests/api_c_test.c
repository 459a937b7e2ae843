/* The C API from a C program (compiled as C99, using only moe/api/moe_c.h): a forward pass on random weights
 * and on caller buffers, stats, plan, fingerprint sizing, batch invariance, and the error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/api/moe_c.h"

static int g_failures = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              moe_last_error());                                                               \
      ++g_failures;                                                                            \
    }                                                                                          \
  } while (0)

#define CHECK_OK(call)                                                                                 \
  do {                                                                                                 \
    moe_status_t s_ = (call);                                                                          \
    if (s_ != MOE_OK) {                                                                                \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, moe_status_string(s_), \
              moe_last_error());                                                                       \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

enum { kHidden = 32, kFf = 48, kExperts = 4, kTokens = 12 };

static float uniform(unsigned long long* state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*state >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f;
}

static void fill(float* p, size_t n, unsigned long long seed, float scale) {
  size_t i;
  for (i = 0; i < n; ++i) p[i] = uniform(&seed) * scale;
}

static int all_finite(const float* p, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    if (!isfinite(p[i])) return 0;
  }
  return 1;
}

static void test_random_forward(void) {
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  moe_layer_config_t* config = NULL;
  float x[kTokens * kHidden], y[kTokens * kHidden];
  uint64_t ids[kTokens];
  uint32_t pos[kTokens];
  moe_stats_t stats;
  int32_t load[kExperts];
  int64_t hidden = 0, num_pairs = 0;
  int32_t experts = 0, top_k = 0, e, total = 0;
  int t;

  CHECK_OK(moe_weights_random(&shape, MOE_DTYPE_F32, 7, &weights));
  CHECK_OK(moe_layer_config_create(&config));
  CHECK_OK(moe_layer_config_set_scope(config, "none")); /* dropless */
  CHECK_OK(moe_layer_create(weights, config, &layer));
  moe_layer_config_destroy(config); /* the layer keeps nothing of the config */
  moe_weights_destroy(weights);     /* the layer keeps its own reference */
  CHECK_OK(moe_layer_dims(layer, &hidden, &experts, &top_k));
  CHECK(hidden == kHidden && experts == kExperts && top_k == 2);

  fill(x, sizeof x / sizeof x[0], 1, 1.0f);
  for (t = 0; t < kTokens; ++t) {
    ids[t] = (uint64_t)(t % 3);
    pos[t] = (uint32_t)(t / 3);
  }
  CHECK_OK(moe_layer_forward(layer, x, kTokens, kHidden, ids, pos, y, NULL));
  CHECK(all_finite(y, sizeof y / sizeof y[0]));
  CHECK_OK(moe_layer_stats(layer, &stats, load, kExperts));
  CHECK(stats.num_tokens == kTokens);
  CHECK(stats.num_kept == kTokens * 2 && stats.num_dropped == 0);
  for (e = 0; e < kExperts; ++e) total += load[e];
  CHECK(total == kTokens * 2);
  CHECK(moe_layer_stats(layer, NULL, load, kExperts - 1) == MOE_BUFFER_TOO_SMALL);

  {
    int32_t pe[kTokens * 2];
    uint8_t st[kTokens * 2];
    CHECK_OK(moe_layer_last_plan(layer, pe, NULL, NULL, st, kTokens * 2, &num_pairs));
    CHECK(num_pairs == kTokens * 2);
    CHECK(pe[0] >= 0 && pe[0] < kExperts && st[0] == 0);
    CHECK(moe_layer_last_plan(layer, pe, NULL, NULL, NULL, 3, &num_pairs) == MOE_BUFFER_TOO_SMALL);
  }

  /* Fingerprint: size query, too small, exact. */
  {
    size_t required = 0;
    char small[8];
    char* buffer;
    CHECK_OK(moe_layer_fingerprint(layer, NULL, 0, &required));
    CHECK(required > 20);
    CHECK(moe_layer_fingerprint(layer, small, sizeof small, &required) == MOE_BUFFER_TOO_SMALL);
    buffer = (char*)malloc(required);
    CHECK_OK(moe_layer_fingerprint(layer, buffer, required, NULL));
    CHECK(strlen(buffer) + 1 == required);
    CHECK(strstr(buffer, "\"weights_hash\"") != NULL && strstr(buffer, "\"dispatch\":\"none/") != NULL);
    free(buffer);
  }

  /* Error: wrong row length -> MOE_INVALID_ARGUMENT with a message naming it; y unchanged. */
  {
    float y2[kTokens * kHidden];
    memcpy(y2, y, sizeof y);
    CHECK(moe_layer_forward(layer, x, kTokens, kHidden - 1, ids, pos, y2, NULL) == MOE_INVALID_ARGUMENT);
    CHECK(strstr(moe_last_error(), "hidden (31)") != NULL);
    printf("bad shape -> %s: %s\n", moe_status_string(MOE_INVALID_ARGUMENT), moe_last_error());
    CHECK(moe_layer_forward(layer, NULL, kTokens, kHidden, ids, pos, y2, NULL) == MOE_INVALID_ARGUMENT);
    CHECK(strstr(moe_last_error(), "x must not be NULL") != NULL);
    /* A NaN row is rejected, naming the row; y stays as it was. */
    x[5 * kHidden + 3] = NAN;
    CHECK(moe_layer_forward(layer, x, kTokens, kHidden, ids, pos, y2, NULL) == MOE_INVALID_ARGUMENT);
    CHECK(strstr(moe_last_error(), "row 5") != NULL);
    CHECK(memcmp(y2, y, sizeof y) == 0);
    /* Duplicate (request, position). */
    x[5 * kHidden + 3] = 0.5f;
    pos[1] = pos[4];
    ids[1] = ids[4];
    CHECK(moe_layer_forward(layer, x, kTokens, kHidden, ids, pos, y2, NULL) == MOE_INVALID_ARGUMENT);
  }
  moe_layer_destroy(layer);
}

/* A request alone gives the same bits as the same request co-batched with strangers (deterministic preset).
 */
/* compute NULL: the default config (fp32 compute); "bf16": moe_layer_config_set_compute(config, "bf16").
 * Returns the probe's first output element (so that the caller can see that the precision changed the
 * result). */
static float test_batch_invariance(const char* compute) {
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  moe_layer_config_t* config = NULL;
  float first;
  enum { kMine = 5, kOthers = 11, kAll = kMine + kOthers };
  float mine[kMine * kHidden], y_alone[kMine * kHidden];
  float batch[kAll * kHidden], y_batch[kAll * kHidden];
  uint64_t ids[kAll];
  uint32_t pos[kAll];
  int t, row_of_mine[kMine], m = 0, o = 0;

  CHECK_OK(moe_weights_random(&shape, MOE_DTYPE_BF16, 11, &weights));
  if (compute != NULL) {
    CHECK_OK(moe_layer_config_create(&config));
    CHECK_OK(moe_layer_config_set_compute(config, compute));
  }
  CHECK_OK(moe_layer_create(weights, config, &layer)); /* deterministic preset, capacity 1.25 */
  moe_layer_config_destroy(config);
  fill(mine, sizeof mine / sizeof mine[0], 3, 1.0f);
  for (t = 0; t < kMine; ++t) {
    ids[t] = 42;
    pos[t] = (uint32_t)t;
  }
  CHECK_OK(moe_layer_forward(layer, mine, kMine, kHidden, ids, pos, y_alone, NULL));

  /* Interleave: every third row is ours, in reverse order; the strangers have smaller ids. */
  for (t = 0; t < kAll; ++t) {
    if (t % 3 == 1 && m < kMine) {
      int mine_row = kMine - 1 - m++;
      row_of_mine[mine_row] = t;
      memcpy(batch + t * kHidden, mine + mine_row * kHidden, sizeof(float) * kHidden);
      ids[t] = 42;
      pos[t] = (uint32_t)mine_row;
    } else {
      fill(batch + t * kHidden, kHidden, 100 + (unsigned long long)t, 1.0f);
      ids[t] = (uint64_t)(o % 2);
      pos[t] = (uint32_t)(o / 2);
      ++o;
    }
  }
  CHECK(m == kMine);
  CHECK_OK(moe_layer_forward(layer, batch, kAll, kHidden, ids, pos, y_batch, NULL));
  for (t = 0; t < kMine; ++t) {
    CHECK(memcmp(y_alone + t * kHidden, y_batch + row_of_mine[t] * kHidden, sizeof(float) * kHidden) == 0);
  }
  first = y_alone[0];
  moe_layer_destroy(layer);
  moe_weights_destroy(weights);
  return first;
}

/* bf16 compute through the C API: batch-invariant too, a different result from fp32 compute, and an unknown
 * precision refused by the setter, naming it. */
static void test_compute_precision(void) {
  moe_layer_config_t* config = NULL;
  const float fp32 = test_batch_invariance(NULL);
  const float bf16 = test_batch_invariance("bf16");
  CHECK(fp32 != bf16);
  CHECK_OK(moe_layer_config_create(&config));
  CHECK(moe_layer_config_set_compute(config, "fp16") == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "fp16") != NULL);
  CHECK(moe_layer_config_set_compute(config, NULL) == MOE_INVALID_ARGUMENT);
  CHECK_OK(moe_layer_config_set_compute(config, "fp32"));
  moe_layer_config_destroy(config);
}

/* Weights from caller buffers (fp32): copied, so the buffers may be freed at once. */
static void test_buffers(void) {
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 1, 16, 1, 0};
  moe_weight_buffers_t b;
  float* gate = (float*)malloc(sizeof(float) * kExperts * kHidden);
  float* mats[3 * kExperts];
  const void* gp[kExperts];
  const void* up[kExperts];
  const void* dp[kExperts];
  float* shared[3];
  float shared_gate[kHidden];
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  moe_layer_config_t* config = NULL;
  float x[4 * kHidden], y[4 * kHidden];
  uint64_t ids[4] = {0, 0, 1, 1};
  uint32_t pos[4] = {0, 1, 0, 1};
  uint64_t hash = 0;
  int e;

  fill(gate, kExperts * kHidden, 5, 0.2f);
  for (e = 0; e < 3 * kExperts; ++e) {
    mats[e] = (float*)malloc(sizeof(float) * kFf * kHidden);
    fill(mats[e], kFf * kHidden, 10 + (unsigned long long)e, 0.15f);
  }
  for (e = 0; e < kExperts; ++e) {
    gp[e] = mats[3 * e];
    up[e] = mats[3 * e + 1];
    dp[e] = mats[3 * e + 2];
  }
  for (e = 0; e < 3; ++e) {
    shared[e] = (float*)malloc(sizeof(float) * 16 * kHidden);
    fill(shared[e], 16 * kHidden, 50 + (unsigned long long)e, 0.15f);
  }
  fill(shared_gate, kHidden, 77, 0.1f);
  memset(&b, 0, sizeof b);
  b.dtype = MOE_DTYPE_F32;
  b.router_gate = gate;
  b.expert_gate_proj = gp;
  b.expert_up_proj = up;
  b.expert_down_proj = dp;
  b.shared_gate_proj = shared[0];
  b.shared_up_proj = shared[1];
  b.shared_down_proj = shared[2];
  b.shared_expert_gate = shared_gate;
  CHECK_OK(moe_weights_from_buffers(&shape, &b, &weights));
  CHECK_OK(moe_weights_hash(weights, &hash));
  CHECK(hash != 0);
  /* A missing buffer is an error that names it. */
  {
    moe_weights_t* bad = (moe_weights_t*)1;
    b.shared_expert_gate = NULL;
    CHECK(moe_weights_from_buffers(&shape, &b, &bad) == MOE_INVALID_ARGUMENT);
    CHECK(bad == NULL);
    CHECK(strstr(moe_last_error(), "shared_expert_gate") != NULL);
    b.shared_expert_gate = shared_gate;
    /* A dtype outside the enum (C allows any int; found by the c_api fuzzer as undefined behaviour in the C++
     * side, which loaded it as the enum type) is refused by value. */
    b.dtype = (moe_dtype_t)244;
    CHECK(moe_weights_from_buffers(&shape, &b, &bad) == MOE_INVALID_ARGUMENT);
    CHECK(strstr(moe_last_error(), "buffers->dtype must be MOE_DTYPE_F32 or MOE_DTYPE_BF16 (got 244)") !=
          NULL);
    CHECK(moe_weights_random(&shape, (moe_dtype_t)-3, 1, &bad) == MOE_INVALID_ARGUMENT && bad == NULL);
    CHECK(strstr(moe_last_error(),
                 "storage must be MOE_DTYPE_F32, _BF16, _Q8_0, _Q4_K, _Q6_K, _MXFP4 or _FP8 (got -3)") !=
          NULL);
    b.dtype = MOE_DTYPE_F32;
  }
  free(gate);
  for (e = 0; e < 3 * kExperts; ++e) free(mats[e]);
  for (e = 0; e < 3; ++e) free(shared[e]);

  CHECK_OK(moe_layer_config_create(&config));
  CHECK_OK(moe_layer_config_set_router(config, "qwen2-moe"));
  CHECK_OK(moe_layer_config_set_top_k(config, 2));
  CHECK_OK(moe_layer_create(weights, config, &layer));
  fill(x, sizeof x / sizeof x[0], 9, 1.0f);
  CHECK_OK(moe_layer_forward(layer, x, 4, kHidden, ids, pos, y, NULL));
  CHECK(all_finite(y, sizeof y / sizeof y[0]));
  moe_layer_destroy(layer);

  /* Bad config: an unknown preset / router / scope / kernel is refused by its setter, naming it, and leaves
   * the config as it was; top_k too large for the weights is refused by moe_layer_create. */
  CHECK(moe_layer_config_set_preset(config, "fastest") == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "fastest") != NULL);
  CHECK(moe_layer_config_set_router(config, "gpt") == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "gpt") != NULL);
  CHECK(moe_layer_config_set_scope(config, "global") == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "global") != NULL);
  CHECK(moe_layer_config_set_kernel(config, "turbo") == MOE_INVALID_ARGUMENT);
  CHECK(moe_layer_config_set_capacity_factor(config, -1.0) == MOE_INVALID_ARGUMENT);
  /* Above the stated limit (found by the c_api fuzzer: cf 1.28e19 overflowed the capacity's int64). */
  CHECK(moe_layer_config_set_capacity_factor(config, 1.28e19) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "capacity_factor must be at most 1e6") != NULL);
  CHECK(moe_layer_config_set_top_k(config, 0) == MOE_INVALID_ARGUMENT);
  CHECK(moe_layer_config_set_groups(config, 2, 3) == MOE_INVALID_ARGUMENT);
  CHECK(moe_layer_config_set_preset(NULL, "greedy") == MOE_INVALID_ARGUMENT);
  CHECK(moe_layer_config_set_preset(config, NULL) == MOE_INVALID_ARGUMENT);
  CHECK_OK(moe_layer_create(weights, config, &layer)); /* the refused values changed nothing */
  moe_layer_destroy(layer);
  layer = NULL;
  CHECK_OK(moe_layer_config_set_top_k(config, 9));
  CHECK(moe_layer_create(weights, config, &layer) == MOE_INVALID_ARGUMENT && layer == NULL);
  CHECK(strstr(moe_last_error(), "top_k") != NULL);
  moe_layer_config_destroy(config);
  moe_weights_destroy(weights);
}

/* The hidden row of (request, position): the same input wherever the row is sent. */
static void token_row(uint64_t id, uint32_t position, float* out) {
  fill(out, kHidden, 1000003ULL * (id + 1) + position, 1.0f);
}

/* Sends `n` rows (ids[i], pos[i]) through the layer, each row's input from token_row. */
static moe_status_t forward_rows(moe_layer_t* layer, int n, const uint64_t* ids, const uint32_t* pos,
                                 float* y, moe_routing_state_t* state) {
  float x[64 * kHidden];
  int i;
  for (i = 0; i < n; ++i) token_row(ids[i], pos[i], x + i * kHidden);
  return moe_layer_forward(layer, x, n, kHidden, ids, pos, y, state);
}

/* Sends `n` rows (ids[i], pos[i]) whose inputs are those of (content[i], pos[i]): the token a row holds,
 * which rows of different requests share when they share a prompt prefix. */
static moe_status_t forward_content(moe_layer_t* layer, int n, const uint64_t* ids, const uint64_t* content,
                                    const uint32_t* pos, float* y, moe_routing_state_t* state) {
  float x[64 * kHidden];
  int i;
  for (i = 0; i < n; ++i) token_row(content[i], pos[i], x + i * kHidden);
  return moe_layer_forward(layer, x, n, kHidden, ids, pos, y, state);
}

/* Prefix caching, speculation and their errors under the deterministic preset (prefix scope, lookahead 8): a
 * writer (request 50, prompt 36) shares the probe's first 24 tokens; its segments of [0, 16) and [16, 24) are
 * what a prefix cache keeps. The probe (prompt 40) restored from them, its rest sent in two chunks, its
 * decode rows speculatively (a rejected draft rolled back), gives, with the writer's rows of the prefix, the
 * probe alone's bits. */
static void test_prefix_cache_lifecycle(void) {
  enum { kPrompt = 40, kLen = kPrompt + 4, kShared = 24, kProbe = 42, kWriter = 50 };
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  moe_layer_config_t* config = NULL;
  moe_routing_state_t* alone = NULL;
  moe_routing_state_t* cache = NULL;
  float y_alone[kLen * kHidden], y[64 * kHidden], y_got[kLen * kHidden];
  uint64_t ids[64], content[64];
  uint32_t pos[64];
  uint8_t seg_a[4096], seg_b[4096], seg_short[4096], bad[8] = {0};
  const uint8_t* segs[2];
  int64_t sizes[2], size = 0, size_short = 0;
  uint64_t salt = 99;
  int t, at;
  moe_stats_t stats;

  CHECK_OK(moe_weights_random(&shape, MOE_DTYPE_F32, 23, &weights));
  CHECK_OK(moe_layer_config_create(&config));
  CHECK_OK(moe_layer_config_set_capacity_factor(config, 1.0));
  CHECK_OK(moe_layer_config_set_lookahead(config, 8));
  CHECK(moe_layer_config_set_lookahead(config, -1) == MOE_INVALID_ARGUMENT);
  CHECK_OK(moe_layer_create(weights, config, &layer));
  moe_layer_config_destroy(config);
  CHECK_OK(moe_prefix_cache_salt(layer, kShared, 36, &salt));
  CHECK(salt == 0); /* 36 >= 24 + 8: no decision of the prefix saw the prompt length */
  CHECK_OK(moe_prefix_cache_salt(layer, kShared, 30, &salt));
  CHECK(salt == 30);

  /* The probe alone. */
  CHECK_OK(moe_routing_state_create(layer, &alone));
  CHECK_OK(moe_routing_state_admit(alone, kProbe, kPrompt));
  for (t = 0; t < kLen; ++t) {
    ids[t] = content[t] = kProbe;
    pos[t] = (uint32_t)t;
  }
  CHECK_OK(forward_content(layer, kLen, ids, content, pos, y_alone, alone));
  CHECK_OK(moe_layer_stats(layer, &stats, NULL, 0));
  CHECK(stats.num_dropped > 0);

  /* The writer, in chunks of 20 and 16; its first 24 rows hold the probe's tokens. */
  CHECK_OK(moe_routing_state_create_recording(layer, &cache));
  CHECK_OK(moe_routing_state_admit(cache, kWriter, 36));
  for (at = 0; at < 36; at += at == 0 ? 20 : 16) {
    const int n = at == 0 ? 20 : 16;
    for (t = 0; t < n; ++t) {
      ids[t] = kWriter;
      content[t] = at + t < kShared ? kProbe : kWriter;
      pos[t] = (uint32_t)(at + t);
    }
    CHECK_OK(forward_content(layer, n, ids, content, pos, y, cache));
    for (t = 0; t < n && at + t < kShared; ++t)
      memcpy(y_got + (at + t) * kHidden, y + t * kHidden, sizeof(float) * kHidden);
  }
  CHECK(moe_routing_state_segment(cache, kWriter, 0, 16, NULL, 0, &size) == MOE_BUFFER_TOO_SMALL);
  CHECK(size > 0 && size <= (int64_t)sizeof seg_a);
  CHECK_OK(moe_routing_state_segment(cache, kWriter, 0, 16, seg_a, sizeof seg_a, &sizes[0]));
  CHECK_OK(moe_routing_state_segment(cache, kWriter, 16, kShared, seg_b, sizeof seg_b, &sizes[1]));
  CHECK(moe_routing_state_segment(cache, kWriter, 30, 40, seg_b, sizeof seg_b, &size) ==
        MOE_INVALID_ARGUMENT);
  CHECK(moe_routing_state_segment(alone, kProbe, 0, 4, seg_b, sizeof seg_b, &size) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "does not record") != NULL);
  CHECK_OK(moe_routing_state_release(cache, kWriter));

  /* A writer of prompt 28 (salt 28 at 24 + 8): its prefix is not the probe's; restoring it is refused. */
  CHECK_OK(moe_routing_state_admit(cache, 51, 28));
  for (t = 0; t < kShared; ++t) {
    ids[t] = 51;
    content[t] = kProbe;
    pos[t] = (uint32_t)t;
  }
  CHECK_OK(forward_content(layer, kShared, ids, content, pos, y, cache));
  CHECK_OK(moe_routing_state_segment(cache, 51, 0, kShared, seg_short, sizeof seg_short, &size_short));
  CHECK_OK(moe_routing_state_release(cache, 51));
  segs[0] = seg_short;
  CHECK(moe_routing_state_restore(cache, kProbe, kPrompt, segs, &size_short, 1) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "planned for a prompt of 28 tokens") != NULL);
  segs[0] = bad;
  {
    const int64_t bad_size = sizeof bad;
    CHECK(moe_routing_state_restore(cache, kProbe, kPrompt, segs, &bad_size, 1) == MOE_INVALID_ARGUMENT);
    CHECK(strstr(moe_last_error(), "too short") != NULL);
  }
  segs[0] = seg_b; /* not from position 0 */
  CHECK(moe_routing_state_restore(cache, kProbe, kPrompt, segs, &sizes[1], 1) == MOE_INVALID_ARGUMENT);
  CHECK(moe_routing_state_restore(NULL, kProbe, kPrompt, segs, sizes, 1) == MOE_INVALID_ARGUMENT);
  {
    int64_t held = -1;
    CHECK_OK(moe_routing_state_num_requests(cache, &held));
    CHECK(held == 0);
  }

  /* The probe restored from the writer's segments: positions 24..39 in chunks of 9 and 7. */
  segs[0] = seg_a;
  segs[1] = seg_b;
  CHECK_OK(moe_routing_state_restore(cache, kProbe, kPrompt, segs, sizes, 2));
  CHECK(moe_routing_state_restore(cache, kProbe, kPrompt, segs, sizes, 2) == MOE_INVALID_ARGUMENT); /* live */
  for (at = kShared; at < kPrompt; at += at == kShared ? 9 : 7) {
    const int n = at == kShared ? 9 : 7;
    for (t = 0; t < n; ++t) {
      ids[t] = content[t] = kProbe;
      pos[t] = (uint32_t)(at + t);
    }
    CHECK_OK(forward_content(layer, n, ids, content, pos, y, cache));
    memcpy(y_got + at * kHidden, y, sizeof(float) * kHidden * n);
  }
  /* Speculation: the last prompt token's successor (40) and two drafts (41 right, 42 wrong) in one pass. */
  for (t = 0; t < 3; ++t) {
    ids[t] = kProbe;
    content[t] = t < 2 ? kProbe : 777;
    pos[t] = (uint32_t)(kPrompt + t);
  }
  CHECK_OK(forward_content(layer, 3, ids, content, pos, y, cache));
  memcpy(y_got + kPrompt * kHidden, y, sizeof(float) * kHidden * 2);
  CHECK(moe_routing_state_rollback(cache, kProbe, 44) == MOE_INVALID_ARGUMENT); /* forward */
  CHECK(moe_routing_state_rollback(cache, kProbe, 20) == MOE_INVALID_ARGUMENT); /* into the cached prefix */
  CHECK(strstr(moe_last_error(), "came from the prefix cache") != NULL);
  CHECK_OK(moe_routing_state_rollback(cache, kProbe, 42));
  for (t = 0; t < 2; ++t) {
    ids[t] = content[t] = kProbe;
    pos[t] = (uint32_t)(42 + t);
  }
  CHECK_OK(forward_content(layer, 2, ids, content, pos, y, cache));
  memcpy(y_got + 42 * kHidden, y, sizeof(float) * kHidden * 2);
  CHECK(memcmp(y_alone, y_got, sizeof y_alone) == 0);

  moe_routing_state_destroy(alone);
  moe_routing_state_destroy(cache);
  moe_layer_destroy(layer);
  moe_weights_destroy(weights);
}

/* A conversation's second turn (docs/routing.md, "Conversations"): turn 1 is a 24-row prompt and 8 decode
 * rows; turn 2 sends them again with a 12-row message, turn ends {24, 32, 44}. Its block keys equal turn 1's
 * up to 32; restored from turn 1's segment of [0, 32) it computes its message with the bits of turn 2
 * recomputed in one call, which routes [0, 32) bitwise as turn 1 did. Then the turn ends' errors. */
static void test_conversation_turns(void) {
  enum { kTurn1 = 24, kAnswer = 8, kKnown = kTurn1 + kAnswer, kLen = 44, kConv = 9 };
  const uint32_t ends[3] = {kTurn1, kKnown, kLen};
  const uint32_t even[2] = {kTurn1, kKnown};
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  moe_layer_config_t* config = NULL;
  moe_routing_state_t* state = NULL;
  float y_turn1[kKnown * kHidden], y_turn2[kLen * kHidden], y[64 * kHidden];
  uint64_t ids[64], content[64];
  uint32_t pos[64];
  uint8_t seg[8192];
  const uint8_t* segs[1];
  int64_t size = 0;
  uint64_t salt1 = 0, salt2 = 1;
  uint32_t end;
  int t;
  moe_stats_t stats;
  int64_t dropped = 0;

  CHECK_OK(moe_weights_random(&shape, MOE_DTYPE_F32, 31, &weights));
  CHECK_OK(moe_layer_config_create(&config));
  CHECK_OK(moe_layer_config_set_capacity_factor(config, 0.75));
  CHECK_OK(moe_layer_create(weights, config, &layer));
  moe_layer_config_destroy(config);
  for (t = 0; t < kLen; ++t) {
    ids[t] = content[t] = kConv;
    pos[t] = (uint32_t)t;
  }
  /* Turn 1: the prompt in one call, then its answer one decode row at a time. */
  CHECK_OK(moe_routing_state_create_recording(layer, &state));
  CHECK_OK(moe_routing_state_admit(state, kConv, kTurn1));
  CHECK_OK(forward_content(layer, kTurn1, ids, content, pos, y_turn1, state));
  CHECK_OK(moe_layer_stats(layer, &stats, NULL, 0));
  dropped += stats.num_dropped;
  for (t = kTurn1; t < kKnown; ++t)
    CHECK_OK(forward_content(layer, 1, ids, content, pos + t, y_turn1 + t * kHidden, state));
  CHECK(dropped > 0); /* capacity binds */
  CHECK_OK(moe_routing_state_segment(state, kConv, 0, kKnown, seg, sizeof seg, &size));
  CHECK_OK(moe_routing_state_release(state, kConv));
  for (end = 1; end <= kKnown; ++end) {
    CHECK_OK(moe_prefix_cache_salt(layer, end, kTurn1, &salt1));
    CHECK_OK(moe_prefix_cache_salt_turns(layer, end, ends, 3, &salt2));
    CHECK(salt1 == salt2);
  }
  CHECK_OK(moe_prefix_cache_salt_turns(layer, kLen, ends, 3, &salt2));
  CHECK(salt2 >> 63 == 1); /* the whole list: no prompt length */

  /* Turn 2 recomputed in one call: turn 1's positions as turn 1 routed them. */
  CHECK_OK(moe_routing_state_admit_turns(state, kConv, ends, 3));
  CHECK_OK(forward_content(layer, kLen, ids, content, pos, y_turn2, state));
  CHECK(memcmp(y_turn1, y_turn2, sizeof y_turn1) == 0);
  CHECK_OK(moe_routing_state_release(state, kConv));
  /* Turn 2 restored from turn 1's segment: its message alone. */
  segs[0] = seg;
  CHECK(moe_routing_state_restore(state, kConv, kLen, segs, &size, 1) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "planned for a prompt of 24 tokens") != NULL);
  CHECK_OK(moe_routing_state_restore_turns(state, kConv, ends, 3, segs, &size, 1));
  CHECK_OK(forward_content(layer, kLen - kKnown, ids, content, pos + kKnown, y, state));
  CHECK(memcmp(y, y_turn2 + kKnown * kHidden, sizeof(float) * kHidden * (kLen - kKnown)) == 0);
  CHECK_OK(moe_routing_state_release(state, kConv));

  CHECK(moe_routing_state_admit_turns(state, kConv, even, 2) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "an even number of turn ends") != NULL);
  CHECK(moe_routing_state_admit_turns(state, kConv, NULL, 3) == MOE_INVALID_ARGUMENT);
  CHECK(moe_routing_state_admit_turns(state, kConv, ends, 0) == MOE_INVALID_ARGUMENT);
  CHECK(moe_routing_state_restore_turns(state, kConv, NULL, 3, segs, &size, 1) == MOE_INVALID_ARGUMENT);
  CHECK(moe_prefix_cache_salt_turns(layer, 4, even, 2, &salt1) == MOE_INVALID_ARGUMENT);
  CHECK(moe_prefix_cache_salt_turns(layer, 4, ends, 3, NULL) == MOE_INVALID_ARGUMENT);
  {
    int64_t held = -1;
    CHECK_OK(moe_routing_state_num_requests(state, &held));
    CHECK(held == 0);
  }
  moe_routing_state_destroy(state);
  moe_layer_destroy(layer);
  moe_weights_destroy(weights);
}

/* The serving lifecycle under the deterministic preset (sequence scope): a probe admitted with its prompt
 * length, prefilled alone in one call, then decoded, gives the same bits as the probe prefilled in chunks of
 * 7 and 13 among admitted strangers (rows interleaved) and decoded next to theirs. Then the lifecycle's
 * errors, each leaving the state unchanged. */
static void test_serving_lifecycle(void) {
  enum { kPrompt = 20, kDecode = 4, kLen = kPrompt + kDecode, kProbe = 42 };
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  moe_layer_t* other = NULL;
  moe_layer_config_t* config = NULL;
  moe_routing_state_t* alone = NULL;
  moe_routing_state_t* served = NULL;
  moe_routing_state_t* wrong = NULL;
  float y_alone[kLen * kHidden], y[64 * kHidden], y_probe[kLen * kHidden];
  uint64_t ids[64];
  uint32_t pos[64];
  uint32_t stranger_next[3] = {0, 0, 0};
  const uint32_t stranger_prompt[3] = {9, 30, 4};
  int64_t held = -1;
  int t, n, at = 0, step, i;
  moe_stats_t stats;
  int64_t probe_dropped = 0;

  CHECK_OK(moe_weights_random(&shape, MOE_DTYPE_F32, 21, &weights));
  CHECK_OK(moe_layer_config_create(&config));
  CHECK_OK(moe_layer_config_set_capacity_factor(config, 1.0)); /* capacity binds */
  CHECK_OK(moe_layer_create(weights, config, &layer));         /* deterministic preset: sequence scope */
  moe_layer_config_destroy(config);

  /* Alone, unchunked: prompt and decode rows in one call. */
  CHECK_OK(moe_routing_state_create(layer, &alone));
  CHECK_OK(moe_routing_state_admit(alone, kProbe, kPrompt));
  for (t = 0; t < kLen; ++t) {
    ids[t] = kProbe;
    pos[t] = (uint32_t)t;
  }
  CHECK_OK(forward_rows(layer, kLen, ids, pos, y_alone, alone));
  CHECK_OK(moe_layer_stats(layer, &stats, NULL, 0));
  probe_dropped = stats.num_dropped;
  CHECK_OK(moe_routing_state_release(alone, kProbe));

  /* Served: chunks of 7 and 13, then one decode row per step, strangers 1..3 in every step. */
  CHECK_OK(moe_routing_state_create(layer, &served));
  CHECK_OK(moe_routing_state_admit(served, kProbe, kPrompt));
  for (i = 0; i < 3; ++i) CHECK_OK(moe_routing_state_admit(served, (uint64_t)(i + 1), stranger_prompt[i]));
  for (step = 0; at < kLen; ++step) {
    const int chunk = step == 0 ? 7 : (step == 1 ? 13 : 1);
    int probe_rows[16], m = 0;
    n = 0;
    for (i = 0; i < 3; ++i) { /* a stranger's chunk of up to 5 prompt rows, or one decode row */
      int rows = stranger_next[i] < stranger_prompt[i] ? (int)(stranger_prompt[i] - stranger_next[i]) : 1;
      if (rows > 5) rows = 5;
      while (rows-- > 0) {
        ids[n] = (uint64_t)(i + 1);
        pos[n++] = stranger_next[i]++;
        if (n % 2 == 1 && m < chunk) { /* interleave the probe's rows */
          ids[n] = kProbe;
          pos[n] = (uint32_t)(at + m);
          probe_rows[m++] = n++;
        }
      }
    }
    while (m < chunk) {
      ids[n] = kProbe;
      pos[n] = (uint32_t)(at + m);
      probe_rows[m++] = n++;
    }
    CHECK_OK(forward_rows(layer, n, ids, pos, y, served));
    for (i = 0; i < m; ++i)
      memcpy(y_probe + (at + i) * kHidden, y + probe_rows[i] * kHidden, sizeof(float) * kHidden);
    at += chunk;
  }
  CHECK(memcmp(y_alone, y_probe, sizeof y_alone) == 0);
  CHECK(probe_dropped > 0); /* capacity bound the probe alone, so equality means something */

  /* Errors; the state holds the probe and 3 strangers throughout. */
  CHECK_OK(moe_routing_state_num_requests(served, &held));
  CHECK(held == 4);
  ids[0] = 77;
  pos[0] = 0; /* never admitted */
  CHECK(forward_rows(layer, 1, ids, pos, y, served) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "admitted") != NULL);
  ids[0] = kProbe;
  pos[0] = kLen + 1; /* skips a position */
  CHECK(forward_rows(layer, 1, ids, pos, y, served) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "contiguous") != NULL);
  pos[0] = kLen - 1; /* goes back */
  CHECK(forward_rows(layer, 1, ids, pos, y, served) == MOE_INVALID_ARGUMENT);
  CHECK(moe_routing_state_admit(served, kProbe, 3) == MOE_INVALID_ARGUMENT); /* already admitted */
  CHECK(strstr(moe_last_error(), "already admitted") != NULL);
  CHECK(moe_routing_state_admit(served, 78, 0) == MOE_INVALID_ARGUMENT); /* empty prompt */
  CHECK(moe_routing_state_release(served, 79) == MOE_INVALID_ARGUMENT);  /* unknown */
  CHECK(strstr(moe_last_error(), "does not hold") != NULL);
  CHECK_OK(moe_routing_state_num_requests(served, &held));
  CHECK(held == 4);
  pos[0] = kLen; /* the probe's next position still works */
  CHECK_OK(forward_rows(layer, 1, ids, pos, y, served));

  /* A state made for another layer shape. */
  shape.num_experts = kExperts + 2;
  moe_weights_destroy(weights);
  CHECK_OK(moe_weights_random(&shape, MOE_DTYPE_F32, 22, &weights));
  CHECK_OK(moe_layer_create(weights, NULL, &other));
  CHECK_OK(moe_routing_state_create(other, &wrong));
  CHECK_OK(moe_routing_state_admit(wrong, kProbe, kPrompt));
  pos[0] = 0;
  CHECK(forward_rows(layer, 1, ids, pos, y, wrong) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "routing state is for") != NULL);
  CHECK(moe_routing_state_admit(NULL, 1, 1) == MOE_INVALID_ARGUMENT);
  moe_routing_state_destroy(wrong);
  moe_routing_state_destroy(served);
  moe_routing_state_destroy(alone);
  moe_layer_destroy(other);
  moe_layer_destroy(layer);
  moe_weights_destroy(weights);
}

/* Causal scope: a prompt in one call or in chunks gives the same bits (the state carries the counts); a
 * request is created at its first forward pass. */
static void test_causal_chunks(void) {
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  moe_routing_state_t* full_state = NULL;
  moe_routing_state_t* chunk_state = NULL;
  moe_layer_config_t* config = NULL;
  enum { kLen = 20, kSplit = 7 };
  float x[kLen * kHidden], y_full[kLen * kHidden], y_chunks[kLen * kHidden];
  uint64_t ids[kLen];
  uint32_t pos[kLen];
  int t;

  CHECK_OK(moe_weights_random(&shape, MOE_DTYPE_F32, 21, &weights));
  CHECK_OK(moe_layer_config_create(&config));
  CHECK_OK(moe_layer_config_set_scope(config, "causal"));
  CHECK_OK(moe_layer_config_set_capacity_factor(config, 1.0));
  CHECK_OK(moe_layer_create(weights, config, &layer));
  moe_layer_config_destroy(config);
  moe_weights_destroy(weights);
  fill(x, sizeof x / sizeof x[0], 23, 1.0f);
  for (t = 0; t < kLen; ++t) {
    ids[t] = 9;
    pos[t] = (uint32_t)t;
  }
  CHECK_OK(moe_routing_state_create(layer, &full_state));
  CHECK_OK(moe_routing_state_create(layer, &chunk_state));
  CHECK_OK(moe_layer_forward(layer, x, kLen, kHidden, ids, pos, y_full, full_state));
  CHECK_OK(moe_layer_forward(layer, x, kSplit, kHidden, ids, pos, y_chunks, chunk_state));
  CHECK_OK(moe_layer_forward(layer, x + kSplit * kHidden, kLen - kSplit, kHidden, ids + kSplit, pos + kSplit,
                             y_chunks + kSplit * kHidden, chunk_state));
  CHECK(memcmp(y_full, y_chunks, sizeof y_full) == 0);
  /* Positions out of sequence for the state: rejected. */
  CHECK(moe_layer_forward(layer, x, 1, kHidden, ids, pos, y_chunks, chunk_state) == MOE_INVALID_ARGUMENT);
  CHECK_OK(moe_routing_state_release(chunk_state, 9));
  CHECK_OK(moe_layer_forward(layer, x, 1, kHidden, ids, pos, y_chunks, chunk_state));
  moe_routing_state_destroy(full_state);
  moe_routing_state_destroy(chunk_state);
  moe_layer_destroy(layer);
}

static void test_io_errors(void) {
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  CHECK(moe_weights_load("/nonexistent/dir/model.safetensors", "mixtral", 0, &shape, -1, &weights) ==
        MOE_IO_ERROR);
  CHECK(weights == NULL && strlen(moe_last_error()) > 0);
  CHECK(moe_weights_load("/nonexistent.safetensors", "gpt5", 0, &shape, -1, &weights) ==
        MOE_INVALID_ARGUMENT);
  shape.hidden = 0;
  CHECK(moe_weights_random(&shape, MOE_DTYPE_F32, 1, &weights) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "hidden") != NULL);
  CHECK(moe_weights_random(NULL, MOE_DTYPE_F32, 1, &weights) == MOE_INVALID_ARGUMENT);
}

/* device: an unknown name is an argument error; "cuda" either works (a GPU build on a GPU machine: the
 * result must match the CPU layer closely and its plan exactly) or fails with a message that says why. */
static void test_device(void) {
  enum { kT = 24 };
  moe_layer_shape_t shape = {kHidden, kFf, kExperts, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  moe_layer_t *cpu = NULL, *gpu = NULL;
  moe_layer_config_t* config = NULL;
  float x[kT * kHidden], y_cpu[kT * kHidden], y_gpu[kT * kHidden];
  uint64_t ids[kT];
  uint32_t pos[kT];
  moe_status_t rc;
  int t;
  size_t i;

  CHECK_OK(moe_weights_random(&shape, MOE_DTYPE_F32, 11, &weights));
  CHECK_OK(moe_layer_config_create(&config));
  CHECK(moe_layer_config_set_device(config, "tpu") == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "\"tpu\"") != NULL);
  CHECK_OK(moe_layer_config_set_device(config, "cpu"));
  CHECK_OK(moe_layer_create(weights, config, &cpu));
  rc = moe_layer_config_set_device(config, "cuda");
  if (rc == MOE_OK) rc = moe_layer_create(weights, config, &gpu);
  if (rc != MOE_OK) {
    /* No GPU build: an argument error saying so; a GPU build without a device: a runtime error naming why. */
    CHECK(gpu == NULL);
    CHECK((rc == MOE_INVALID_ARGUMENT && strstr(moe_last_error(), "no CUDA backend") != NULL) ||
          (rc == MOE_RUNTIME_ERROR && strstr(moe_last_error(), "no usable CUDA device") != NULL));
    printf("api_c_test: device \"cuda\" unavailable here: %s\n", moe_last_error());
  } else {
    fill(x, sizeof x / sizeof x[0], 5, 1.0f);
    for (t = 0; t < kT; ++t) {
      ids[t] = (uint64_t)(t % 3);
      pos[t] = (uint32_t)(t / 3);
    }
    CHECK_OK(moe_layer_forward(cpu, x, kT, kHidden, ids, pos, y_cpu, NULL));
    CHECK_OK(moe_layer_forward(gpu, x, kT, kHidden, ids, pos, y_gpu, NULL));
    for (i = 0; i < sizeof x / sizeof x[0]; ++i) {
      const float diff = y_gpu[i] - y_cpu[i];
      CHECK(diff * diff <= 1e-8f * (1.0f + y_cpu[i] * y_cpu[i]));
    }
    moe_layer_destroy(gpu);
  }
  /* bf16 compute on the GPU is refused with an argument error naming it (before any device is touched). */
  if (moe_layer_config_set_device(config, "cuda") == MOE_OK) {
    CHECK_OK(moe_layer_config_set_compute(config, "bf16"));
    CHECK(moe_layer_create(weights, config, &gpu) == MOE_INVALID_ARGUMENT && gpu == NULL);
    CHECK(strstr(moe_last_error(), "not implemented on the GPU") != NULL);
  }
  moe_layer_destroy(cpu);
  moe_layer_config_destroy(config);
  moe_weights_destroy(weights);
}

/* A Hugging Face checkpoint directory without shape arguments: the trained model's layers, with the router
 * (top-2 of 8) from config.json; a config that disagrees with the tensors is refused by name. */
static void test_pretrained(void) {
  moe_weights_t* w = NULL;
  CHECK(moe_weights_load_pretrained(MOE_KJV_DIR, 1, -1, &w) == MOE_OK);
  moe_layer_shape_t shape;
  CHECK(moe_weights_shape(w, &shape) == MOE_OK);
  CHECK(shape.hidden == 256 && shape.expert_ff == 88 && shape.num_experts == 8 &&
        shape.num_shared_experts == 0);
  uint64_t hash_w = 0, hash_l = 0;
  CHECK(moe_weights_hash(w, &hash_w) == MOE_OK);
  moe_layer_t* layer = NULL;
  CHECK(moe_layer_create_pretrained(MOE_KJV_DIR, 1, NULL, &layer) == MOE_OK);
  int64_t hidden = 0;
  int32_t experts = 0, top_k = 0;
  CHECK(moe_layer_dims(layer, &hidden, &experts, &top_k) == MOE_OK);
  CHECK(hidden == 256 && experts == 8 && top_k == 2);
  {
    /* The layer's weights are layer 1's: the same content hash in its fingerprint. */
    char buffer[4096], want[64];
    size_t required = 0;
    CHECK(moe_layer_fingerprint(layer, buffer, sizeof buffer, &required) == MOE_OK);
    snprintf(want, sizeof want, "%016llx", (unsigned long long)hash_w);
    CHECK(strstr(buffer, want) != NULL);
    (void)hash_l;
  }
  moe_layer_destroy(layer);
  {
    /* A config's explicit top_k applies on top of config.json's. */
    moe_layer_config_t* config = NULL;
    CHECK(moe_layer_config_create(&config) == MOE_OK);
    CHECK(moe_layer_config_set_top_k(config, 1) == MOE_OK);
    layer = NULL;
    CHECK(moe_layer_create_pretrained(MOE_KJV_DIR, 3, config, &layer) == MOE_OK);
    CHECK(moe_layer_dims(layer, NULL, NULL, &top_k) == MOE_OK);
    CHECK(top_k == 1);
    moe_layer_destroy(layer);
    moe_layer_config_destroy(config);
  }
  moe_weights_t* bad = NULL;
  CHECK(moe_weights_load_pretrained(MOE_KJV_DIR, 4, -1, &bad) == MOE_INVALID_ARGUMENT && bad == NULL);
  CHECK(strstr(moe_last_error(), "num_hidden_layers = 4") != NULL);
  CHECK(moe_weights_load_pretrained(MOE_KJV_BAD_DIR, 0, -1, &bad) == MOE_INVALID_ARGUMENT && bad == NULL);
  CHECK(strstr(moe_last_error(),
               "intermediate_size = 96 but model.layers.0.block_sparse_moe.experts.0.w1.weight "
               "has shape [88, 256]") != NULL);
  layer = NULL;
  CHECK(moe_layer_create_pretrained(MOE_KJV_BAD_DIR, 0, NULL, &layer) == MOE_INVALID_ARGUMENT &&
        layer == NULL);
  CHECK(strstr(moe_last_error(), "intermediate_size = 96") != NULL);
  CHECK(moe_weights_load_pretrained(MOE_KJV_DIR "/no-such-dir", 0, -1, &bad) == MOE_IO_ERROR);
  CHECK(strstr(moe_last_error(), "config.json") != NULL);
  CHECK(moe_weights_load_pretrained(NULL, 0, -1, &bad) == MOE_INVALID_ARGUMENT);
  moe_weights_destroy(w);
}

/* Reads `count` elements of `size` bytes from `path` into a new buffer (NULL on failure). */
static void* read_file(const char* path, size_t size, size_t count) {
  FILE* f = fopen(path, "rb");
  void* buf = malloc(size * count);
  if (f == NULL || buf == NULL || fread(buf, size, count, f) != count) {
    if (f) fclose(f);
    free(buf);
    return NULL;
  }
  fclose(f);
  return buf;
}

/* One family case (written by tests/tools/write_family_checkpoints into case_dir, with its inputs and float64
 * references): the MoE layer from `path_to_load` alone (the directory, or the GGUF file), dropless, against
 * the float64 reference of the family's published block on the weights the default storage holds (a quantized
 * file as stored, run by its kernels' activation rule: within `tolerance`); then fp32 storage of the weights
 * against the reference on the exact ones (within 1e-5); a dense layer is refused naming the MoE layers.
 * Returns the number of layers checked. */
static int check_family(const char* case_dir, const char* path_to_load, const char* name,
                        const char* model_type, const char* quant, int layer, int tokens, int hidden,
                        double tolerance) {
  char path[1200];
  int storage_case, checked = 0;
  float* x;
  unsigned char* ties;
  uint64_t* ids;
  uint32_t* pos;
  float* y;
  int t, i;
  snprintf(path, sizeof path, "%s/x.bin", case_dir);
  x = (float*)read_file(path, sizeof(float), (size_t)tokens * (size_t)hidden);
  snprintf(path, sizeof path, "%s/ties.bin", case_dir);
  ties = (unsigned char*)read_file(path, 1, (size_t)tokens);
  ids = (uint64_t*)malloc(sizeof(uint64_t) * (size_t)tokens);
  pos = (uint32_t*)malloc(sizeof(uint32_t) * (size_t)tokens);
  y = (float*)malloc(sizeof(float) * (size_t)tokens * (size_t)hidden);
  CHECK(x != NULL && ties != NULL && ids != NULL && pos != NULL && y != NULL);
  if (x == NULL || ties == NULL || ids == NULL || pos == NULL || y == NULL) return 0;
  for (t = 0; t < tokens; ++t) {
    ids[t] = (uint64_t)(t % 6);
    pos[t] = (uint32_t)(t / 6);
  }
  for (storage_case = 0; storage_case < 2; ++storage_case) {
    /* 0: moe_layer_create_pretrained (the file's storage); 1: fp32 weights + the same config. */
    moe_layer_config_t* config = NULL;
    moe_layer_t* l = NULL;
    double* ref;
    double worst = 0;
    const double bound = storage_case == 0 ? tolerance : 1e-5;
    CHECK_OK(moe_layer_config_create(&config));
    CHECK_OK(moe_layer_config_set_scope(config, "none"));
    CHECK_OK(moe_layer_config_set_max_tokens(config, tokens));
    if (storage_case == 1) CHECK_OK(moe_layer_config_set_storage(config, MOE_DTYPE_F32));
    CHECK_OK(moe_layer_create_pretrained(path_to_load, layer, config, &l));
    snprintf(path, sizeof path, "%s/%s", case_dir, storage_case == 0 ? "y_stored.bin" : "y_exact.bin");
    ref = (double*)read_file(path, sizeof(double), (size_t)tokens * (size_t)hidden);
    CHECK(l != NULL && ref != NULL);
    if (l != NULL && ref != NULL) {
      CHECK_OK(moe_layer_forward(l, x, tokens, hidden, ids, pos, y, NULL));
      for (t = 0; t < tokens; ++t) {
        double err = 0, norm = 0;
        if (ties[t]) continue;
        for (i = 0; i < hidden; ++i) {
          const double diff = y[t * hidden + i] - ref[t * hidden + i];
          err += diff * diff;
          norm += ref[t * hidden + i] * ref[t * hidden + i];
        }
        if (sqrt(err / norm) > worst) worst = sqrt(err / norm);
      }
      if (worst > bound)
        fprintf(stderr, "%s storage case %d: relative error %g\n", name, storage_case, worst);
      CHECK(worst <= bound);
      ++checked;
    }
    free(ref);
    moe_layer_destroy(l);
    moe_layer_config_destroy(config);
  }
  {
    /* Layer 0 is dense in the families with dense layers: refused, naming the MoE layers. */
    moe_weights_t* w = NULL;
    const moe_status_t s = moe_weights_load_pretrained(path_to_load, 0, -1, &w);
    if (s != MOE_OK) {
      CHECK(s == MOE_INVALID_ARGUMENT && strstr(moe_last_error(), "the MoE layers of this") != NULL);
    }
    moe_weights_destroy(w);
  }
  printf(
      "family %-24s (%s, %s, layer %d): from %s alone, within %g (as stored) and 1e-5 (f32) of its float64 "
      "block\n",
      name, model_type, quant, layer, strcmp(case_dir, path_to_load) == 0 ? "its directory" : "its GGUF file",
      tolerance);
  free(x);
  free(ties);
  free(ids);
  free(pos);
  free(y);
  return checked;
}

/* Every family's checkpoint directory (root/families.txt), and every GGUF family file (root/gguf/gguf.txt).
 */
static void test_families(const char* root) {
  char path[1200], name[128], model_type[64], quant[16], file[256];
  int layer = 0, tokens = 0, hidden = 0, checked = 0, gguf_checked = 0;
  double tolerance = 0;
  FILE* manifest;
  if (strlen(root) > 900) return;
  snprintf(path, sizeof path, "%s/families.txt", root);
  manifest = fopen(path, "r");
  CHECK(manifest != NULL);
  if (manifest == NULL) return;
  while (fscanf(manifest, "%127s %63s %15s %d %d %d %lf", name, model_type, quant, &layer, &tokens, &hidden,
                &tolerance) == 7) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    checked += check_family(dir, dir, name, model_type, quant, layer, tokens, hidden, tolerance);
  }
  fclose(manifest);
  CHECK(checked >= 2 * 19);
  snprintf(path, sizeof path, "%s/gguf/gguf.txt", root);
  manifest = fopen(path, "r");
  CHECK(manifest != NULL);
  if (manifest == NULL) return;
  while (fscanf(manifest, "%127s %63s %15s %d %d %d %lf %255s", name, model_type, quant, &layer, &tokens,
                &hidden, &tolerance, file) == 8) {
    char dir[1100], gguf[1400];
    snprintf(dir, sizeof dir, "%s/gguf/%s", root, name);
    snprintf(gguf, sizeof gguf, "%s/%s", dir, file);
    gguf_checked += check_family(dir, gguf, name, model_type, quant, layer, tokens, hidden, tolerance);
  }
  fclose(manifest);
  CHECK(gguf_checked >= 2 * 12);
}

/* The presets' one-sentence descriptions: read from the presets themselves (scope, priority, kernels). */
static void test_preset_descriptions(void) {
  const char* d = moe_preset_description("deterministic");
  const char* g = moe_preset_description("greedy");
  CHECK(d != NULL && strstr(d, "prefix scope (lookahead 16), request priority, drop") != NULL);
  CHECK(d != NULL && strstr(d, "invariant kernels") != NULL && strstr(d, "bitwise independent") != NULL);
  CHECK(g != NULL && strstr(g, "batch scope, arrival priority, drop") != NULL &&
        strstr(g, "fast kernels") != NULL);
  CHECK(moe_preset_description("deterministic") == d); /* static */
  CHECK(moe_preset_description("bogus") == NULL);
  CHECK(strstr(moe_last_error(), "unknown preset 'bogus' (known: deterministic, greedy)") != NULL);
  CHECK(moe_preset_description(NULL) == NULL);
  CHECK(strstr(moe_last_error(), "preset must not be NULL") != NULL);
}

int main(int argc, char** argv) {
  printf("moe %s\n", moe_version());
  test_preset_descriptions();
  test_random_forward();
  test_compute_precision();
  test_buffers();
  test_serving_lifecycle();
  test_prefix_cache_lifecycle();
  test_conversation_turns();
  test_causal_chunks();
  test_io_errors();
  test_device();
  test_pretrained();
  if (argc > 1) test_families(argv[1]);
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("api_c_test: all checks passed\n");
  return 0;
}

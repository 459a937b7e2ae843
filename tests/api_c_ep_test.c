/* Expert parallelism from C (compiled as C99, using only moe/api/moe_c.h), under mpirun with 1, 2 and 4 ranks
 * (tests/cmake/api.cmake): every rank builds the trained checkpoint's layer 1 as one rank of an
 * expert-parallel layer reading only its experts (moe_layer_create_pretrained with
 * moe_layer_config_set_expert_parallel "mpi"), under both planning modes and an EPLB placement with redundant
 * experts, and its output rows must be bitwise those of the single-process layer on the ranks' rows
 * concatenated in rank order. MPI is started by the library (this program does not link MPI itself). */
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

enum { kRequests = 8, kLen = 6, kHidden = 256, kExperts = 8, kTokens = kRequests * kLen };

static float hidden_value(int request, int position, int i) {
  unsigned long long s = (unsigned long long)(request * 131 + position * 7 + 1) * 6364136223846793005ULL +
                         (unsigned long long)i * 1442695040888963407ULL;
  s ^= s >> 29;
  s *= 0xbf58476d1ce4e5b9ULL;
  s ^= s >> 32;
  return (float)((s >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f +
         0.5f * (float)((request * 37 + i) % 7) / 7.0f;
}

/* The global batch: request r lives on rank r % world; the ranks' rows in rank order, each request's
 * positions in order. first[rank] .. first[rank + 1] are a rank's rows. */
static void make_batch(int world, float* x, uint64_t* ids, uint32_t* pos, int* first) {
  int t = 0, rank, r, p, i;
  for (rank = 0; rank < world; ++rank) {
    first[rank] = t;
    for (r = 0; r < kRequests; ++r) {
      if (r % world != rank) continue;
      for (p = 0; p < kLen; ++p, ++t) {
        ids[t] = (uint64_t)(100 + r);
        pos[t] = (uint32_t)p;
        for (i = 0; i < kHidden; ++i) x[(size_t)t * kHidden + i] = hidden_value(r, p, i);
      }
    }
  }
  first[world] = t;
}

static void run(const char* planning, const int32_t* slots, int64_t num_slots) {
  static float x[kTokens * kHidden], y_ref[kTokens * kHidden], y[kTokens * kHidden];
  static uint64_t ids[kTokens];
  static uint32_t pos[kTokens];
  int first[5];
  moe_layer_config_t* config = NULL;
  moe_layer_t *ep = NULL, *ref = NULL;
  moe_routing_state_t *state = NULL, *ref_state = NULL;
  int32_t rank = -1, world = 0, local = -1;
  int r, rows;
  CHECK(moe_layer_config_create(&config) == MOE_OK);
  CHECK(moe_layer_config_set_expert_parallel(config, "mpi", planning) == MOE_OK);
  if (num_slots > 0) CHECK(moe_layer_config_set_expert_placement(config, slots, num_slots) == MOE_OK);
  CHECK(moe_layer_create_pretrained(MOE_KJV_DIR, 1, config, &ep) == MOE_OK);
  if (ep == NULL) exit(1);
  CHECK(moe_layer_expert_parallel(ep, &rank, &world, &local) == MOE_OK);
  CHECK(world >= 1 && world <= 4 && rank >= 0 && rank < world);
  CHECK(local == (strcmp(planning, "home") == 0));
  CHECK(moe_layer_create_pretrained(MOE_KJV_DIR, 1, NULL, &ref) == MOE_OK);
  make_batch(world, x, ids, pos, first);
  /* The deterministic preset (prefix scope) plans admitted requests: the reference's state holds all; the
   * expert-parallel layer's holds every request (global) or this rank's (home). */
  CHECK(moe_routing_state_create(ref, &ref_state) == MOE_OK);
  CHECK(moe_routing_state_create(ep, &state) == MOE_OK);
  for (r = 0; r < kRequests; ++r) {
    CHECK(moe_routing_state_admit(ref_state, (uint64_t)(100 + r), kLen) == MOE_OK);
    if (strcmp(planning, "global") == 0 || r % world == rank) {
      CHECK(moe_routing_state_admit(state, (uint64_t)(100 + r), kLen) == MOE_OK);
    }
  }
  CHECK(moe_layer_forward(ref, x, kTokens, kHidden, ids, pos, y_ref, ref_state) == MOE_OK);
  rows = first[rank + 1] - first[rank];
  CHECK(moe_layer_forward(ep, x + (size_t)first[rank] * kHidden, rows, kHidden, ids + first[rank],
                          pos + first[rank], y, state) == MOE_OK);
  CHECK(memcmp(y, y_ref + (size_t)first[rank] * kHidden, (size_t)rows * kHidden * sizeof(float)) == 0);
  moe_routing_state_destroy(state);
  moe_routing_state_destroy(ref_state);
  moe_layer_destroy(ep);
  moe_layer_destroy(ref);
  moe_layer_config_destroy(config);
}

int main(void) {
  /* DeepSeek's load balancer on the published README example. */
  const float load[12] = {90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86};
  const int32_t want[16] = {5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1};
  int32_t phy2log[16], slots[kExperts + 8];
  float kjv_load[kExperts] = {500, 40, 300, 20, 80, 900, 60, 100};
  moe_layer_config_t* config = NULL;
  moe_layer_t* probe = NULL;
  int32_t world = 0;
  CHECK(moe_eplb_rebalance(load, 12, 16, 4, 2, 8, phy2log) == MOE_OK);
  CHECK(memcmp(phy2log, want, sizeof want) == 0);
  CHECK(moe_eplb_rebalance(load, 12, 18, 4, 2, 8, phy2log) == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "num_replicas (18) must be a multiple of num_gpus (8)") != NULL);
  CHECK(moe_layer_config_create(&config) == MOE_OK);
  CHECK(moe_layer_config_set_expert_parallel(config, "tcp", "home") == MOE_INVALID_ARGUMENT);
  CHECK(strstr(moe_last_error(), "'tcp' is not one of") != NULL);
  CHECK(moe_layer_config_set_expert_parallel(config, "mpi", "local") == MOE_INVALID_ARGUMENT);
  CHECK(moe_layer_config_set_expert_parallel(config, "mpi", "home") == MOE_OK);
  CHECK(moe_layer_config_set_device(config, "cpu") == MOE_OK);
  CHECK(moe_layer_create_pretrained(MOE_KJV_DIR, 1, config, &probe) == MOE_OK);
  CHECK(moe_layer_expert_parallel(probe, NULL, &world, NULL) == MOE_OK);
  moe_layer_destroy(probe);
  moe_layer_config_destroy(config);

  run("global", NULL, 0);
  run("home", NULL, 0);
  /* Redundant experts: EPLB's placement of 8 + 2 x world slots over the ranks. */
  CHECK(moe_eplb_rebalance(kjv_load, kExperts, kExperts + 2 * world, 1, 1, world, slots) == MOE_OK);
  run("home", slots, kExperts + 2 * world);
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("api_c_ep_test: all checks passed (%d ranks)\n", world);
  return 0;
}

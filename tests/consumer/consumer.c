/* A C program using the installed moe package through moe/api/moe_c.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "moe/api/moe_c.h"

#define TRY(call)                                                                               \
  do {                                                                                          \
    moe_status_t s_ = (call);                                                                   \
    if (s_ != MOE_OK) {                                                                         \
      fprintf(stderr, "%s failed: %s: %s\n", #call, moe_status_string(s_), moe_last_error());   \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)

int main(void) {
  moe_layer_shape_t shape = {64, 96, 8, 0, 0, 0, 0};
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  enum { kTokens = 16 };
  static float x[kTokens * 64], y[kTokens * 64];
  uint64_t ids[kTokens];
  uint32_t pos[kTokens];
  moe_stats_t stats;
  double sum = 0;
  int i;

  TRY(moe_weights_random(&shape, MOE_DTYPE_BF16, 1, &weights));
  TRY(moe_layer_create(weights, NULL, &layer));
  moe_weights_destroy(weights);
  for (i = 0; i < kTokens * 64; ++i) x[i] = sinf(12.9898f * (float)i); /* varied rows */
  for (i = 0; i < kTokens; ++i) {
    ids[i] = (uint64_t)(i % 2);
    pos[i] = (uint32_t)(i / 2);
  }
  TRY(moe_layer_forward(layer, x, kTokens, 64, ids, pos, y, NULL));
  TRY(moe_layer_stats(layer, &stats, NULL, 0));
  for (i = 0; i < kTokens * 64; ++i) sum += y[i];
  printf("consumer_c (moe %s): y checksum %.6f, kept %lld, dropped %lld\n", moe_version(), sum,
         (long long)stats.num_kept, (long long)stats.num_dropped);
  if (moe_layer_forward(layer, x, kTokens, 63, ids, pos, y, NULL) != MOE_INVALID_ARGUMENT) return 1;
  moe_layer_destroy(layer);
  return isfinite(sum) ? 0 : 1;
}

/* The C API loaded at run time from an installed libmoe.so (dlopen/dlsym, as ctypes or another language's FFI
   does): the program links no moe library. The same layer and inputs as tests/consumer/consumer.c, so the two
   print the same checksum. Usage: dlopen_c_api path/to/libmoe.so.N.M */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "moe/api/moe_c.h"

#define LOAD(name)                                               \
  name##_fn name##_ = (name##_fn)dlsym(lib, #name);              \
  if (name##_ == NULL) {                                         \
    fprintf(stderr, "dlsym(%s) failed: %s\n", #name, dlerror()); \
    return 1;                                                    \
  }

typedef const char* (*moe_version_fn)(void);
typedef const char* (*moe_last_error_fn)(void);
typedef moe_status_t (*moe_weights_random_fn)(const moe_layer_shape_t*, moe_dtype_t, uint64_t,
                                              moe_weights_t**);
typedef void (*moe_weights_destroy_fn)(moe_weights_t*);
typedef moe_status_t (*moe_layer_create_fn)(const moe_weights_t*, const moe_layer_config_t*, moe_layer_t**);
typedef moe_status_t (*moe_layer_forward_fn)(moe_layer_t*, const float*, int64_t, int64_t, const uint64_t*,
                                             const uint32_t*, float*, moe_routing_state_t*);
typedef moe_status_t (*moe_layer_stats_fn)(const moe_layer_t*, moe_stats_t*, int32_t*, int64_t);
typedef void (*moe_layer_destroy_fn)(moe_layer_t*);

int main(int argc, char** argv) {
  enum { kTokens = 16, kHidden = 64 };
  static float x[kTokens * kHidden], y[kTokens * kHidden];
  moe_layer_shape_t shape = {kHidden, 96, 8, 0, 0, 0, 0};
  uint64_t ids[kTokens];
  uint32_t pos[kTokens];
  moe_weights_t* weights = NULL;
  moe_layer_t* layer = NULL;
  moe_stats_t stats;
  double sum = 0;
  void* lib;
  int i;
  if (argc != 2) {
    fprintf(stderr, "usage: dlopen_c_api path/to/libmoe.so\n");
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen failed: %s\n", dlerror());
    return 1;
  }
  {
    LOAD(moe_version)
    LOAD(moe_last_error)
    LOAD(moe_weights_random)
    LOAD(moe_weights_destroy)
    LOAD(moe_layer_create)
    LOAD(moe_layer_forward)
    LOAD(moe_layer_stats)
    LOAD(moe_layer_destroy)
    if (moe_weights_random_(&shape, MOE_DTYPE_BF16, 1, &weights) != MOE_OK ||
        moe_layer_create_(weights, NULL, &layer) != MOE_OK) {
      fprintf(stderr, "create failed: %s\n", moe_last_error_());
      return 1;
    }
    moe_weights_destroy_(weights);
    for (i = 0; i < kTokens * kHidden; ++i) x[i] = sinf(12.9898f * (float)i);
    for (i = 0; i < kTokens; ++i) {
      ids[i] = (uint64_t)(i % 2);
      pos[i] = (uint32_t)(i / 2);
    }
    if (moe_layer_forward_(layer, x, kTokens, kHidden, ids, pos, y, NULL) != MOE_OK ||
        moe_layer_stats_(layer, &stats, NULL, 0) != MOE_OK) {
      fprintf(stderr, "forward failed: %s\n", moe_last_error_());
      return 1;
    }
    for (i = 0; i < kTokens * kHidden; ++i) sum += y[i];
    printf("consumer_c (moe %s): y checksum %.6f, kept %lld, dropped %lld\n", moe_version_(), sum,
           (long long)stats.num_kept, (long long)stats.num_dropped);
    /* An error crosses the boundary as a status and a message, never an exception. */
    if (moe_layer_forward_(layer, x, kTokens, kHidden - 1, ids, pos, y, NULL) != MOE_INVALID_ARGUMENT)
      return 1;
    printf("bad hidden size -> MOE_INVALID_ARGUMENT: %s\n", moe_last_error_());
    moe_layer_destroy_(layer);
  }
  dlclose(lib);
  return isfinite(sum) ? 0 : 1;
}

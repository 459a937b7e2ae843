#include "kernels/cpu/cpu_features.h"

namespace moe::kernels {

bool cpu_has_avx512_bf16() {
#if MOE_HAVE_AVX512_BF16_TARGET
  // __builtin_cpu_supports reports AVX-512 features only when the OS saves the zmm and mask registers (XCR0).
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  }();
  return yes;
#else
  return false;
#endif
}

bool cpu_has_avx512f() {
#if MOE_HAVE_AVX512_BF16_TARGET
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace moe::kernels

#include "kernels/cpu/cpu_features.h"

#if MOE_HAVE_AMX_TARGET
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

bool cpu_has_avx512_skx() {
#if MOE_HAVE_AVX512_BF16_TARGET
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }();
  return yes;
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() {
#if MOE_HAVE_AMX_TARGET
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx_bf16 = (d >> 22) & 1u, amx_tile = (d >> 24) & 1u;
    if (!amx_bf16 || !amx_tile) return false;
    __get_cpuid(1, &a, &b, &c, &d);
    if (!((c >> 27) & 1u)) return false;  // no OSXSAVE: XCR0 cannot be read
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3u) != 3u) return false;  // XTILECFG and XTILEDATA not enabled by the OS
    // ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): Linux 5.16 and later.
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace moe::kernels

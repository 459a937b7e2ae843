#include "kernels/cpu/cpu_features.h"

#if MOE_HAVE_AVX512_BF16_TARGET
#include <cpuid.h>
#endif
#if MOE_HAVE_AMX_TARGET
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

bool cpu_has_avx512_vnni() {
#if MOE_HAVE_AVX512_BF16_TARGET
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_has_avx512_skx() && __builtin_cpu_supports("avx512vnni");
  }();
  return yes;
#else
  return false;
#endif
}

bool cpu_has_avx512_vbmi_bf16() {
#if MOE_HAVE_AVX512_BF16_TARGET
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_has_avx512_skx() && __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("avx512bf16");
  }();
  return yes;
#else
  return false;
#endif
}

bool cpu_has_avx_vnni() {
#if MOE_HAVE_AVX512_BF16_TARGET
  static const bool yes = [] {
    __builtin_cpu_init();
    // AVX-VNNI (CPUID.(7,1):EAX bit 4) and F16C (CPUID.1:ECX bit 29) read directly: clang 14's
    // __builtin_cpu_supports knows neither. The AVX2 test covers the OS's ymm state.
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool vnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1u);
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
    return vnni && f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
#else
  return false;
#endif
}

namespace {

#if MOE_HAVE_AMX_TARGET
// AMX-TILE and the feature bit `feature` of CPUID.(7,0):EDX (22 AMX-BF16, 25 AMX-INT8), the OS's tile state
// (XCR0 bits 17-18) and this process's permission (asked once for the whole process).
bool amx_usable(unsigned feature) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool has = (d >> feature) & 1u, amx_tile = (d >> 24) & 1u;
  if (!has || !amx_tile) return false;
  __get_cpuid(1, &a, &b, &c, &d);
  if (!((c >> 27) & 1u)) return false;  // no OSXSAVE: XCR0 cannot be read
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3u) != 3u) return false;  // XTILECFG and XTILEDATA not enabled by the OS
  // ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): Linux 5.16 and later.
  static const bool permitted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return permitted;
}
#endif

}  // namespace

bool cpu_has_amx_bf16() {
#if MOE_HAVE_AMX_TARGET
  static const bool yes = amx_usable(22);
  return yes;
#else
  return false;
#endif
}

}  // namespace moe::kernels

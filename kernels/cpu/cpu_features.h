// What the CPU running this process can execute, asked at run time (CPUID and the OS's saved register state,
// through the compiler's __builtin_cpu_supports), so that one binary runs everywhere: code that needs an
// instruction set beyond the build's flags is compiled for it alone (MOE_TARGET_AVX512_BF16 on a function, or
// a `#pragma GCC target` region in one file) and is called only when the matching check says yes.
//
// The project never compiles with AVX512_BF16 enabled globally (CMakeLists.txt adds -mno-avx512bf16 to
// -march=native), so that no file but the dispatched ones can emit vdpbf16ps: a build on a CPU with
// AVX512_BF16 runs unchanged on AVX-512 CPUs without it.
#pragma once

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
// The attribute of a function that uses AVX512F + AVX512_BF16 intrinsics (call it only when
// cpu_has_avx512_bf16()). MOE_HAVE_AVX512_BF16_TARGET says whether this compiler can build such functions.
#define MOE_HAVE_AVX512_BF16_TARGET 1
#define MOE_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bf16")))
#else
#define MOE_HAVE_AVX512_BF16_TARGET 0
#define MOE_TARGET_AVX512_BF16
#endif

namespace moe::kernels {

// True when this CPU and OS run AVX512F and AVX512_BF16 (vdpbf16ps) code. Cached; thread-safe.
bool cpu_has_avx512_bf16();
// True when this CPU and OS run AVX512F code. Cached; thread-safe.
bool cpu_has_avx512f();

}  // namespace moe::kernels

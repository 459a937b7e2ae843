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

// Whether this compiler can build AMX-BF16 code (a `#pragma GCC target("amx-tile,amx-bf16")` region), on
// x86-64 Linux, where the OS hands out the tile state on request (arch_prctl).
#if defined(__x86_64__) && defined(__linux__) &&      \
    ((defined(__clang__) && __clang_major__ >= 12) || \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define MOE_HAVE_AMX_TARGET 1
#else
#define MOE_HAVE_AMX_TARGET 0
#endif

// A target region: every function defined between MOE_TARGET_REGION_BEGIN("isa,...") and
// MOE_TARGET_REGION_END() is compiled for those instruction sets (GCC's `#pragma GCC target`, clang's
// `#pragma clang attribute`). Open it after the file's includes (the headers' inline functions keep the
// build's flags), and only where the matching MOE_HAVE_*_TARGET is 1.
#define MOE_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define MOE_TARGET_REGION_BEGIN(isa) \
  MOE_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define MOE_TARGET_REGION_END() MOE_PRAGMA(clang attribute pop)
#else
#define MOE_TARGET_REGION_BEGIN(isa) MOE_PRAGMA(GCC push_options) MOE_PRAGMA(GCC target(isa))
#define MOE_TARGET_REGION_END() MOE_PRAGMA(GCC pop_options)
#endif

namespace moe::kernels {

// True when this CPU and OS run AVX512F and AVX512_BF16 (vdpbf16ps) code. Cached; thread-safe.
bool cpu_has_avx512_bf16();
// True when this CPU and OS run AVX512F code. Cached; thread-safe.
bool cpu_has_avx512f();
// True when this CPU and OS run AVX512F + AVX512BW + AVX512VL + AVX512DQ code (the Skylake-X set, which every
// AVX-512 CPU since has: the fp32 invariant kernel's target region). Cached; thread-safe.
bool cpu_has_avx512_skx();
// True when this CPU and OS run the Skylake-X set plus AVX512_VNNI (vpdpbusd, vpdpwssd on zmm): the quantized
// kernels' AVX-512 path. Cached; thread-safe.
bool cpu_has_avx512_vnni();
// True when this CPU and OS run AVX512_VBMI (vpermi2b) and AVX512_BF16 besides the Skylake-X set: the FP8
// kernel's AVX-512 path (byte table lookups, vdpbf16ps). Cached; thread-safe.
bool cpu_has_avx512_vbmi_bf16();
// True when this CPU and OS run AVX2, FMA, F16C and the VEX-encoded AVX-VNNI (vpdpbusd on ymm; Alder Lake and
// later, Zen 5). Cached; thread-safe.
bool cpu_has_avx_vnni();
// True when this CPU has AMX-TILE and AMX-INT8 (tdpbssd), the OS saves the tile state and has granted this
// process its use (as cpu_has_amx_bf16). Cached; thread-safe.
bool cpu_has_amx_int8();
// True when this CPU has AMX-TILE and AMX-BF16 (tdpbf16ps), the OS saves the tile state (XCR0) and has
// granted this process its use (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here, for the whole process).
// Cached; thread-safe.
bool cpu_has_amx_bf16();

}  // namespace moe::kernels

// Internal: includes the x86 intrinsics for the kernels' .cc files. Include it before any other header
// that may pull in <immintrin.h> (Eigen does).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
// NOTES: GCC 12 reports false -Wuninitialized / -Wmaybe-uninitialized inside the AVX-512 headers
// (their _mm512_undefined_* helpers are self-initialised on purpose). The warnings fire after inlining,
// where a push/pop around the include does not reach, so they are switched off for the rest of the
// including .cc file. Only the intrinsics-based kernel files include this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

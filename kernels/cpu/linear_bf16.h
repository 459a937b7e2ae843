// The batch-invariant bf16-compute linear: y = bf16(x) @ W^T with fp32 accumulation in one of two fixed
// orders (contracts), each computed by the fastest implementation this CPU has.
//
// Contract (every y[r][o], whatever the number of rows, the row's place, strides, alignment or thread
// count): with xb = x's row r rounded to bf16 (f32_to_bf16) and wb = W's row o in bf16 (bf16_packed.h),
// both padded with one zero element when `in` is odd, and P = pairs(in), one of
//   pair: acc = +0;  for p = 0 .. P - 1:  acc = dpbf16(acc, xb[2p], xb[2p+1], wb[2p], wb[2p+1]);  y = acc
//         where dpbf16 is one lane of vdpbf16ps (kernels/cpu/dpbf16.h: odd element first, two fused steps
//         with DAZ and FTZ). One sequential chain per output: no lanes to reduce, no split of the reduction.
//   tile: what AMX's tdpbf16ps computes (kernels/cpu/tile_bf16.h): blocks of 16 pairs from p = 0 on, each
//         an even and an odd chain of the same fused steps from +0, summed once and added once to acc.
// The process runs ONE contract, chosen at first use (linear_bf16_contract() below): `tile` where the CPU has
// AMX-BF16, `pair` elsewhere (MOE_BF16_CONTRACT=pair|tile pins it, e.g. for the same bits across a fleet of
// mixed machines; each contract's scalar emulation runs anywhere). Implementations (Bf16Kernel below):
// pair - vdpbf16ps (16 outputs of a weight panel in the lanes of a register, the x pair broadcast), AVX-512F
// fp32 FMAs on the exactly widened operands under DAZ/FTZ (the same two roundings per pair), the scalar
// emulation; tile - AMX tiles, the same FMAs in the tile contract's order, the scalar emulation. Within a
// contract all give the same bits (tested on subnormals, infinities and NaN payloads); threads split whole
// panels of outputs, never a reduction.
//
// Accuracy (tests/kernels_cpu_bf16_compute_test.cc), against float64 of the SAME bf16-rounded x and W:
// each product of two bf16 numbers is exact in fp32, so the only errors are the roundings of the chains
// (and flushing of values below 2^-126, which the tests' data never reach); a product passes through at
// most 2P of them in either contract (pair: the chain's 2P; tile: its block's chain of <= 16, the sum and
// one add per remaining block):
//   |y - ref| <= gamma(2P) * sum_i |xb_i wb_i|,  gamma(n) = n u / (1 - n u), u = 2^-24        (worst case)
// and, since the rounding errors of a long chain have random signs, typically ~ sqrt(2P) u of that scale.
// The tests require |y - ref| <= 4 sqrt(2P) u * sum_i |xb_i wb_i| + 2^-126 * 2P (about 1.2e-5 for in =
// 2816), well inside the worst case and a few times what is measured. Against the unrounded fp32 x and W
// the rounding of both operands (bf16's unit roundoff is 2^-8) adds up to (2^-7 + 2^-16) of the scale
// sum_i |x_i w_i|.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/bf16_packed.h"
#include "kernels/cpu/thread_pool.h"

namespace moe::kernels {

// bf16 elements of input workspace that linear_bf16() needs for `rows` rows of length `in`.
inline constexpr size_t linear_bf16_workspace_elems(int64_t rows, int64_t in) {
  return static_cast<size_t>(rows) * static_cast<size_t>(2 * bf16_pairs(in));
}

// y = bf16(x) @ W^T by the contract above.
//   x: rows x w.in() fp32, row r at x + r * x_stride (x_stride >= in); any alignment.
//   y: rows x w.out() fp32, row r at y + r * y_stride (y_stride >= out), overwritten; must not overlap x.
//   workspace: linear_bf16_workspace_elems(rows, in) bf16 elements owned by the caller (clobbered), or
//   null to use a buffer of the calling thread that grows to the largest call and is then reused.
// Threading: runs on `pool`; the per-call allocation is none after warm-up. Errors: std::invalid_argument
// for negative rows, strides below the row lengths, or null pointers with nonzero sizes.
void linear_bf16(const float* x, int64_t rows, int64_t x_stride, const PackedBf16Weights& w, float* y,
                 int64_t y_stride, uint16_t* workspace, ThreadPool& pool);

// The same on an input already rounded to bf16 (round_rows_to_bf16's layout: row r at
// xb + r * 2 * pairs(in)); the FFN feeds its hidden activation this way.
void linear_bf16_rounded(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, float* y,
                         int64_t y_stride, ThreadPool& pool);

// Outputs [64 j0, min(out, 64 j1)) of linear_bf16_rounded (the same bits), on the calling thread only:
// 0 <= j0 <= j1 <= w.panels() (panels of kBf16PanelOutputs outputs). y row r at y + r * y_stride holds
// all w.out() outputs; only the range's are written. Throws std::invalid_argument for a bad range and as
// linear_bf16_rounded.
void linear_bf16_rounded_panels(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, int64_t j0,
                                int64_t j1, float* y, int64_t y_stride);

// The two accumulation orders of the contract above.
enum class Bf16Contract : uint8_t { kPair, kTile };
const char* to_string(Bf16Contract c);

// The implementations; within a contract all give the same bits (tested), they differ in speed:
//   kPortable      pair: the scalar emulation of dpbf16.h (any CPU)
//   kAvx512Fma     pair: AVX-512F fp32 FMAs on the widened operands under DAZ/FTZ, NaN outputs redone by the
//                  emulation (linear_bf16_fma512.cc; CPUs with AVX512F)
//   kAvx512Dpbf16  pair: vdpbf16ps (linear_bf16_avx512.cc; CPUs with AVX512_BF16)
//   kPortableTile  tile: the scalar emulation of tile_bf16.h (any CPU)
//   kAvx512FmaTile tile: AVX-512F fp32 FMAs under DAZ/FTZ, two chains per block, NaN outputs redone by the
//                  emulation (linear_bf16_fma512.cc; CPUs with AVX512F)
//   kAmx           tile: AMX tdpbf16ps (linear_bf16_amx.cc; CPUs with AMX-BF16 and an OS that grants it;
//                  products of 1-2 rows go to kAvx512FmaTile's code, which streams the weights faster)
enum class Bf16Kernel : uint8_t { kPortable, kAvx512Fma, kAvx512Dpbf16, kPortableTile, kAvx512FmaTile, kAmx };
const char* to_string(Bf16Kernel k);
Bf16Contract bf16_kernel_contract(Bf16Kernel k);
bool bf16_kernel_available(Bf16Kernel k);
// The implementation linear_bf16 runs, chosen once per process (thread-safe):
//   MOE_BF16_KERNEL=portable|fma|dpbf16|portable-tile|fma-tile|amx in the environment forces one (if this CPU
//   has it);
//   otherwise the contract is MOE_BF16_CONTRACT=pair|tile if set, else `tile` where AMX is available and
//   `pair` elsewhere; within `pair`, where both AVX-512 kernels are available, the faster of the two on a
//   short timing at first use (on some CPUs vdpbf16ps has half the FMA rate in FLOP/s, on others twice), else
//   the best available; within `tile`, AMX if available, else the FMA kernel, else the emulation.
Bf16Kernel linear_bf16_kernel();
// The contract of linear_bf16_kernel().
Bf16Contract linear_bf16_contract();

// True when linear_bf16 runs the AVX-512 vdpbf16ps kernel (this CPU has AVX512_BF16; a run-time check).
bool linear_bf16_uses_avx512();

// linear_bf16_rounded with a given implementation (for tests and benchmarks). Throws std::invalid_argument if
// this CPU lacks it.
void linear_bf16_rounded_with(Bf16Kernel k, const uint16_t* xb, int64_t rows, const PackedBf16Weights& w,
                              float* y, int64_t y_stride, ThreadPool& pool);

// The scalar emulation of a contract (by default the one linear_bf16 runs), single-threaded, on a rounded
// input: the reference the kernels are compared with bit for bit.
void linear_bf16_rounded_portable(const uint16_t* xb, int64_t rows, const PackedBf16Weights& w, float* y,
                                  int64_t y_stride, Bf16Contract contract = linear_bf16_contract());

}  // namespace moe::kernels

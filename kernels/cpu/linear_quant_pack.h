// Internal to the quantized linear (kernels/cpu/linear_quant.h): the SIMD kernels' packed panels, the per-CPU
// kernel entry points, and the checks of the stored codes.
//
// The packed layout (QuantPanels; one layout for the AVX-512 and the AVX-VNNI kernels, which read 16 outputs
// as one zmm or two ymm). The outputs are cut into panels of 16 (the last one padded with zero codes and zero
// scales; its padding lanes are computed and never stored). The panels are stored in strips of
// `strip_panels` panels (1 for the integer types, kFp8StripPanels for FP8; the last strip padded with zero
// panels), each `strip_bytes` bytes, 64-byte aligned: a sequence of groups of `group_bytes`. For the integer
// types (a strip is a panel) each group holds 2^group_shift consecutive steps' weights (`step_weight_bytes`
// each), then their scales (`step_scale_bytes` each), padded to 64 bytes, so that a one-row product reads
// the whole matrix as one ascending stream (with the scales in a region of their own per panel, each panel
// began a second stream that the hardware prefetcher caught late). A "chunk" below is 64 bytes whose 4-byte
// lane o belongs to output 16 j + o.
//
//   Q8_0  step = block (32 elements), 2 a group. Weights: 8 chunks, chunk k lane o = the codes qs[4k .. 4k+3]
//         of o, each + 128 (as uint8: vpdpbusd's unsigned operand). Scales: 16 fp16 d (32 bytes).
//   MXFP4 step = block (32 elements), 4 a group. Weights: 4 chunks, chunk g lane o = the stored bytes
//         qs[4g .. 4g+3] of o (low nibbles: elements 4g..4g+3, high nibbles: 16+4g..16+4g+3; a table maps a
//         code to its value + 128). Scales: 16 e8m0 bytes.
//   Q4_K  step = super-block (256 elements), 1 a group. Weights: 32 chunks, chunk 8c + g (c < 4, g < 8) lane
//         o = the stored bytes qs[32c + 4g .. 32c + 4g + 3] of o (low nibbles: elements 64c + 4g.., sub-block
//         2c; high nibbles: 64c + 32 + 4g.., sub-block 2c + 1). Scales (320 bytes): d[16] fp16, dmin[16]
//         fp16, sc[8][16] uint8 (sub-block j's 6-bit scale of each output), m[4][16][2] uint8 (the mins of
//         sub-blocks 2p and 2p + 1 of each output, side by side: widened to int16 pairs for vpdpwssd).
//   Q6_K  step = super-block (256 elements), 1 a group. Weights: 48 chunks, in the order the kernel reads
//         them: for half h < 2 and g < 8, chunks 24h + 3g, 24h + 3g + 1, 24h + 3g + 2 lane o = the stored
//         ql[64h + 4g .. +3], ql[64h + 32 + 4g .. +3] and qh[32h + 4g .. +3] of o (the 6-bit code + 32 of
//         four elements is rebuilt from them in registers). Scales (288 bytes): d[16] fp16, sc[16][16] int8.
//   FP8   step = 2 pairs (4 elements) of one scale block; a group is one scale block (group_shift unused):
//         its P pairs take block_steps = ceil(block_pairs / 2) steps (the last one half used when P is odd),
//         then the scales. The strip's 4 panels are interleaved chunk by chunk: a group is block_steps rows
//         of 4 chunks (row i: step i of panels 4s, 4s + 1, 4s + 2, 4s + 3), then 4 x 16 fp32 scales (panel
//         k's at 64 k), so that a one-row product runs the 4 panels' dependent chains side by side from one
//         stream (4 panels in 4 streams of their own streamed at 53-57 % of the bandwidth, 91-99 % from one).
//         A step's chunk holds the e4m3 codes of pairs p, p + 1: byte 16 (o / 4) + 2 (o % 4) + e = w[o][2p
//         + e], byte 16 (o / 4) + 8 + 2 (o % 4) + e = w[o][2p + 2 + e] (a zero code past an odd `in`), the
//         order in which vpunpck{l,h}bw of the bf16 bytes yields the pair-interleaved dwords of p and p + 1.
// The integer parts of the contract are exact in any order, so these layouts change no bits: each kernel
// still runs the header's fp32 chain per output, blocks ascending.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/linear_quant.h"
#include "kernels/tensor.h"
#include "kernels/weight_buffer.h"

namespace moe::kernels {

// The weights of a QuantLinear repacked for one SIMD kernel.
struct QuantLinear::Packed {
  QuantKernel kernel = QuantKernel::kPortable;
  DType type = DType::kQ8_0;
  int64_t out = 0, in = 0;
  virtual ~Packed() = default;
  virtual size_t bytes() const = 0;
};

namespace detail {

inline constexpr int64_t kQuantPanelOutputs = 16;
// FP8 panels per strip: a one-row product runs four panels' chains side by side, reading one stream.
inline constexpr int64_t kFp8StripPanels = 4;

// The panels described above.
struct QuantPanels final : QuantLinear::Packed {
  int64_t panels = 0;
  int64_t steps = 0;  // per panel: blocks (Q8_0, MXFP4), super-blocks (Q4_K, Q6_K), 2-pair steps (FP8)
  size_t step_weight_bytes = 0, step_scale_bytes = 0;  // the integer types (FP8: fp8_step_stride)
  size_t group_bytes = 0;
  int group_shift = 0;
  // Panels are stored in strips of strip_panels (1, or 4 for FP8) of strip_bytes each; panel j begins 64 (j %
  // strip_panels) bytes into strip j / strip_panels.
  int64_t strip_panels = 1;
  size_t strip_bytes = 0;
  // FP8: the scale blocks along the columns (block c, group c: pairs [c * block_pairs, min(pairs, (c + 1) *
  // block_pairs)), in block_steps steps).
  int64_t pairs = 0, block_pairs = 0, block_steps = 0, scale_blocks = 0;

  // Step b's weights and scales in a panel (the block types).
  const std::byte* step_weights(const std::byte* panel, int64_t b) const {
    return panel + static_cast<size_t>(b >> group_shift) * group_bytes +
           static_cast<size_t>(b & ((int64_t{1} << group_shift) - 1)) * step_weight_bytes;
  }
  const std::byte* step_scales(const std::byte* panel, int64_t b) const {
    return panel + static_cast<size_t>(b >> group_shift) * group_bytes + (step_weight_bytes << group_shift) +
           static_cast<size_t>(b & ((int64_t{1} << group_shift) - 1)) * step_scale_bytes;
  }

  // The end of the group holding step b (its last scale's padding included).
  const std::byte* group_end(const std::byte* panel, int64_t b) const {
    return panel + static_cast<size_t>((b >> group_shift) + 1) * group_bytes;
  }

  // FP8: bytes from a panel's step to its next one, and from its group's start to its scales.
  size_t fp8_step_stride() const { return 64 * static_cast<size_t>(strip_panels); }
  size_t fp8_scales_offset() const { return static_cast<size_t>(block_steps) * fp8_step_stride(); }

  int64_t strips() const { return (panels + strip_panels - 1) / strip_panels; }
  const std::byte* panel(int64_t j) const {
    return data.data() + static_cast<size_t>(j / strip_panels) * strip_bytes +
           64 * static_cast<size_t>(j % strip_panels);
  }
  std::byte* panel(int64_t j) {
    return data.data() + static_cast<size_t>(j / strip_panels) * strip_bytes +
           64 * static_cast<size_t>(j % strip_panels);
  }
  // The start of the strip holding panel j.
  const std::byte* strip_of(int64_t j) const {
    return data.data() + static_cast<size_t>(j / strip_panels) * strip_bytes;
  }
  size_t bytes() const override { return static_cast<size_t>(strips()) * strip_bytes; }

  WeightBuffer data;  // 2 MB pages where the system has them (kernels/weight_buffer.h)
};

// How far ahead of their reads the kernels ask for the weights. A one-row product reads a panel's strip as
// one ascending stream (the layout above) and asks for every line of it up to kPrefetchBytes past what
// it is about to read, scales' lines included: the integer kernels in one burst at the start of each
// group, the FP8 kernel at each step. Measured on the AMD Zen 5 development VM, Qwen3-30B-A3B-shaped
// layer at T = 1 on one thread, % of the streaming bandwidth (interleaved runs in one process): Q4_K 77 %
// with the former prefetch of one line 4 KB ahead of each weight load (which the compiler gathered at the
// top of the unrolled group, and which never asked for the scales' lines), 58 % without software prefetch,
// and with the group bursts 85 / 91 / 95 / 96 / 93 % at 2 / 4 / 6 / 8 / 12 KB, but 67 % asking line by
// line at each load; FP8, whose one-row product runs 4 panels side by side, 53-57 % (bursts) and 71-74 %
// (at each step) with the 4 panels in 4 streams of their own, 70-75 % and 91-99 % from one strip; Q8_0,
// Q6_K and MXFP4 92-98 % either way. Prefetching past the end of the data is harmless (no fault, no read).
inline constexpr size_t kPrefetchBytes = 8192;

// Asks for the line at p into the L1 cache (prefetcht0). An asm statement, not _mm_prefetch: GCC 12 deletes
// a loop whose only statements are __builtin_prefetch calls. Defined here, outside the kernels' target
// regions, so that it inlines into each of them.
inline void prefetch_line(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

// The prefetch frontier of one stream.
class StreamPrefetch {
 public:
  StreamPrefetch() = default;
  // A stream from `start`, whose first kPrefetchBytes are read without asking (the previous panel's stream
  // asked for them, or the hardware prefetcher does).
  explicit StreamPrefetch(const std::byte* start) : next_(start + kPrefetchBytes) {}
  // Asks for every line not asked for yet below end + kPrefetchBytes.
  void through(const std::byte* end) {
    const std::byte* target = end + kPrefetchBytes;
    for (; next_ < target; next_ += 64) prefetch_line(next_);
  }

 private:
  const std::byte* next_ = nullptr;
};

// Whether this build has kernel k and this CPU runs it.
bool quant_kernel_compiled_and_supported(QuantKernel k);

// Throws std::invalid_argument naming `what` and the place for a code or scale with no value: an FP8 NaN byte
// (0x7f, 0xff), an MXFP4 NaN scale (0xff), a non-finite fp16 scale of a Q8_0 / Q4_K / Q6_K block, a
// non-finite FP8 block scale.
void check_codes(const MatrixView& w, const std::string& what);

// Whether kernel k has FP8 code on this CPU (kAvx512 with AVX512_VBMI + AVX512_BF16).
bool fp8_packs_for(QuantKernel k);

// `w` repacked for kernel k, or null where k runs the portable emulation on the stored blocks (k itself
// portable, or a type k has no code for on this CPU: FP8 without AVX512_VBMI + AVX512_BF16).
std::unique_ptr<QuantLinear::Packed> pack_quant(const MatrixView& w, QuantKernel k);

// Outputs [o_begin, o_end) of `rows` quantized rows (quant_row_layout's stride apart) by the scalar emulation
// of the contract, from the stored blocks.
void quant_outputs_portable(const MatrixView& w, const std::byte* xq, int64_t rows, int64_t o_begin,
                            int64_t o_end, float* y, int64_t y_stride);

// Outputs of panels [j_begin, j_end) (16 outputs each) by kernel k on its packed weights.
void quant_panels(const QuantLinear::Packed& w, QuantKernel k, const std::byte* xq, int64_t rows,
                  int64_t j_begin, int64_t j_end, float* y, int64_t y_stride);

// The per-ISA entry points of quant_panels (linear_quant_avx512.cc, linear_quant_avxvnni.cc); each is
// called only where its cpu_has_* check says yes.
void quant_panels_avx512(const QuantPanels& w, const std::byte* xq, int64_t rows, int64_t j_begin,
                         int64_t j_end, float* y, int64_t y_stride);
void quant_panels_avxvnni(const QuantPanels& w, const std::byte* xq, int64_t rows, int64_t j_begin,
                          int64_t j_end, float* y, int64_t y_stride);
// Whether those files were compiled with their code (a compiler without the target gives stubs).
bool quant_avx512_built();
bool quant_avxvnni_built();

// The int8 rules' quantize_rows on the calling thread with AVX-512 (linear_quant_avx512.cc; call it only
// where cpu_has_avx512_skx()).
void quantize_rows_avx512(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in,
                          std::byte* out);

// quantize_rows on the calling thread, with the fastest code this CPU has (the same bytes as the portable
// one).
void quantize_rows_fast(QuantRule rule, const float* x, int64_t rows, int64_t x_stride, int64_t in,
                        std::byte* out);

}  // namespace detail
}  // namespace moe::kernels

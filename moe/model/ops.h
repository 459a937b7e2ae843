// The decoder's own row-wise ops: RMSNorm, rotary embedding and causal attention over a KV cache.
//
// Batch invariance: every op works on one row at a time with one fixed order of floating-point operations
// (written in the source; the build uses -ffp-contract=off and no fast-math), so a row's output bits depend
// only on that row's inputs (and, for attention, on its request's cached keys and values): never on the
// other rows of a batch, the batch size, or where the row sits. Each op has a float64 reference (the oracle
// of the accuracy tests).
#pragma once

#include <cstdint>

namespace moe::model {

// y[i] = x[i] * w[i] / sqrt(mean_i(x[i]^2) + eps), the sum of squares accumulated in double, i ascending.
// n > 0; y may equal x. Allocation-free.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y);
void rms_norm_reference_f64(const float* x, const float* weight, int64_t n, double eps, double* y);

// Rotary position embedding (Hugging Face Llama "rotate_half" convention) in place on one row of
// num_heads * head_dim values: for head h and i < head_dim / 2, with a = position * theta^(-2i / head_dim),
//   (x[i], x[i + head_dim/2]) <- (x[i] cos a - x[i + head_dim/2] sin a, x[i + head_dim/2] cos a + x[i] sin a)
// The angle, cos and sin are computed in double and rounded to float once, so the rotation of a row is a
// fixed function of (row, position, theta). head_dim must be even.
void apply_rope(float* row, int num_heads, int head_dim, uint32_t position, float theta);
// apply_rope in two halves, for a caller that keeps the angles of the positions it sees: rope_angles writes
// the head_dim / 2 floats cos a and sin a of `position` (as apply_rope computes them), rotate_rope applies
// them. rotate_rope(row, ..., cos, sin) after rope_angles(position, ..., cos, sin) is apply_rope's bits.
void rope_angles(uint32_t position, int head_dim, float theta, float* cos, float* sin);
void rotate_rope(float* row, int num_heads, int head_dim, const float* cos, const float* sin);
void apply_rope_reference_f64(double* row, int num_heads, int head_dim, uint32_t position, double theta);

// Causal attention of one query row over the first num_keys rows of a request's cache:
//   per head h: s_j = (q_h . k_j,h) / sqrt(head_dim) for j < num_keys (dot products in float, index
//   ascending); p_j = exp(s_j - max s) / sum_j exp(s_j - max s) (sum in float, j ascending);
//   out_h = (sum_j exp(s_j - max s) v_j,h) / sum (accumulated in float, j ascending, then one division).
// q: [num_heads * head_dim]; keys, values: [num_keys, num_heads * head_dim] row-major (row j at
// keys + j * num_heads * head_dim); out: [num_heads * head_dim]; scratch: at least num_keys floats.
// num_keys >= 1. Allocation-free.
void attention_row(const float* q, const float* keys, const float* values, int64_t num_keys, int num_heads,
                   int head_dim, float* out, float* scratch);
// The oracle: everything in double.
void attention_row_reference_f64(const double* q, const double* keys, const double* values, int64_t num_keys,
                                 int num_heads, int head_dim, double* out);

}  // namespace moe::model

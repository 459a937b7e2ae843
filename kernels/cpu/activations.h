// Elementwise activations of the expert FFNs.
//
//   silu(x)  = x * sigmoid(x) = x / (1 + exp(-x))                         (HF "silu")
//   gelu(x)  = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))            (HF "gelu_pytorch_tanh",
//              the tanh approximation; computed as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))),
//              which is the same function since 0.5 (1 + tanh(u)) = sigmoid(2u))
//   swiglu(gate, up) = silu(gate) * up
//   clamped_swiglu(gate, up) = (clamp(up, -limit, limit) + 1) * g / (1 + exp(-alpha g)), g = min(gate, limit)
//              (gpt-oss; the element rule of kernels/activation_rules.h, which the GPU shares)
//
// Determinism: every output element is one fixed sequence of IEEE fp32 operations on its own inputs
// (exp is the project's own polynomial, not libm), so its bits do not depend on n, on its index, on
// alignment or on the CPU path: the AVX-512 loop handles the tail with masked lanes of the same vector
// code, and the portable scalar path spells out the same operations (tests check the bits agree).
// Accuracy: within a few ulp of the exact function (exp is about 1 ulp), except where the fp32
// function is ill-conditioned (gelu for x << 0, whose results are below 1e-12). NaN in gives NaN out;
// silu(+inf) = gelu(+inf) = +inf; silu(-inf) = gelu(-inf) = NaN (-inf / inf, as PyTorch's -inf * 0);
// below x = -88.7 silu returns -0 (exp(-x) overflows; the exact value is under 3e-37).
// All functions are thread-safe, allocation-free, and accept out == in (or out == gate / up).
// Null pointers are allowed only when n == 0; otherwise std::invalid_argument. n < 0 also throws.
#pragma once

#include <cstdint>

namespace moe::kernels {

void silu(const float* in, float* out, int64_t n);
void gelu(const float* in, float* out, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void clamped_swiglu(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);

// Float64 references (the oracles for tests).
double silu_f64(double x);
double gelu_f64(double x);  // tanh approximation, as gelu()
double clamped_swiglu_f64(double gate, double up, double alpha, double limit);

// The portable scalar paths (what the functions above run on builds without AVX-512), exposed so that
// tests can check they give the same bits as the vector path.
float silu_portable(float x);
float gelu_portable(float x);
float clamped_swiglu_portable(float gate, float up, float alpha, float limit);
float exp_portable(float x);  // the project's fp32 exp used by every activation

}  // namespace moe::kernels

// The test side of GGUF's tensor types: a quantizer that turns float rows into valid blocks of F16, BF16,
// Q8_0, Q4_K, Q6_K and MXFP4, and a reference dequantizer that gives each element's exact value in double.
// Both are written here from the formats' definitions (ggml-common.h's block structs and the element
// formulas of ggml-quants.c's dequantize_row_*), independently of the project's own block structs and
// dequantizers in kernels/: the tests compare the two value for value.
//
//   F16    IEEE binary16.                      BF16  the high half of an f32.
//   Q8_0   32 elements: f16 d, int8 q[32]:     x = d q
//   Q4_K   256 elements: f16 d, f16 dmin, 12 bytes of 6-bit scales sc[8] and mins m[8], 128 bytes of
//          nibbles; sub-block j (32 elements) is the low nibbles (j even) or the high ones (j odd) of bytes
//          32 (j / 2) ... 32 (j / 2) + 31:     x = d sc[j] q - dmin m[j]
//          sc/m packing: j < 4: sc = s[j] & 63, m = s[j + 4] & 63; j >= 4: sc = (s[j + 4] & 15) |
//          (s[j - 4] >> 6) << 4, m = (s[j + 4] >> 4) | (s[j] >> 6) << 4.
//   Q6_K   256 elements: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), int8 sc[16], f16 d; in each
//          half h (128 elements) element l (0-31) + 32 i (i = 0-3) takes the low (i even) or high (i odd)
//          nibble of ql[64 h + l + 32 (i & 1)] and bits 2i, 2i+1 of qh[32 h + l]; q = that - 32,
//          sub-block scale sc[8 h + l / 16 + 2 i]:  x = d sc q
//   MXFP4  32 elements: e8m0 e, 16 bytes; element j (< 16) is the low nibble of byte j, element j + 16 its
//          high nibble, each an FP4 e2m1 code:  x = fp4(code) 2^(e - 127)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/gguf_writer.h"

namespace moe::testing {

// binary16 -> double (exact).
inline double f16_value(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) {
    v = std::ldexp(m, -24);
  } else if (e == 31) {
    v = m ? NAN : INFINITY;
  } else {
    v = std::ldexp(1024 + m, e - 25);
  }
  return sign ? -v : v;
}

// double -> binary16, rounded to nearest even (finite inputs within range).
inline uint16_t f16_bits(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  v = std::fabs(v);
  if (v == 0) return sign;
  int e = 0;
  std::frexp(v, &e);  // v = m 2^e, 0.5 <= m < 1
  int exp16 = e - 1 + 15;
  if (exp16 < 1) {  // subnormal: units of 2^-24
    const double units = std::nearbyint(std::ldexp(v, 24));
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  double mant = std::nearbyint(std::ldexp(v, 10 - (e - 1)));  // in [1024, 2048]
  if (mant == 2048) {
    mant = 1024;
    ++exp16;
  }
  if (exp16 >= 31) throw std::invalid_argument("f16_bits: out of range");
  return static_cast<uint16_t>(sign | (exp16 << 10) | (static_cast<int>(mant) - 1024));
}

inline double fp4_value(int code) {
  static const double v[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8 ? -1 : 1) * v[code & 7];
}

// Elements per block and bytes per block of the types the tests write.
inline int64_t block_elements(uint32_t type) {
  switch (type) {
    case ggml_type::Q8_0:
    case ggml_type::MXFP4:
      return 32;
    case ggml_type::Q4_K:
    case ggml_type::Q6_K:
      return 256;
    default:
      return 1;
  }
}
inline int64_t block_bytes(uint32_t type) {
  switch (type) {
    case ggml_type::F32:
      return 4;
    case ggml_type::F16:
    case ggml_type::BF16:
      return 2;
    case ggml_type::Q8_0:
      return 34;
    case ggml_type::Q4_K:
      return 144;
    case ggml_type::Q6_K:
      return 210;
    case ggml_type::MXFP4:
      return 17;
  }
  throw std::invalid_argument("block_bytes: type " + std::to_string(type));
}

// The exact values of one row of `n` elements of `type` at `p`, appended to `out`.
inline void dequantize_reference(const uint8_t* p, int64_t n, uint32_t type, std::vector<double>& out) {
  auto u16 = [](const uint8_t* b) { return static_cast<uint16_t>(b[0] | (b[1] << 8)); };
  switch (type) {
    case ggml_type::F32:
      for (int64_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out.push_back(f);
      }
      return;
    case ggml_type::F16:
      for (int64_t i = 0; i < n; ++i) out.push_back(f16_value(u16(p + 2 * i)));
      return;
    case ggml_type::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(u16(p + 2 * i)) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        out.push_back(f);
      }
      return;
    case ggml_type::Q8_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 34) {
        const double d = f16_value(u16(p));
        for (int j = 0; j < 32; ++j) out.push_back(d * static_cast<int8_t>(p[2 + j]));
      }
      return;
    case ggml_type::Q4_K:
      for (int64_t b = 0; b < n / 256; ++b, p += 144) {
        const double d = f16_value(u16(p)), dmin = f16_value(u16(p + 2));
        const uint8_t* s = p + 4;
        const uint8_t* q = p + 16;
        for (int j = 0; j < 8; ++j) {
          int sc, m;
          if (j < 4) {
            sc = s[j] & 63;
            m = s[j + 4] & 63;
          } else {
            sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
            m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
          }
          for (int l = 0; l < 32; ++l) {
            const int code = j % 2 == 0 ? q[32 * (j / 2) + l] & 15 : q[32 * (j / 2) + l] >> 4;
            out.push_back(d * sc * code - dmin * m);
          }
        }
      }
      return;
    case ggml_type::Q6_K:
      for (int64_t b = 0; b < n / 256; ++b, p += 210) {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const double d = f16_value(u16(p + 208));
        double v[256];
        for (int h = 0; h < 2; ++h) {
          for (int l = 0; l < 32; ++l) {
            for (int i = 0; i < 4; ++i) {
              const uint8_t low = ql[64 * h + l + 32 * (i & 1)];
              const int nibble = i < 2 ? low & 15 : low >> 4;
              const int q = (nibble | (((qh[32 * h + l] >> (2 * i)) & 3) << 4)) - 32;
              v[128 * h + l + 32 * i] = d * sc[8 * h + l / 16 + 2 * i] * q;
            }
          }
        }
        out.insert(out.end(), v, v + 256);
      }
      return;
    case ggml_type::MXFP4:
      for (int64_t b = 0; b < n / 32; ++b, p += 17) {
        const double scale = std::ldexp(1.0, p[0] - 127);
        double v[32];
        for (int j = 0; j < 16; ++j) {
          v[j] = fp4_value(p[1 + j] & 15) * scale;
          v[j + 16] = fp4_value(p[1 + j] >> 4) * scale;
        }
        out.insert(out.end(), v, v + 32);
      }
      return;
  }
  throw std::invalid_argument("dequantize_reference: type " + std::to_string(type));
}

// One row of `n` floats as blocks of `type` (a simple round-to-nearest quantizer: valid blocks, not ggml's
// error-minimising search), appended to `out`.
inline void quantize_row(const float* x, int64_t n, uint32_t type, std::string& out) {
  auto put16 = [&](uint16_t v) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
  };
  auto amax_of = [](const float* v, int count) {
    double a = 0;
    for (int i = 0; i < count; ++i) a = std::max(a, std::fabs(static_cast<double>(v[i])));
    return a;
  };
  switch (type) {
    case ggml_type::F32:
      out.append(reinterpret_cast<const char*>(x), static_cast<size_t>(4 * n));
      return;
    case ggml_type::F16:
      for (int64_t i = 0; i < n; ++i) put16(f16_bits(x[i]));
      return;
    case ggml_type::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &x[i], 4);
        bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
        put16(static_cast<uint16_t>(bits >> 16));
      }
      return;
    case ggml_type::Q8_0:
      for (int64_t b = 0; b < n / 32; ++b) {
        const float* v = x + 32 * b;
        const uint16_t dh = f16_bits(amax_of(v, 32) / 127);
        const double d = f16_value(dh);
        put16(dh);
        for (int j = 0; j < 32; ++j) {
          const double q = d > 0 ? std::nearbyint(v[j] / d) : 0;
          out.push_back(static_cast<char>(static_cast<int8_t>(std::clamp(q, -127.0, 127.0))));
        }
      }
      return;
    case ggml_type::Q4_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const float* v = x + 256 * b;
        double scale[8], min[8], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; ++j) {
          double lo = 0, hi = 0;  // the minimum is at most 0, as ggml's is
          for (int l = 0; l < 32; ++l) {
            lo = std::min(lo, static_cast<double>(v[32 * j + l]));
            hi = std::max(hi, static_cast<double>(v[32 * j + l]));
          }
          scale[j] = (hi - lo) / 15;
          min[j] = -lo;
          max_scale = std::max(max_scale, scale[j]);
          max_min = std::max(max_min, min[j]);
        }
        const uint16_t dh = f16_bits(max_scale / 63), mh = f16_bits(max_min / 63);
        const double d = f16_value(dh), dmin = f16_value(mh);
        int sc[8], m[8];
        for (int j = 0; j < 8; ++j) {
          sc[j] = d > 0 ? static_cast<int>(std::clamp(std::nearbyint(scale[j] / d), 0.0, 63.0)) : 0;
          m[j] = dmin > 0 ? static_cast<int>(std::clamp(std::nearbyint(min[j] / dmin), 0.0, 63.0)) : 0;
        }
        put16(dh);
        put16(mh);
        uint8_t s[12] = {};
        for (int j = 0; j < 4; ++j) {
          s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
          s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
          s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
        }
        out.append(reinterpret_cast<const char*>(s), 12);
        uint8_t q[128] = {};
        for (int j = 0; j < 8; ++j) {
          const double step = d * sc[j], offset = dmin * m[j];
          for (int l = 0; l < 32; ++l) {
            const int code =
                step > 0
                    ? static_cast<int>(std::clamp(std::nearbyint((v[32 * j + l] + offset) / step), 0.0, 15.0))
                    : 0;
            q[32 * (j / 2) + l] |= static_cast<uint8_t>(j % 2 == 0 ? code : code << 4);
          }
        }
        out.append(reinterpret_cast<const char*>(q), 128);
      }
      return;
    case ggml_type::Q6_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const float* v = x + 256 * b;
        double scale[16], max_scale = 0;
        for (int j = 0; j < 16; ++j) {
          scale[j] = amax_of(v + 16 * j, 16) / 31;
          max_scale = std::max(max_scale, scale[j]);
        }
        const uint16_t dh = f16_bits(max_scale / 127);
        const double d = f16_value(dh);
        int8_t sc[16];
        for (int j = 0; j < 16; ++j) {
          sc[j] = static_cast<int8_t>(d > 0 ? std::clamp(std::nearbyint(scale[j] / d), -128.0, 127.0) : 0);
        }
        uint8_t ql[128] = {}, qh[64] = {};
        for (int h = 0; h < 2; ++h) {
          for (int l = 0; l < 32; ++l) {
            for (int i = 0; i < 4; ++i) {
              const int at = 128 * h + l + 32 * i;
              const int s = 8 * h + l / 16 + 2 * i;  // the sub-block of element `at` is at / 16
              const double step = d * sc[s];
              const int q =
                  step != 0 ? static_cast<int>(std::clamp(std::nearbyint(v[at] / step), -32.0, 31.0)) : 0;
              const int u = q + 32;
              uint8_t& low = ql[64 * h + l + 32 * (i & 1)];
              low |= static_cast<uint8_t>(i < 2 ? (u & 15) : (u & 15) << 4);
              qh[32 * h + l] |= static_cast<uint8_t>(((u >> 4) & 3) << (2 * i));
            }
          }
        }
        out.append(reinterpret_cast<const char*>(ql), 128);
        out.append(reinterpret_cast<const char*>(qh), 64);
        out.append(reinterpret_cast<const char*>(sc), 16);
        put16(dh);
      }
      return;
    case ggml_type::MXFP4:
      for (int64_t b = 0; b < n / 32; ++b) {
        const float* v = x + 32 * b;
        const double amax = amax_of(v, 32);
        int e = amax > 0 ? static_cast<int>(std::ceil(std::log2(amax / 6))) + 127 : 0;
        e = std::clamp(e, 1, 254);
        const double scale = std::ldexp(1.0, e - 127);
        out.push_back(static_cast<char>(e));
        auto code_of = [&](double x_) {
          int best = 0;
          for (int c = 1; c < 16; ++c) {
            if (std::fabs(fp4_value(c) * scale - x_) < std::fabs(fp4_value(best) * scale - x_)) best = c;
          }
          return best;
        };
        for (int j = 0; j < 16; ++j) {
          out.push_back(static_cast<char>(code_of(v[j]) | (code_of(v[j + 16]) << 4)));
        }
      }
      return;
  }
  throw std::invalid_argument("quantize_row: type " + std::to_string(type));
}

}  // namespace moe::testing

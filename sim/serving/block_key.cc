#include "sim/serving/block_key.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace moe::sim::serving {
namespace {

// FIPS 180-4 section 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64
// primes.
constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// Section 5.3.3: the initial hash value.
constexpr std::array<uint32_t, 8> kInitial = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                              0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

constexpr uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

// The encoding's domain and version: 15 characters and a 0 byte.
constexpr char kDomain[16] = "moe-block-key/1";

void put_le(uint8_t* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

Sha256::Sha256() : state_(kInitial) {}

void Sha256::compress(const uint8_t* block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) {
    w[t] = uint32_t{block[4 * t]} << 24 | uint32_t{block[4 * t + 1]} << 16 | uint32_t{block[4 * t + 2]} << 8 |
           uint32_t{block[4 * t + 3]};
  }
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 =
        h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(std::span<const uint8_t> bytes) {
  length_ += bytes.size();
  size_t at = 0;
  if (buffered_ > 0) {
    const size_t take = std::min(bytes.size(), buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes.data(), take);
    buffered_ += take;
    at = take;
    if (buffered_ < buffer_.size()) return;
    compress(buffer_.data());
    buffered_ = 0;
  }
  for (; at + 64 <= bytes.size(); at += 64) compress(bytes.data() + at);
  std::memcpy(buffer_.data(), bytes.data() + at, bytes.size() - at);
  buffered_ = bytes.size() - at;
}

Sha256Digest Sha256::finish() {
  // Section 5.1.1: a 1 bit, zeros to 56 bytes mod 64, the message length in bits (big-endian, 64 bits).
  const uint64_t bits = length_ * 8;
  uint8_t pad[72] = {0x80};
  const size_t zeros = (buffered_ < 56 ? 56 : 120) - buffered_;
  for (int i = 0; i < 8; ++i) pad[zeros + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(std::span<const uint8_t>(pad, zeros + 8));
  Sha256Digest out;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(state_[i] >> (24 - 8 * j));
  }
  *this = Sha256();
  return out;
}

Sha256Digest sha256(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish();
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : digest) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

size_t BlockKeyHash::operator()(const BlockKey& key) const noexcept {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{key.bytes[i]} << (8 * i);
  return static_cast<size_t>(v);
}

BlockKey block_key(const BlockKey& parent, uint32_t begin, uint64_t salt, std::span<const uint64_t> tokens) {
  if (tokens.empty()) throw std::invalid_argument("block_key: a block holds at least one token");
  const uint64_t end = uint64_t{begin} + tokens.size();
  if (end > UINT32_MAX) {
    throw std::invalid_argument("block_key: the block [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") ends past position 2^32 - 1");
  }
  uint8_t header[64];
  std::memcpy(header, kDomain, 16);
  std::memcpy(header + 16, parent.bytes.data(), 32);
  put_le(header + 48, begin, 4);
  put_le(header + 52, end, 4);
  put_le(header + 56, salt, 8);
  Sha256 h;
  h.update(header);
  uint8_t words[64];  // eight tokens at a time
  size_t n = 0;
  for (uint64_t t : tokens) {
    put_le(words + n, t, 8);
    n += 8;
    if (n == sizeof(words)) {
      h.update(words);
      n = 0;
    }
  }
  h.update(std::span<const uint8_t>(words, n));
  return BlockKey{h.finish()};
}

}  // namespace moe::sim::serving

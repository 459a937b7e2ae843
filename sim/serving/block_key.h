// The prefix cache's block key (sim/serving/engine.h, block_pool.h): a SHA-256 digest of the block's parent
// key, its position range, the client's salt and its tokens, in one fixed encoding.
//
// Why SHA-256. A prefix cache serves a block's KV and routing to whoever presents the same key, so two
// different prefixes that share a key give one request another's computation - silently. The key therefore
// has to resist two things: accidental collisions (a 64-bit chain hash, as the engine had, collides with
// probability ~n^2 / 2^65 over n blocks, and one collision is a wrong answer), and forgery: a client that
// controls its tokens (and, in a multi-tenant engine, chooses prompts after seeing others') must not be able
// to compute a prefix whose key equals a victim's. A non-cryptographic mix (splitmix64, or even a 128-bit
// one such as MurmurHash3) is invertible or has known differential attacks, so a forger can solve for a
// colliding block; SipHash with a fixed, public key is a PRF only while its key is secret. SHA-256 (FIPS
// 180-4) is collision- and second-preimage-resistant with no secret, deterministic on every machine, and what
// vLLM uses for the same purpose (sha256 of (parent hash, block tokens, extra keys)). The full 256-bit digest
// is kept: 2^128 work for a collision.
//
// The encoding hashed for a block of positions [begin, end) (fixed width, little-endian):
//   "moe-block-key/1" and a 0 byte  (16 bytes: the domain and version of this encoding)
//   parent key                      (32 bytes; all zero for the block that begins at position 0)
//   begin, end                      (uint32 each)
//   salt                            (uint64: the client's key extension, e.g. prefix_cache_salt)
//   tokens                          (end - begin uint64 values, position order)
// The header is 64 bytes of fixed width and the token count is end - begin, so two different (parent, begin,
// end, salt, tokens) give two different messages: a shared key means a SHA-256 collision. The key chains:
// a block's key covers every earlier block through its parent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace moe::sim::serving {

using Sha256Digest = std::array<uint8_t, 32>;

// SHA-256 (FIPS 180-4), streaming. Fixed integer arithmetic: the same digest on every machine.
class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> bytes);
  // The digest of everything updated so far; the object is reset afterwards.
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes
};

Sha256Digest sha256(std::span<const uint8_t> bytes);
// Lower-case hexadecimal, 64 characters.
std::string to_hex(const Sha256Digest& digest);

// A block's key. Value-initialised (all zero): the parent of the block that begins at position 0.
struct BlockKey {
  Sha256Digest bytes{};
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  std::string hex() const { return to_hex(bytes); }
};

// For unordered containers: the digest's first 8 bytes (uniform for honest keys; a forger who grinds them
// only slows one bucket, it cannot make two keys equal).
struct BlockKeyHash {
  size_t operator()(const BlockKey& key) const noexcept;
};

// The key of the block of positions [begin, begin + tokens.size()) whose parent (the block before it) has key
// `parent` (BlockKey{} when begin is 0), under the client's `salt`: SHA-256 of the encoding above. Throws
// std::invalid_argument for an empty block or one whose end passes 2^32.
BlockKey block_key(const BlockKey& parent, uint32_t begin, uint64_t salt, std::span<const uint64_t> tokens);

}  // namespace moe::sim::serving

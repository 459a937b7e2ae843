// The prefix cache's block key (sim/serving/block_key.h) and the restore check of the payloads kept beside
// the blocks (sim/serving/block_store.h): SHA-256 against the FIPS 180-4 / NIST test vectors, the block key
// against its documented encoding (digests computed independently with Python's hashlib), every input of the
// key changing it, the encoding injective on length-extended inputs, and a payload kept for another key or
// other positions refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/serving/block_key.h"
#include "sim/serving/block_store.h"
#include "sim/serving/engine.h"
#include "sim/serving/lifecycle.h"

namespace moe::sim::serving {
namespace {

std::string Sha256Hex(const std::string& text) {
  return to_hex(sha256(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
}

// FIPS 180-4's examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf") and the one-million-'a' vector.
TEST(Sha256, FipsTestVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      Sha256Hex(
          "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnop"
          "qrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Padding boundaries: 55, 56, 63 and 64 bytes (one block, or the length in a second one; digests from
  // Python's hashlib).
  EXPECT_EQ(Sha256Hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(Sha256Hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(Sha256Hex(std::string(63, 'a')),
            "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
  EXPECT_EQ(Sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, StreamingEqualsOneShotAtEverySplit) {
  const std::string text =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnop"
      "qrsmnopqrstnopqrstu";
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t a = 0; a <= text.size(); a += 7) {
    for (size_t b = a; b <= text.size(); b += 13) {
      Sha256 h;
      h.update({bytes, a});
      h.update({bytes + a, b - a});
      h.update({bytes + b, text.size() - b});
      EXPECT_EQ(to_hex(h.finish()), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
          << a << " " << b;
    }
  }
}

std::vector<uint64_t> Tokens(uint64_t first, size_t n) {
  std::vector<uint64_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

// The documented encoding, hashed by Python's hashlib:
//   sha256(b"moe-block-key/1\0" + parent + struct.pack('<IIQ', begin, end, salt) + tokens as '<Q')
TEST(BlockKey, MatchesItsDocumentedEncoding) {
  const BlockKey k0 = block_key(BlockKey{}, 0, 0, Tokens(1, 16));
  EXPECT_EQ(k0.hex(), "b95567fab9c03e96e696695a2d8f4fa611e2a878c160ab45fc5a6aca78f9bd4d");
  EXPECT_EQ(block_key(k0, 16, 40, Tokens(1000, 16)).hex(),
            "b75209821607806dcfd83094d3e16dbe82c5b6e1b88552fa2efcba40dbe6c703");
  EXPECT_EQ(block_key(BlockKey{}, 0, 0, std::vector<uint64_t>{UINT64_MAX}).hex(),
            "c85df6e5705f89c852da5095bb1194697a5287cb56ea1b5dca347b3f9ffdff15");
}

// Every input the key covers changes it: each byte of the parent, the position, the salt (each bit), every
// token (each token +1 and its top bit).
TEST(BlockKey, CoversParentPositionSaltAndEveryToken) {
  const BlockKey parent = block_key(BlockKey{}, 0, 7, Tokens(50, 16));
  const std::vector<uint64_t> tokens = Tokens(900, 16);
  const BlockKey base = block_key(parent, 16, 7, tokens);
  std::set<std::string> seen = {base.hex()};
  auto differs = [&](const BlockKey& k, const std::string& what) {
    EXPECT_TRUE(seen.insert(k.hex()).second) << what << " did not change the key (or repeated another)";
  };
  for (size_t i = 0; i < parent.bytes.size(); ++i) {
    BlockKey p = parent;
    p.bytes[i] ^= 1;
    differs(block_key(p, 16, 7, tokens), "parent byte " + std::to_string(i));
  }
  differs(block_key(BlockKey{}, 16, 7, tokens), "the root parent");
  for (uint32_t begin : {0u, 15u, 17u, 32u, 1u << 31}) differs(block_key(parent, begin, 7, tokens), "begin");
  for (int bit = 0; bit < 64; ++bit) {
    differs(block_key(parent, 16, 7 ^ (uint64_t{1} << bit), tokens), "salt bit " + std::to_string(bit));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (uint64_t flip : {uint64_t{1}, uint64_t{1} << 63}) {
      std::vector<uint64_t> t = tokens;
      t[i] ^= flip;
      differs(block_key(parent, 16, 7, t), "token " + std::to_string(i));
    }
  }
  // Two tokens swapped.
  std::vector<uint64_t> swapped = tokens;
  std::swap(swapped[3], swapped[4]);
  differs(block_key(parent, 16, 7, swapped), "two tokens swapped");
}

// Fixed-width fields and the token count from [begin, end): a block and its length extensions, a token moved
// into the salt, and bytes moved between tokens never share an encoding.
TEST(BlockKey, EncodingIsInjectiveOnExtensionsAndShifts) {
  std::set<std::string> seen;
  std::vector<uint64_t> t;
  for (int n = 1; n <= 40; ++n) {
    t.push_back(0);  // extending by a zero token: the same bytes but for the length
    EXPECT_TRUE(seen.insert(block_key(BlockKey{}, 0, 0, t).hex()).second) << n << " zero tokens";
  }
  // A token's bytes moved into the salt, or split across two tokens.
  EXPECT_NE(block_key(BlockKey{}, 0, 5, std::vector<uint64_t>{6}),
            block_key(BlockKey{}, 0, 6, std::vector<uint64_t>{5}));
  EXPECT_NE(block_key(BlockKey{}, 0, 0, std::vector<uint64_t>{0x0102030405060708ull}),
            block_key(BlockKey{}, 0, 0, std::vector<uint64_t>{0x01020304ull, 0x05060708ull}));
  // The same tokens at another position.
  EXPECT_NE(block_key(BlockKey{}, 0, 0, Tokens(1, 4)), block_key(BlockKey{}, 4, 0, Tokens(1, 4)));
}

TEST(BlockKey, BadBlocksAreNamedErrors) {
  EXPECT_THROW(block_key(BlockKey{}, 0, 0, std::vector<uint64_t>{}), std::invalid_argument);
  EXPECT_THROW(block_key(BlockKey{}, UINT32_MAX, 0, Tokens(0, 2)), std::invalid_argument);
  EXPECT_NO_THROW(block_key(BlockKey{}, UINT32_MAX - 1, 0, Tokens(0, 1)));
  // Keys hash for unordered containers by their first bytes.
  BlockKey a, b;
  b.bytes[31] = 1;
  EXPECT_EQ(BlockKeyHash{}(a), BlockKeyHash{}(b));
  b.bytes[0] = 1;
  EXPECT_NE(BlockKeyHash{}(a), BlockKeyHash{}(b));
}

// The engine keys a block by its whole prefix: a request that shares block 1's tokens but not block 0's
// shares no block; one with the same prompt is served both, and its admission carries the keys it matched,
// which are the keys the writer registered.
TEST(BlockKey, EngineChainsKeysAndAdmissionsCarryThem) {
  struct Client : EngineClient {
    uint64_t token(const EngineRequest& r, uint32_t p) override { return p < 16 && r.id == 2 ? 500 + p : p; }
    int propose(const EngineRequest&, uint32_t, int) override { return 0; }
    uint64_t salt(const EngineRequest&, uint32_t) override { return 0; }
  } client;
  EngineConfig c;
  c.token_budget = 64;
  c.chunk_size = 64;
  c.prefix_cache = true;
  c.kv_blocks = 64;
  Engine engine(c, {{1, 0, 40, 1}, {2, 5, 40, 1}, {3, 10, 40, 1}}, client);
  Step step;
  StepHandler all;
  std::vector<Registered> registered;
  std::vector<Admission> admitted;
  while (run_step(engine, step, all)) {
    registered.insert(registered.end(), step.registered.begin(), step.registered.end());
    admitted.insert(admitted.end(), step.admitted.begin(), step.admitted.end());
  }
  ASSERT_EQ(admitted.size(), 3u);
  EXPECT_EQ(admitted[1].cached,
            0u);  // request 2: block 0 differs, so block 1 (the same tokens) is not shared
  EXPECT_TRUE(admitted[1].keys.empty());
  ASSERT_EQ(admitted[2].cached, 32u);  // request 3: request 1's prompt
  ASSERT_EQ(registered.size(), 4u);    // two full blocks each of requests 1 and 2
  std::set<std::string> keys;
  for (const Registered& r : registered) EXPECT_TRUE(keys.insert(r.key.hex()).second);
  EXPECT_EQ(registered[0].id, 1u);
  EXPECT_EQ(admitted[2].keys, (std::vector<BlockKey>{registered[0].key, registered[1].key}));
}

// The restore check: an admission takes the payloads of its blocks only when each was kept for exactly its
// positions under the key the engine matched.
TEST(BlockStore, TakesExactlyTheCachedPositionsUnderTheMatchedKeys) {
  const BlockKey k0 = block_key(BlockKey{}, 0, 0, Tokens(1, 16));
  const BlockKey k1 = block_key(k0, 16, 0, Tokens(17, 16));
  BlockStore<std::string> store(8);
  store.keep(Registered{5, 1, 0, 16, k0}, "block 0 of request 1");
  store.keep(Registered{2, 1, 16, 32, k1}, "block 1 of request 1");
  Admission a;
  a.id = 9;
  a.cached = 32;
  a.blocks = {5, 2};
  a.keys = {k0, k1};
  std::vector<const std::string*> out;
  store.take(a, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(*out[1], "block 1 of request 1");

  auto refused = [&](const Admission& bad, const std::string& expected) {
    try {
      store.take(bad, out);
      ADD_FAILURE() << "served: " << expected;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("request 9"), std::string::npos) << e.what();
    }
  };
  // A forged (or colliding, or stale) block: the payload was kept under another prefix's key.
  Admission forged = a;
  forged.keys[1] = block_key(k0, 16, 0, Tokens(99, 16));
  refused(forged, "not the matched key");
  // The blocks in another order: the payloads are of other positions.
  Admission swapped = a;
  swapped.blocks = {2, 5};
  swapped.keys = {k1, k0};
  refused(swapped, "holds the payload of positions [16, 32)");
  // A block the cache never kept a payload for, one outside the pool, and lengths that do not agree.
  Admission unkept = a;
  unkept.blocks[1] = 3;
  refused(unkept, "has no payload");
  Admission outside = a;
  outside.blocks[1] = 8;
  EXPECT_THROW(store.take(outside, out), std::invalid_argument);
  Admission longer = a;
  longer.cached = 33;
  refused(longer, "do not split into 2 equal blocks");
  Admission fewer_keys = a;
  fewer_keys.keys.pop_back();
  refused(fewer_keys, "2 cached blocks with 1 keys");
  Admission no_blocks;
  no_blocks.id = 9;
  no_blocks.cached = 16;
  refused(no_blocks, "no cached block");
}

}  // namespace
}  // namespace moe::sim::serving

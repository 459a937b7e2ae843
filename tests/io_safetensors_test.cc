// SafetensorsFile and write_safetensors: round trips, layout, and every corrupt input we can think of.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/io/memory.h"
#include "moe/io/safetensors.h"
#include "tests/io_test_util.h"

namespace moe::io {
namespace {

using kernels::DType;
using testing::raw_safetensors;
using testing::TempDir;
using testing::thrown_message;
using testing::write_bytes;

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

TEST(Safetensors, WriteThenReadRoundTrip) {
  TempDir dir;
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 7.0f, -0.0f};
  const std::vector<uint16_t> b = {0x3f80, 0xc000, 0x7fc0};
  const std::vector<uint16_t> c = {0x3c00, 0x0001};
  const std::vector<int64_t> ids = {1, 2, 3};
  const std::vector<TensorToWrite> tensors = {
      {"a.weight", "F32", {2, 3}, bytes_of(a)},
      {"b", "BF16", {3}, bytes_of(b)},
      {"c", "F16", {1, 2}, bytes_of(c)},
      {"ids", "I64", {3}, bytes_of(ids)},
  };
  write_safetensors(dir / "x.safetensors", tensors, {{"format", "pt"}});

  SafetensorsFile f(dir / "x.safetensors");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.weight", "b", "c", "ids"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const TensorInfo& ta = f.get("a.weight");
  EXPECT_EQ(ta.dtype, DType::kF32);
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(ta.nbytes, a.size() * 4);
  EXPECT_EQ(std::memcmp(ta.data, a.data(), ta.nbytes), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ta.data) % 4, 0u) << "writer must align f32 data";
  const TensorInfo& tb = f.get("b");
  EXPECT_EQ(tb.dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(tb.data, b.data(), tb.nbytes), 0);
  EXPECT_EQ(f.get("c").dtype, DType::kF16);
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_TRUE(f.contains("ids"));
  EXPECT_EQ(f.file_dtype("ids"), "I64");
  // Listing works for an unsupported dtype; requesting it is the error.
  const std::string msg = thrown_message<std::invalid_argument>([&] { f.find("ids"); });
  EXPECT_NE(msg.find("unsupported dtype I64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'ids'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("x.safetensors"), std::string::npos) << msg;
}

TEST(Safetensors, HeaderIsPaddedToEightBytesAndDataContiguous) {
  TempDir dir;
  const std::vector<uint16_t> h = {1, 2, 3};
  const std::vector<float> f = {1, 2};
  const std::vector<TensorToWrite> tensors = {{"h", "BF16", {3}, bytes_of(h)},
                                              {"f", "F32", {2}, bytes_of(f)}};
  write_safetensors(dir / "p.safetensors", tensors);
  const std::string raw = testing::read_bytes(dir / "p.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 3 * 2 + 2 * 4) << "no holes in the data area";
  EXPECT_FALSE(std::filesystem::exists(dir / "p.safetensors.tmp"));
}

TEST(Safetensors, MoveKeepsMappingAlive) {
  TempDir dir;
  const std::vector<float> a = {4, 5, 6};
  const std::vector<TensorToWrite> tensors = {{"a", "F32", {3}, bytes_of(a)}};
  write_safetensors(dir / "m.safetensors", tensors);
  SafetensorsFile f(dir / "m.safetensors");
  const TensorInfo* before = f.find("a");
  SafetensorsFile g(std::move(f));
  EXPECT_EQ(g.find("a"), before) << "entries move with the object";
  EXPECT_EQ(std::memcmp(g.get("a").data, a.data(), 12), 0);
  SafetensorsFile h(dir / "m.safetensors");
  h = std::move(g);
  EXPECT_EQ(std::memcmp(h.get("a").data, a.data(), 12), 0);
}

// This process's resident file-backed pages (RssFile of /proc/self/status), in kB; -1 where unknown.
long rss_file_kb() {
  std::ifstream f("/proc/self/status");
  std::string key;
  long kb = -1;
  while (f >> key) {
    if (key == "RssFile:") {
      f >> kb;
      return kb;
    }
    f.ignore(1 << 20, '\n');
  }
  return kb;
}

// io::release_pages on a mapped tensor: its pages leave the RSS (the layer's quantized sources, once copied
// into panels) and its bytes read the same afterwards.
TEST(Safetensors, ReleasedPagesLeaveTheRssAndKeepTheirBytes) {
  TempDir dir;
  std::vector<uint32_t> a(8u << 20);  // 32 MiB
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint32_t>(i * 2654435761u);
  const std::vector<TensorToWrite> tensors = {{"a", "I32", {static_cast<int64_t>(a.size())}, bytes_of(a)}};
  write_safetensors(dir / "r.safetensors", tensors);
  SafetensorsFile f(dir / "r.safetensors");
  const RawTensor t = *f.raw("a");
  ASSERT_EQ(t.nbytes, a.size() * 4);
  if (rss_file_kb() < 0) GTEST_SKIP() << "no RssFile in /proc/self/status";
  const long before = rss_file_kb();
  EXPECT_EQ(std::memcmp(t.data, a.data(), t.nbytes), 0);  // every page resident now
  const long read = rss_file_kb();
  ASSERT_GT(read - before, 24 * 1024) << "reading 32 MiB of the mapping made them resident";
  release_pages(t.data, t.nbytes);
  const long released = rss_file_kb();
  EXPECT_LT(released - before, 4 * 1024) << "RssFile (kB): " << before << " before, " << read
                                         << " after reading, " << released << " after release_pages";
  EXPECT_EQ(std::memcmp(t.data, a.data(), t.nbytes), 0) << "the released pages read back the same";
  release_pages(nullptr, 0);  // no-ops
  release_pages(t.data, 1);
}

TEST(Safetensors, EmptyTensorsAndUnsortedOverlappingOffsetsAreFine) {
  TempDir dir;
  // Two tensors sharing bytes, listed out of order, plus a zero-element tensor.
  const std::string header = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("z":{"dtype":"F32","shape":[0,5],"data_offsets":[8,8]}})";
  std::string data(8, '\0');
  const float vals[2] = {1.5f, 2.5f};
  std::memcpy(data.data(), vals, 8);
  write_bytes(dir / "o.safetensors", raw_safetensors(header, data));
  SafetensorsFile f(dir / "o.safetensors");
  float b = 0;
  std::memcpy(&b, f.get("b").data, 4);
  EXPECT_EQ(b, 2.5f);
  EXPECT_EQ(f.get("z").nbytes, 0u);
}

struct CorruptCase {
  const char* label;
  std::string file;  // whole file contents
  const char* expected;
};

class SafetensorsCorrupt : public ::testing::TestWithParam<CorruptCase> {};

TEST_P(SafetensorsCorrupt, ThrowsInvalidArgumentWithMessage) {
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  write_bytes(path, GetParam().file);
  const std::string msg = thrown_message<std::invalid_argument>([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find(GetParam().expected), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << "message names the file: " << msg;
}

const std::string kGoodHeader = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";

INSTANTIATE_TEST_SUITE_P(
    All, SafetensorsCorrupt,
    ::testing::Values(
        CorruptCase{"empty", "", "truncated file: 0 bytes"},
        CorruptCase{"short", std::string(5, 'x'), "truncated file: 5 bytes"},
        CorruptCase{"header_len_larger_than_file", raw_safetensors(kGoodHeader, std::string(16, '\0'), 1000),
                    "header length 1000 larger than the file"},
        CorruptCase{"header_len_huge", raw_safetensors(kGoodHeader, "", ~uint64_t{0}),
                    "larger than the file"},
        CorruptCase{"invalid_json", raw_safetensors(R"({"w":{"dtype":"F32",)", ""), "invalid JSON header"},
        CorruptCase{"not_object", raw_safetensors("[1,2]", ""), "JSON header is not an object"},
        // A number too large for a double is nlohmann's out_of_range, not a parse_error (found by the
        // safetensors fuzzer: it escaped as an uncaught exception).
        CorruptCase{"json_number_overflow", raw_safetensors(R"({"w":1e400})", ""),
                    "invalid JSON header: [json.exception.out_of_range.406] number overflow"},
        CorruptCase{"truncated_data", raw_safetensors(kGoodHeader, std::string(10, '\0')),
                    "data_offsets [0, 16] out of range of the data area (10 bytes)"},
        CorruptCase{"offsets_out_of_range",
                    raw_safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[100,104]}})",
                                    std::string(16, '\0')),
                    "data_offsets [100, 104] out of range"},
        CorruptCase{"offsets_reversed",
                    raw_safetensors(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})",
                                    std::string(16, '\0')),
                    "out of range"},
        CorruptCase{"offsets_negative",
                    raw_safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
                                    std::string(16, '\0')),
                    "are not non-negative integers"},
        CorruptCase{
            "offsets_wrong_arity",
            raw_safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(4, '\0')),
            "data_offsets must be an array [begin, end]"},
        CorruptCase{"nbytes_vs_shape",
                    raw_safetensors(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})",
                                    std::string(16, '\0')),
                    "tensor 'w': 16 bytes but shape [2, 3] of F32 needs 24"},
        CorruptCase{"nbytes_vs_shape_unsupported_dtype",
                    raw_safetensors(R"({"w":{"dtype":"I64","shape":[3],"data_offsets":[0,16]}})",
                                    std::string(16, '\0')),
                    "16 bytes but shape [3] of I64 needs 24"},
        CorruptCase{
            "shape_overflow",
            raw_safetensors(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})",
                            std::string(16, '\0')),
            "overflows"},
        CorruptCase{
            "shape_mul_overflow_with_dtype",
            raw_safetensors(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]}})",
                            std::string(16, '\0')),
            "more than 2^64"},
        CorruptCase{"shape_negative",
                    raw_safetensors(R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})",
                                    std::string(16, '\0')),
                    "not a non-negative integer"},
        CorruptCase{"shape_float",
                    raw_safetensors(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,16]}})",
                                    std::string(16, '\0')),
                    "not a non-negative integer"},
        CorruptCase{"missing_dtype",
                    raw_safetensors(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, 'x')),
                    "missing or non-string dtype"},
        CorruptCase{"entry_not_object", raw_safetensors(R"({"w":3})", ""), "header entry is not an object"},
        CorruptCase{"metadata_not_strings", raw_safetensors(R"({"__metadata__":{"a":1}})", ""),
                    "__metadata__ entry 'a' is not a string"}),
    [](const ::testing::TestParamInfo<CorruptCase>& info) { return std::string(info.param.label); });

TEST(Safetensors, UnsupportedF8IsListedButNotLoadable) {
  TempDir dir;
  write_bytes(dir / "f8.safetensors",
              raw_safetensors(R"({"q":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", "abcd"));
  SafetensorsFile f(dir / "f8.safetensors");
  EXPECT_EQ(f.names(), std::vector<std::string>{"q"});
  const std::string msg = thrown_message<std::invalid_argument>([&] { f.get("q"); });
  EXPECT_NE(msg.find("unsupported dtype F8_E4M3"), std::string::npos) << msg;
}

TEST(Safetensors, UnknownDtypeIsListedButNotLoadable) {
  TempDir dir;
  write_bytes(dir / "u.safetensors",
              raw_safetensors(R"({"q":{"dtype":"Q4_K","shape":[7],"data_offsets":[0,4]}})", "abcd"));
  SafetensorsFile f(dir / "u.safetensors");
  const std::string msg = thrown_message<std::invalid_argument>([&] { f.get("q"); });
  EXPECT_NE(msg.find("unsupported dtype Q4_K"), std::string::npos) << msg;
}

TEST(Safetensors, MissingTensorNamesTensorAndFile) {
  TempDir dir;
  write_bytes(dir / "g.safetensors", raw_safetensors(kGoodHeader, std::string(16, '\0')));
  SafetensorsFile f(dir / "g.safetensors");
  const std::string msg = thrown_message<std::invalid_argument>([&] { f.get("model.layers.0.x"); });
  EXPECT_NE(msg.find("no tensor named 'model.layers.0.x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("g.safetensors"), std::string::npos) << msg;
}

TEST(Safetensors, MissingFileIsRuntimeError) {
  TempDir dir;
  const std::string msg =
      thrown_message<std::runtime_error>([&] { SafetensorsFile f(dir / "absent.safetensors"); });
  EXPECT_NE(msg.find("absent.safetensors: cannot open"), std::string::npos) << msg;
}

TEST(Safetensors, DirectoryIsNotAFile) {
  TempDir dir;
  const std::string msg = thrown_message<std::invalid_argument>([&] { SafetensorsFile f(dir.path()); });
  EXPECT_NE(msg.find("is a directory, not a file"), std::string::npos) << msg;
}

// Every truncation of a valid file either opens (then all its tensors lie in the file) or throws cleanly.
TEST(Safetensors, EveryTruncationFailsCleanly) {
  TempDir dir;
  const std::vector<float> a(10, 1.0f);
  const std::vector<uint16_t> b(6, 7);
  const std::vector<TensorToWrite> tensors = {{"a", "F32", {2, 5}, bytes_of(a)},
                                              {"b", "BF16", {6}, bytes_of(b)}};
  write_safetensors(dir / "full.safetensors", tensors);
  const std::string full = testing::read_bytes(dir / "full.safetensors");
  for (size_t n = 0; n < full.size(); ++n) {
    write_bytes(dir / "cut.safetensors", full.substr(0, n));
    EXPECT_THROW(SafetensorsFile f(dir / "cut.safetensors"), std::invalid_argument) << "length " << n;
  }
}

// Flipping any single byte of the header region never crashes the reader.
TEST(Safetensors, HeaderByteFlipsNeverCrash) {
  TempDir dir;
  const std::vector<float> a(4, 2.0f);
  const std::vector<TensorToWrite> tensors = {{"a", "F32", {2, 2}, bytes_of(a)}};
  write_safetensors(dir / "full.safetensors", tensors);
  const std::string full = testing::read_bytes(dir / "full.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, full.data(), 8);
  for (size_t i = 0; i < 8 + header_len; ++i) {
    for (unsigned char x : {0x01, 0x20, 0x80, 0xff}) {
      std::string bad = full;
      bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ x);
      write_bytes(dir / "flip.safetensors", bad);
      try {
        SafetensorsFile f(dir / "flip.safetensors");
        for (const auto& name : f.names()) {
          if (const TensorInfo* t = f.find(name)) {
            volatile std::byte sink{};
            for (size_t k = 0; k < t->nbytes; ++k) sink = t->data[k];  // must stay inside the mapping
            (void)sink;
          }
        }
      } catch (const std::invalid_argument&) {
      }
    }
  }
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  const std::vector<float> a = {1, 2, 3};
  std::string msg = thrown_message<std::invalid_argument>([&] {
    const std::vector<TensorToWrite> t = {{"a", "F32", {2, 2}, bytes_of(a)}};
    write_safetensors(dir / "w.safetensors", t);
  });
  EXPECT_NE(msg.find("tensor 'a' has 12 bytes but shape [2, 2] of F32 needs 16"), std::string::npos) << msg;
  msg = thrown_message<std::invalid_argument>([&] {
    const std::vector<TensorToWrite> t = {{"a", "F32", {3}, bytes_of(a)}, {"a", "F32", {3}, bytes_of(a)}};
    write_safetensors(dir / "w.safetensors", t);
  });
  EXPECT_NE(msg.find("duplicate tensor 'a'"), std::string::npos) << msg;
  msg = thrown_message<std::invalid_argument>([&] {
    const std::vector<TensorToWrite> t = {{"a", "F32", {-3}, bytes_of(a)}};
    write_safetensors(dir / "w.safetensors", t);
  });
  EXPECT_NE(msg.find("negative dimension"), std::string::npos) << msg;
  msg = thrown_message<std::runtime_error>([&] {
    const std::vector<TensorToWrite> t = {{"a", "F32", {3}, bytes_of(a)}};
    write_safetensors(dir / "no_such_dir" / "w.safetensors", t);
  });
  EXPECT_NE(msg.find("cannot create"), std::string::npos) << msg;
}

}  // namespace
}  // namespace moe::io

// The GGUF reader (moe/io/gguf.h, gguf_model.h) against files written by the tests' own writer from the
// specification (tests/support/gguf_writer.h): every metadata type read back, tensor infos and data placed
// as the specification says, split models found across their shards; and every malformed file refused by
// name, without allocating anything of the size its header claims.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "moe/io/gguf.h"
#include "moe/io/gguf_model.h"
#include "tests/io_test_util.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/gguf_writer.h"

namespace moe::testing {
namespace {

using io::GgufFile;
using io::GgufModel;
using io::GgufValueType;
using io::testing::TempDir;
using io::testing::thrown_message;
using io::testing::write_bytes;

std::string bytes_of(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return s;
}

// A small valid file: a few metadata entries and three tensors of different types.
GgufWriter SmallFile() {
  GgufWriter w;
  w.add("general.architecture", gguf_str("llama"));
  w.add("llama.block_count", gguf_u32(2));
  w.add_tensor("a.weight", {4, 3}, ggml_type::F32, bytes_of(48, 1));
  w.add_tensor("b.weight", {32, 2}, ggml_type::Q8_0, bytes_of(68, 2));
  w.add_tensor("c.weight", {256}, ggml_type::Q4_K, bytes_of(144, 3));
  return w;
}

TEST(GgufFile, ReadsEveryMetadataTypeBack) {
  TempDir dir;
  GgufWriter w;
  w.add("t.u8", GgufValueBytes{GgufType::U8, "\xfe"});
  w.add("t.i8", GgufValueBytes{GgufType::I8, "\xfe"});
  w.add("t.u16", gguf_u16(65000));
  w.add("t.i16", GgufValueBytes{GgufType::I16, std::string("\x00\x80", 2)});
  w.add("t.u32", gguf_u32(4000000000u));
  w.add("t.i32", gguf_i32(-7));
  w.add("t.f32", gguf_f32(2.5f));
  w.add("t.bool", gguf_bool(true));
  w.add("t.string", gguf_str("qwen3moe"));
  w.add("t.u64", gguf_u64(~uint64_t{0}));
  w.add("t.i64", GgufValueBytes{GgufType::I64, std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8)});
  w.add("t.f64", gguf_f64(-0.125));
  w.add("t.ints", gguf_array(GgufType::I32, {gguf_i32(1), gguf_i32(-2), gguf_i32(3)}));
  w.add("t.strings", gguf_array(GgufType::String, {gguf_str("a"), gguf_str(""), gguf_str("ccc")}));
  w.add("t.bools", gguf_array(GgufType::Bool, {gguf_bool(false), gguf_bool(true)}));
  w.add("t.nested",
        gguf_array(GgufType::Array, {gguf_array(GgufType::U8, {GgufValueBytes{GgufType::U8, "\x05"}}),
                                     gguf_array(GgufType::String, {gguf_str("x"), gguf_str("yz")})}));
  w.add("t.empty", gguf_array(GgufType::F32, {}));
  w.write(dir / "m.gguf");
  const GgufFile f(dir / "m.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.metadata().size(), 18u);  // general.alignment first
  EXPECT_EQ(f.metadata()[1].key, "t.u8");
  EXPECT_EQ(*f.find("t.u8")->as_int(), 254);
  EXPECT_EQ(*f.find("t.i8")->as_int(), -2);
  EXPECT_EQ(*f.find("t.u16")->as_int(), 65000);
  EXPECT_EQ(*f.find("t.i16")->as_int(), -32768);
  EXPECT_EQ(*f.find("t.u32")->as_uint(), 4000000000u);
  EXPECT_EQ(*f.find("t.i32")->as_int(), -7);
  EXPECT_FALSE(f.find("t.i32")->as_uint().has_value());
  EXPECT_EQ(*f.find("t.f32")->as_float(), 2.5);
  EXPECT_TRUE(*f.find("t.bool")->as_bool());
  EXPECT_EQ(*f.find("t.string")->as_string(), "qwen3moe");
  EXPECT_EQ(*f.find("t.u64")->as_uint(), ~uint64_t{0});
  EXPECT_FALSE(f.find("t.u64")->as_int().has_value());  // beyond int64
  EXPECT_EQ(*f.find("t.i64")->as_int(), -1);
  EXPECT_EQ(*f.find("t.f64")->as_float(), -0.125);
  EXPECT_FALSE(f.find("t.string")->as_int().has_value());
  const io::GgufValue& ints = *f.find("t.ints");
  EXPECT_EQ(ints.type(), GgufValueType::kArray);
  EXPECT_EQ(ints.element_type(), GgufValueType::kI32);
  ASSERT_EQ(ints.size(), 3u);
  EXPECT_EQ(*ints.element(1).as_int(), -2);
  const std::vector<io::GgufValue> strings = f.find("t.strings")->elements();
  ASSERT_EQ(strings.size(), 3u);
  EXPECT_EQ(*strings[0].as_string(), "a");
  EXPECT_EQ(*strings[1].as_string(), "");
  EXPECT_EQ(*strings[2].as_string(), "ccc");
  EXPECT_EQ(*f.find("t.strings")->element(2).as_string(), "ccc");
  EXPECT_TRUE(*f.find("t.bools")->element(1).as_bool());
  const std::vector<io::GgufValue> nested = f.find("t.nested")->elements();
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(*nested[0].element(0).as_int(), 5);
  EXPECT_EQ(*nested[1].elements()[1].as_string(), "yz");
  EXPECT_EQ(f.find("t.empty")->size(), 0u);
  EXPECT_EQ(f.find("t.missing"), nullptr);
  EXPECT_EQ(f.find("t.strings")->describe(), "array of 3 string");
  EXPECT_EQ(f.find("t.string")->describe(), "string 'qwen3moe'");
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.data_offset(), 0u);
}

TEST(GgufFile, PlacesTensorsAsTheSpecificationSays) {
  TempDir dir;
  for (uint32_t alignment : {32u, 64u, 1u}) {
    GgufWriter w = SmallFile();
    w.alignment = alignment;
    w.write(dir / "m.gguf");
    const GgufFile f(dir / "m.gguf");
    EXPECT_EQ(f.alignment(), alignment);
    ASSERT_EQ(f.tensors().size(), 3u);
    EXPECT_EQ(f.data_offset(), w.layout().data_at);
    EXPECT_EQ(f.data_offset() % alignment, 0u);
    const io::GgufTensorInfo& b = *f.tensor("b.weight");
    EXPECT_EQ(b.type, ggml_type::Q8_0);
    EXPECT_EQ(b.type_info.name, "Q8_0");
    EXPECT_EQ(b.n_dims, 2);
    EXPECT_EQ(b.ne[0], 32);
    EXPECT_EQ(b.ne[1], 2);
    EXPECT_EQ(b.ne[2], 1);
    EXPECT_EQ(b.nbytes, 68u);
    EXPECT_EQ(b.row_bytes(), 34u);
    EXPECT_EQ(b.shape_text(), "[32, 2]");
    EXPECT_EQ(b.offset, w.layout().data_at + w.layout().offsets[1]);
    EXPECT_EQ(std::memcmp(b.data, bytes_of(68, 2).data(), 68), 0);
    EXPECT_EQ(std::memcmp(f.tensor("a.weight")->data, bytes_of(48, 1).data(), 48), 0);
    EXPECT_EQ(f.tensor("c.weight")->nbytes, 144u);
    EXPECT_EQ(f.tensors()[2].name, "c.weight");  // file order
    EXPECT_EQ(f.tensor("d.weight"), nullptr);
  }
  // Without general.alignment the data section is aligned to 32.
  GgufWriter w = SmallFile();
  w.write(dir / "m.gguf", /*write_alignment=*/false);
  EXPECT_EQ(GgufFile(dir / "m.gguf").alignment(), 32u);
  // Version 2 has the same layout.
  w.version = 2;
  w.write(dir / "m.gguf");
  EXPECT_EQ(GgufFile(dir / "m.gguf").version(), 2u);
  // The mapping stays where it is when the file object moves.
  GgufFile a(dir / "m.gguf");
  const std::byte* data = a.tensor("a.weight")->data;
  GgufFile b = std::move(a);
  EXPECT_EQ(b.tensor("a.weight")->data, data);
}

struct Corruption {
  const char* what;
  std::function<std::string()> file;  // the corrupted file's bytes
  const char* message;
};

// Every way a GGUF file can be malformed: each is std::invalid_argument naming the problem, and none makes
// the reader allocate anything near the size the header claims.
TEST(GgufFile, MalformedFilesAreRefusedByName) {
  auto small = [] {
    GgufWriter w = SmallFile();
    return w.bytes();
  };
  auto with = [](const std::function<void(GgufWriter&)>& edit) {
    GgufWriter w = SmallFile();
    edit(w);
    return w.bytes();
  };
  auto patched = [](const std::function<void(std::string&, const GgufWriter::Layout&)>& edit) {
    GgufWriter w = SmallFile();
    std::string b = w.bytes();
    edit(b, w.layout());
    return b;
  };
  const std::vector<Corruption> cases = {
      {"short", [] { return std::string("GGUF\3\0\0\0", 8); }, "is 8 bytes, too short for a GGUF header"},
      {"magic",
       [&] {
         std::string b = small();
         b[0] = 'X';
         return b;
       },
       "is not a GGUF file: its magic is 'XGUF' (expected 'GGUF')"},
      {"v1", [&] { return patched([](std::string& b, auto& l) { patch_le(b, l.version_at, 1, 4); }); },
       "is GGUF version 1, which is not supported"},
      {"v4", [&] { return patched([](std::string& b, auto& l) { patch_le(b, l.version_at, 4, 4); }); },
       "is GGUF version 4, which is not supported (supported versions: 2, 3)"},
      {"big endian",
       [&] { return patched([](std::string& b, auto& l) { patch_le(b, l.version_at, 3u << 24, 4); }); },
       "is a big-endian GGUF file"},
      {"kv count",
       [&] {
         return patched([](std::string& b, auto& l) { patch_le(b, l.kv_count_at, uint64_t{1} << 60, 8); });
       },
       "says it has 1152921504606846976 metadata entries, but the"},
      {"tensor count",
       [&] {
         return patched(
             [](std::string& b, auto& l) { patch_le(b, l.tensor_count_at, uint64_t{1} << 40, 8); });
       },
       "says it has 1099511627776 tensors, but the"},
      {"key length",
       [&] {
         return patched([](std::string& b, auto& l) { patch_le(b, l.kv_at[1], uint64_t{1} << 50, 8); });
       },
       "metadata entry 1's key: a string of 1125899906842624 bytes at byte"},
      {"empty key", [&] { return with([](GgufWriter& w) { w.add("", gguf_u32(1)); }); }, "has an empty key"},
      {"duplicate key", [&] { return with([](GgufWriter& w) { w.add("llama.block_count", gguf_u32(3)); }); },
       "the metadata key 'llama.block_count' appears twice"},
      {"value type",
       [&] {
         return with([](GgufWriter& w) {
           w.add("x.y", GgufValueBytes{static_cast<GgufType>(13), std::string(4, '\0')});
         });
       },
       "metadata 'x.y' has the value type 13, which GGUF does not define (0-12)"},
      {"bool",
       [&] { return with([](GgufWriter& w) {
               w.add("x.flag", GgufValueBytes{GgufType::Bool, "\2"});
             }); },
       "metadata 'x.flag' is a bool of value 2 (must be 0 or 1)"},
      {"bool array",
       [&] {
         return with([](GgufWriter& w) {
           w.add("x.flags",
                 gguf_array(GgufType::Bool, {gguf_bool(true), GgufValueBytes{GgufType::Bool, "\7"}}));
         });
       },
       "metadata 'x.flags'[1] is a bool of value 7"},
      {"string value",
       [&] {
         return with([](GgufWriter& w) {
           GgufValueBytes v{GgufType::String, {}};
           put_le(v.payload, uint64_t{1} << 62, 8);
           w.add("x.s", v);
         });
       },
       "metadata 'x.s': a string of 4611686018427387904 bytes"},
      {"array count",
       [&] {
         return with([](GgufWriter& w) {
           GgufValueBytes v{GgufType::Array, {}};
           put_le(v.payload, static_cast<uint32_t>(GgufType::U64), 4);
           put_le(v.payload, uint64_t{1} << 61, 8);
           w.add("x.a", v);
         });
       },
       "metadata 'x.a' is an array of 2305843009213693952 u64 values, but only"},
      {"string array count",
       [&] {
         return with([](GgufWriter& w) {
           GgufValueBytes v{GgufType::Array, {}};
           put_le(v.payload, static_cast<uint32_t>(GgufType::String), 4);
           put_le(v.payload, uint64_t{1} << 61, 8);
           w.add("tokenizer.ggml.tokens", v);
         });
       },
       "'tokenizer.ggml.tokens' is an array of 2305843009213693952 string values"},
      {"array type",
       [&] {
         return with([](GgufWriter& w) {
           GgufValueBytes v{GgufType::Array, {}};
           put_le(v.payload, 77, 4);
           put_le(v.payload, 0, 8);
           w.add("x.a", v);
         });
       },
       "metadata 'x.a''s elements has the value type 77"},
      {"deep arrays",
       [&] {
         return with([](GgufWriter& w) {
           GgufValueBytes v = gguf_array(GgufType::U8, {});
           for (int i = 0; i < 9; ++i) v = gguf_array(GgufType::Array, {v});
           w.add("x.deep", v);
         });
       },
       "nests arrays more than 8 deep"},
      {"alignment type",
       [&] { return with([](GgufWriter& w) { w.add("general.alignment", gguf_u64(32)); }); },
       "the metadata key 'general.alignment' appears twice"},
      {"alignment u64",
       [] {
         GgufWriter w = SmallFile();
         w.add("general.alignment", gguf_u64(32));
         return w.bytes(/*write_alignment=*/false);
       },
       "general.alignment must be a u32 (got u64 32)"},
      {"alignment 0",
       [] {
         GgufWriter w = SmallFile();
         w.add("general.alignment", gguf_u32(0));
         return w.bytes(false);
       },
       "general.alignment = 0 is not a power of two"},
      {"alignment 48",
       [] {
         GgufWriter w = SmallFile();
         w.add("general.alignment", gguf_u32(48));
         return w.bytes(false);
       },
       "general.alignment = 48 is not a power of two"},
      {"empty name", [&] { return with([](GgufWriter& w) { w.tensors()[0].name = ""; }); },
       "tensor info 0 has an empty name"},
      {"long name", [&] { return with([](GgufWriter& w) { w.tensors()[1].name = std::string(65, 'n'); }); },
       "its name is 65 bytes (at most 64)"},
      {"duplicate name", [&] { return with([](GgufWriter& w) { w.tensors()[2].name = "a.weight"; }); },
       "the tensor name 'a.weight' appears twice"},
      {"dims", [&] { return with([](GgufWriter& w) {
                       w.tensors()[0].ne = {4, 3, 1, 1, 1};
                     }); },
       "tensor 'a.weight' has 5 dimensions (at most 4)"},
      {"dimension overflow",
       [&] { return with([](GgufWriter& w) {
               w.tensors()[0].ne = {int64_t{1} << 40, int64_t{1} << 40};
             }); },
       "tensor 'a.weight': the dimensions [1099511627776, 1099511627776] overflow a 64-bit element count"},
      {"dimension sign",
       [&] {
         return patched([](std::string& b, auto& l) { patch_le(b, l.info_dims_at[0] + 4, ~uint64_t{0}, 8); });
       },
       "tensor 'a.weight': the dimensions [18446744073709551615, 3] overflow"},
      {"bytes overflow",
       [&] { return with([](GgufWriter& w) {
               w.tensors()[0].ne = {int64_t{1} << 31, int64_t{1} << 31};
             }); },
       "is more bytes than 64 bits count"},
      {"huge tensor",
       [&] { return with([](GgufWriter& w) {
               w.tensors()[0].ne = {int64_t{1} << 20, int64_t{1} << 20};
             }); },
       "tensor 'a.weight': its 4398046511104 bytes at data offset 0 end past the end of the file"},
      {"row", [&] { return with([](GgufWriter& w) { w.tensors()[2].ne = {100}; }); },
       "tensor 'c.weight': Q4_K stores rows in blocks of 256 elements, but its rows (ne[0]) have 100"},
      {"unknown type",
       [&] { return patched([](std::string& b, auto& l) { patch_le(b, l.info_type_at[1], 99, 4); }); },
       "tensor 'b.weight' has the ggml type 99, which ggml does not define"},
      {"removed type",
       [&] { return patched([](std::string& b, auto& l) { patch_le(b, l.info_type_at[1], 31, 4); }); },
       "tensor 'b.weight' has the ggml type 31 (Q4_0_4_4), which was removed from GGUF files"},
      {"misaligned",
       [&] {
         return patched(
             [](std::string& b, auto& l) { patch_le(b, l.info_offset_at[1], l.offsets[1] + 4, 8); });
       },
       "tensor 'b.weight': its data offset 68 is not a multiple of general.alignment (32)"},
      {"offset past the end",
       [&] {
         return patched(
             [](std::string& b, auto& l) { patch_le(b, l.info_offset_at[2], uint64_t{1} << 50, 8); });
       },
       "tensor 'c.weight': its 144 bytes at data offset 1125899906842624 end past the end of the file"},
      {"truncated data",
       [&] {
         std::string b = small();
         b.resize(b.size() - 50);
         return b;
       },
       "tensor 'c.weight': its 144 bytes at data offset 160 end past the end of the file"},
      {"overlap",
       [&] {
         return patched(
             [](std::string& b, auto& l) { patch_le(b, l.info_offset_at[2], l.offsets[1] + 32, 8); });
       },
       "tensors 'b.weight' (bytes "},
      {"no data section",
       [&] {
         GgufWriter w = SmallFile();
         std::string b = w.bytes();
         b.resize(w.layout().info_offset_at[2] + 8);
         return b;
       },
       "ends inside the padding before its data section"},
      {"truncated infos",
       [&] {
         GgufWriter w = SmallFile();
         std::string b = w.bytes();
         b.resize(w.layout().info_type_at[2] + 2);
         return b;
       },
       "tensor 'c.weight''s type at byte"},
  };
  TempDir dir;
  for (const Corruption& c : cases) {
    const std::string bytes = c.file();
    write_bytes(dir / "bad.gguf", bytes);
    reset_largest_allocation();
    const std::string msg = thrown_message<std::invalid_argument>([&] { GgufFile f(dir / "bad.gguf"); });
    EXPECT_NE(msg.find(c.message), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(msg.rfind((dir / "bad.gguf").string() + ": ", 0), 0u) << c.what << ": " << msg;
    EXPECT_LT(largest_allocation(), 64 * 1024 + 8 * bytes.size()) << c.what;
  }
}

TEST(GgufFile, OperatingSystemFailuresAreIoErrors) {
  TempDir dir;
  const std::string msg = thrown_message<io::IoError>([&] { GgufFile f(dir / "absent.gguf"); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  EXPECT_NE(thrown_message<io::IoError>([&] { GgufFile f(dir.path()); }).find("not a regular file"),
            std::string::npos);
  write_bytes(dir / "empty.gguf", "");
  EXPECT_NE(thrown_message<std::invalid_argument>([&] { GgufFile f(dir / "empty.gguf"); }).find("is 0 bytes"),
            std::string::npos);
}

TEST(GgufModel, SplitFilesAreOneModel) {
  TempDir dir;
  GgufWriter w = SmallFile();
  const auto first = w.write_split(dir.path(), "tiny-moe", 3, {0, 2, 1});
  EXPECT_EQ(first.filename(), "tiny-moe-00001-of-00003.gguf");
  for (const char* name : {"tiny-moe-00001-of-00003.gguf", "tiny-moe-00003-of-00003.gguf"}) {
    const GgufModel m(dir / name);  // any shard opens the model
    ASSERT_EQ(m.shards().size(), 3u);
    EXPECT_EQ(m.shards()[2].path().filename(), "tiny-moe-00003-of-00003.gguf");
    EXPECT_EQ(m.tensor_count(), 3u);
    EXPECT_EQ(m.tensor("b.weight")->data, m.shards()[2].tensor("b.weight")->data);
    EXPECT_EQ(std::memcmp(m.tensor("c.weight")->data, bytes_of(144, 3).data(), 144), 0);
    EXPECT_EQ(*m.find("general.architecture")->as_string(), "llama");
    EXPECT_EQ(m.tensor_names().front(), "a.weight");
  }
  // A missing shard names itself.
  std::filesystem::rename(dir / "tiny-moe-00002-of-00003.gguf", dir / "moved.gguf");
  std::string msg = thrown_message<io::IoError>([&] { GgufModel m(first); });
  EXPECT_NE(msg.find("shard 2 of 3 is missing or unreadable"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tiny-moe-00002-of-00003.gguf"), std::string::npos) << msg;
  // A shard under another shard's name.
  std::filesystem::copy_file(dir / "tiny-moe-00003-of-00003.gguf", dir / "tiny-moe-00002-of-00003.gguf");
  msg = thrown_message<std::invalid_argument>([&] { GgufModel m(first); });
  EXPECT_NE(msg.find("shard 2 of 3 by its name, but its split.no = 2"), std::string::npos) << msg;
  // A split.count the name does not carry.
  std::filesystem::copy_file(first, dir / "renamed.gguf");
  msg = thrown_message<std::invalid_argument>([&] { GgufModel m(dir / "renamed.gguf"); });
  EXPECT_NE(msg.find("split.count = 3 but the file name is not <prefix>-NNNNN-of-00003.gguf"),
            std::string::npos)
      << msg;
  // A tensor in two shards, and a tensor total that disagrees with split.tensors.count.
  TempDir two;
  GgufWriter dup = SmallFile();
  dup.add_tensor("a.weight", {4}, ggml_type::F32, bytes_of(16, 9));
  dup.write_split(two.path(), "m", 2, {0, 0, 1, 1});
  msg = thrown_message<std::invalid_argument>([&] { GgufModel m(two / "m-00001-of-00002.gguf"); });
  EXPECT_NE(msg.find("the tensor 'a.weight' is in more than one shard"), std::string::npos) << msg;
  GgufWriter fewer = SmallFile();
  fewer.write_split(two.path(), "f", 2, {0, 1, 9});  // the third tensor in no shard
  msg = thrown_message<std::invalid_argument>([&] { GgufModel m(two / "f-00002-of-00002.gguf"); });
  EXPECT_NE(msg.find("split.tensors.count = 3 but its 2 shards hold 2 tensors"), std::string::npos) << msg;
  // A single file is a model of one shard.
  GgufWriter single = SmallFile();
  single.write(two / "one.gguf");
  EXPECT_EQ(GgufModel(two / "one.gguf").shards().size(), 1u);
}

TEST(GgufModel, NamesAndDetection) {
  std::string prefix;
  int index = 0, count = 0;
  EXPECT_TRUE(io::parse_gguf_split_name("Mixtral-8x7B-Q4_K_M-00002-of-00003.gguf", &prefix, &index, &count));
  EXPECT_EQ(prefix, "Mixtral-8x7B-Q4_K_M");
  EXPECT_EQ(index, 2);
  EXPECT_EQ(count, 3);
  EXPECT_FALSE(io::parse_gguf_split_name("m-00004-of-00003.gguf", nullptr, nullptr, nullptr));
  EXPECT_FALSE(io::parse_gguf_split_name("m-0001-of-00003.gguf", nullptr, nullptr, nullptr));
  EXPECT_FALSE(io::parse_gguf_split_name("m.gguf", nullptr, nullptr, nullptr));
  EXPECT_EQ(io::gguf_split_name("m", 7, 12), "m-00007-of-00012.gguf");
  TempDir dir;
  GgufWriter w = SmallFile();
  w.write(dir / "model.bin");
  EXPECT_TRUE(io::is_gguf_path(dir / "model.bin"));    // by its magic
  EXPECT_TRUE(io::is_gguf_path(dir / "absent.GGUF"));  // by its name
  EXPECT_FALSE(io::is_gguf_path(dir.path()));
  write_bytes(dir / "config.json", "{}");
  EXPECT_FALSE(io::is_gguf_path(dir / "config.json"));
  EXPECT_EQ(io::gguf_printable(std::string("a\x01\xff", 3)), "a\\x01\\xff");
}

}  // namespace
}  // namespace moe::testing

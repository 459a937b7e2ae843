// Checkpoint: single file, directory, sharded index; errors for missing shards and tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/io/checkpoint.h"
#include "tests/io_test_util.h"

namespace moe::io {
namespace {

using testing::TempDir;
using testing::thrown_message;
using testing::write_bytes;

// Writes shard `file` holding tensors named `names`, each a 2-float tensor {i, -i} for its index i in
// `names`.
void write_shard(const std::filesystem::path& file, const std::vector<std::string>& names, float base) {
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < names.size(); ++i) data.push_back({base + static_cast<float>(i), -base});
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    tensors.push_back({names[i], "F32", {2}, std::as_bytes(std::span<const float>(data[i]))});
  }
  write_safetensors(file, tensors);
}

float first_value(const TensorInfo& t) {
  float v = 0;
  std::memcpy(&v, t.data, 4);
  return v;
}

void write_index(const std::filesystem::path& file, const std::string& weight_map_json) {
  write_bytes(file, R"({"metadata":{"total_size":48},"weight_map":)" + weight_map_json + "}");
}

TEST(Checkpoint, SingleFileAndDirectory) {
  TempDir dir;
  write_shard(dir / "model.safetensors", {"x", "y"}, 10);
  for (const auto& path : {dir / "model.safetensors", dir.path()}) {
    Checkpoint c(path);
    EXPECT_EQ(c.names(), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(first_value(c.get("y")), 11.0f);
    EXPECT_EQ(c.find("z"), nullptr);
    EXPECT_EQ(c.path(), path);
  }
}

TEST(Checkpoint, ShardedIndexAcrossThreeShards) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00003.safetensors", {"a", "b"}, 0);
  write_shard(dir / "model-00002-of-00003.safetensors", {"c"}, 100);
  write_shard(dir / "model-00003-of-00003.safetensors", {"d", "e", "extra_not_in_index"}, 200);
  write_index(dir / "model.safetensors.index.json",
              R"({"a":"model-00001-of-00003.safetensors","b":"model-00001-of-00003.safetensors",)"
              R"("c":"model-00002-of-00003.safetensors","d":"model-00003-of-00003.safetensors",)"
              R"("e":"model-00003-of-00003.safetensors"})");
  for (const auto& path : {dir / "model.safetensors.index.json", dir.path()}) {
    const auto c = Checkpoint::open(path);
    EXPECT_EQ(c->shards().size(), 3u);
    EXPECT_EQ(c->names(), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
    EXPECT_EQ(first_value(c->get("a")), 0.0f);
    EXPECT_EQ(first_value(c->get("b")), 1.0f);
    EXPECT_EQ(first_value(c->get("c")), 100.0f);
    EXPECT_EQ(first_value(c->get("e")), 201.0f);
    EXPECT_EQ(c->find("extra_not_in_index"), nullptr) << "the index is the list of tensors";
    const std::string msg = thrown_message<std::invalid_argument>([&] { c->get("zz"); });
    EXPECT_NE(msg.find("no tensor named 'zz'"), std::string::npos) << msg;
  }
}

TEST(Checkpoint, IndexNamesMissingShard) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"}, 0);
  write_index(dir / "model.safetensors.index.json", R"({"a":"s1.safetensors","b":"s2.safetensors"})");
  const std::string msg = thrown_message<std::runtime_error>([&] { Checkpoint c(dir.path()); });
  EXPECT_NE(msg.find("s2.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("which is missing"), std::string::npos) << msg;
}

TEST(Checkpoint, TensorListedButAbsentFromShard) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a"}, 0);
  write_index(dir / "idx.json", R"({"a":"s1.safetensors","ghost":"s1.safetensors"})");
  Checkpoint c(dir / "idx.json");
  EXPECT_TRUE(c.contains("ghost"));
  const std::string msg = thrown_message<std::invalid_argument>([&] { c.get("ghost"); });
  EXPECT_NE(msg.find("tensor 'ghost' is listed in the index but absent from its shard"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("s1.safetensors"), std::string::npos) << msg;
}

TEST(Checkpoint, BadIndexes) {
  TempDir dir;
  write_bytes(dir / "bad.json", "{not json");
  std::string msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir / "bad.json"); });
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
  write_bytes(dir / "overflow.json", R"({"metadata":{"total_size":1e400},"weight_map":{}})");
  msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir / "overflow.json"); });
  EXPECT_NE(msg.find("invalid JSON: [json.exception.out_of_range.406] number overflow"), std::string::npos)
      << msg;
  write_bytes(dir / "nomap.json", R"({"metadata":{}})");
  msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir / "nomap.json"); });
  EXPECT_NE(msg.find("no \"weight_map\""), std::string::npos) << msg;
  write_index(dir / "escape.json", R"({"a":"../elsewhere.safetensors"})");
  msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir / "escape.json"); });
  EXPECT_NE(msg.find("not a relative path inside the checkpoint directory"), std::string::npos) << msg;
  write_index(dir / "num.json", R"({"a":3})");
  msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir / "num.json"); });
  EXPECT_NE(msg.find("weight_map entry 'a' is not a file name"), std::string::npos) << msg;
}

// Fuzz regressions (tests/fuzz_regressions/checkpoint_index/): one file under two spellings is one shard, and
// an index that lists no tensor is refused.
TEST(Checkpoint, ShardSpelledTwoWaysIsOneShard) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {"a", "b"}, 0);
  write_shard(dir / "s2.safetensors", {"c"}, 100);
  write_index(dir / "idx.json", R"({"a":"s1.safetensors","b":"./s1.safetensors","c":".//s2.safetensors"})");
  Checkpoint c(dir / "idx.json");
  ASSERT_EQ(c.shards().size(), 2u);
  EXPECT_EQ(c.shards()[0].path().filename(), "s1.safetensors");
  EXPECT_EQ(c.shards()[1].path().filename(), "s2.safetensors");
  EXPECT_EQ(first_value(c.get("b")), 1.0f);
  EXPECT_EQ(first_value(c.get("c")), 100.0f);
}

TEST(Checkpoint, EmptyWeightMapIsRefused) {
  TempDir dir;
  write_index(dir / "idx.json", "{}");
  const std::string msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir / "idx.json"); });
  EXPECT_NE(msg.find("\"weight_map\" lists no tensor"), std::string::npos) << msg;
}

TEST(Checkpoint, ShardThatIsADirectoryIsRefused) {
  TempDir dir;
  std::filesystem::create_directories(dir / "sub.safetensors");
  write_index(dir / "idx.json", R"({"a":"sub.safetensors"})");
  std::string msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir / "idx.json"); });
  EXPECT_NE(msg.find("sub.safetensors: is a directory, not a file"), std::string::npos) << msg;
  write_index(dir / "dot.json", R"({"a":"."})");
  msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir / "dot.json"); });
  EXPECT_NE(msg.find("is a directory, not a file"), std::string::npos) << msg;
}

TEST(Checkpoint, EmptyDirectory) {
  TempDir dir;
  const std::string msg = thrown_message<std::runtime_error>([&] { Checkpoint c(dir.path()); });
  EXPECT_NE(msg.find("has neither model.safetensors.index.json nor model.safetensors"), std::string::npos)
      << msg;
}

TEST(Checkpoint, CorruptShardIsReportedAtOpen) {
  TempDir dir;
  write_bytes(dir / "s1.safetensors", "garbage!");
  write_index(dir / "model.safetensors.index.json", R"({"a":"s1.safetensors"})");
  const std::string msg = thrown_message<std::invalid_argument>([&] { Checkpoint c(dir.path()); });
  EXPECT_NE(msg.find("s1.safetensors"), std::string::npos) << msg;
}

}  // namespace
}  // namespace moe::io

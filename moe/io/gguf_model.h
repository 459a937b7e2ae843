// A GGUF model: one .gguf file, or the shards of a split one (llama.cpp's gguf-split and
// convert_hf_to_gguf.py
// --split-max-size: "<prefix>-00001-of-00003.gguf" ... "<prefix>-00003-of-00003.gguf", each with the keys
// split.no (its 0-based index), split.count and, in the first, split.tensors.count; the model's metadata in
// the first shard, every tensor in exactly one shard).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moe/io/gguf.h"

namespace moe::io {

// Opens, at construction, every file of a GGUF model given as
//   - a .gguf file without split.count (or with split.count = 1);
//   - any shard of a split model: the other shards are found beside it by the file name pattern.
// Every shard is mapped and its header validated at once, so a missing or corrupt shard is reported before
// anything is loaded.
//
// Errors: io::IoError when a file cannot be opened or mapped (a missing shard names its path and which shard
// of how many it is); std::invalid_argument for malformed contents (GgufFile's), a split.count the file name
// does not match, a shard whose split.no or split.count disagrees with its name, a tensor in two shards, or a
// tensor total that disagrees with split.tensors.count.
//
// Thread safety: immutable after construction. Ownership: movable, not copyable; GgufTensorInfo pointers and
// data stay valid while the GgufModel lives (LayerWeights loaded from it keep it alive).
class GgufModel {
 public:
  explicit GgufModel(const std::filesystem::path& path);
  static std::shared_ptr<const GgufModel> open(const std::filesystem::path& path);

  GgufModel(GgufModel&&) noexcept = default;
  GgufModel& operator=(GgufModel&&) noexcept = default;
  GgufModel(const GgufModel&) = delete;
  GgufModel& operator=(const GgufModel&) = delete;

  // The model's metadata (the first shard's).
  const GgufValue* find(std::string_view key) const { return shards_.front().find(key); }
  const std::vector<GgufFile::Entry>& metadata() const { return shards_.front().metadata(); }

  // The tensor `name` in whichever shard holds it, or nullptr.
  const GgufTensorInfo* tensor(std::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string_view> tensor_names() const;
  size_t tensor_count() const { return by_name_.size(); }

  // The shards in order (one for a single file).
  const std::vector<GgufFile>& shards() const { return shards_; }
  // The path given to the constructor: used in messages.
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Located {
    std::string_view name;
    const GgufTensorInfo* info;
  };
  std::filesystem::path path_;
  std::vector<GgufFile> shards_;
  std::vector<Located> by_name_;  // sorted by name
};

// Whether `path` names a GGUF file: its name ends in ".gguf" (any case), or it is a regular file whose first
// four bytes are "GGUF". Never throws.
bool is_gguf_path(const std::filesystem::path& path);

// The shard pattern of a split model's file name: for "m-00002-of-00003.gguf" sets prefix "m", index 2 and
// count 3 and returns true; false for any other name.
bool parse_gguf_split_name(const std::string& filename, std::string* prefix, int* index, int* count);
// "<prefix>-00002-of-00003.gguf".
std::string gguf_split_name(const std::string& prefix, int index, int count);

}  // namespace moe::io

// A model checkpoint: one safetensors file, or several shards tied together by a Hugging Face index.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moe/io/safetensors.h"

namespace moe::io {

// Opens, at construction, every file of a checkpoint given as
//   - a .safetensors file;
//   - a Hugging Face index json ("*.safetensors.index.json") whose "weight_map" maps each tensor name to a
//     shard file name relative to the index's directory (spellings of one path, "s.safetensors" and
//     "./s.safetensors", are one shard, opened once);
//   - a directory holding model.safetensors.index.json (preferred) or model.safetensors.
// Every shard is mapped and its header validated when the Checkpoint is opened, so a missing or corrupt
// shard is reported at once; mapping is lazy in the OS sense (pages are read when tensors are touched).
//
// Errors: io::IoError (moe/io/io_error.h) when a file cannot be opened, read or mapped (including a shard
// that the index names but that does not exist, with the index, shard and one tensor it should hold in the
// message); std::invalid_argument for malformed contents (index JSON, an empty weight_map, shard headers, a
// shard path that leaves the checkpoint directory or names a directory) and for a tensor the index lists but
// its shard lacks (reported by find/get).
//
// Thread safety: immutable after construction; every method may be called concurrently.
// Ownership: movable, not copyable. TensorInfo pointers and data stay valid while the Checkpoint lives;
// LayerWeights keeps its Checkpoint alive through a shared_ptr.
class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& path);

  // Convenience for LayerWeights: opens `path` into a shared_ptr.
  static std::shared_ptr<const Checkpoint> open(const std::filesystem::path& path);

  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  // The tensor `name`, or nullptr if the checkpoint does not list it. Throws std::invalid_argument if the
  // tensor has an unsupported dtype, or if the index lists it but its shard does not contain it.
  const TensorInfo* find(std::string_view name) const;

  // Like find(), but a missing tensor throws std::invalid_argument naming the tensor and the checkpoint.
  const TensorInfo& get(std::string_view name) const;

  // The tensor `name` whatever its dtype (SafetensorsFile::raw), or nullopt if the checkpoint does not list
  // it. Throws std::invalid_argument if the index lists it but its shard does not contain it.
  std::optional<RawTensor> raw(std::string_view name) const;

  // True if the checkpoint lists `name` (whatever its dtype).
  bool contains(std::string_view name) const;

  // Every tensor name the checkpoint lists (the index's weight_map, or the single file's tensors), sorted.
  std::vector<std::string> names() const;

  // The path given to the constructor (file, index or directory): used in error messages.
  const std::filesystem::path& path() const { return path_; }

  // The shard files, in the order of their file names (one for a single-file checkpoint).
  const std::vector<SafetensorsFile>& shards() const { return shards_; }

 private:
  void open_index(const std::filesystem::path& index_path);

  std::filesystem::path path_;
  std::vector<SafetensorsFile> shards_;
  // tensor name -> index into shards_; empty for a single file (which then answers everything).
  std::map<std::string, size_t, std::less<>> weight_map_;
  bool indexed_ = false;
};

}  // namespace moe::io

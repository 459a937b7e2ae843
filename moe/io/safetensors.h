// Reading and writing .safetensors files (https://github.com/huggingface/safetensors).
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON, then the data area. The JSON is an
// object mapping each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets
// relative to the start of the data area), plus an optional "__metadata__" object of string values.
//
// Errors (the message names the file, the tensor and what was expected against what was found):
//   io::IoError             the operating system failed: open, stat, mmap, write, rename (io_error.h).
//   std::invalid_argument   the contents are wrong: header length beyond the file, malformed JSON, offsets
//   out of
//                           the data area, byte count that does not match shape x dtype, an unknown or
//                           unsupported dtype for a requested tensor, a missing tensor.
// A corrupt file never crashes the reader: every offset and size read from the file is bounds-checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/tensor.h"
#include "moe/io/io_error.h"

namespace moe::io {

// One tensor of a file whose dtype this project can load (F32, BF16 or F16). `data` points into the
// read-only mapping of the file and stays valid as long as the SafetensorsFile (or the Checkpoint holding it)
// lives. NOTES: `data` is aligned to the element size only if the writer aligned it (write_safetensors and
// the Hugging Face writer do); a consumer that dereferences typed pointers must check.
struct TensorInfo {
  std::string name;
  kernels::DType dtype = kernels::DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;  // == prod(shape) * dtype_size(dtype)
};

// A tensor as stored, whatever its dtype ("F8_E4M3", "U8", "I64", ... as well as "F32", "BF16", "F16"): for
// the quantized weight formats (moe/io/quantized.h) and tools that describe a checkpoint. `data` as
// TensorInfo's; `nbytes` equals prod(shape) x the element size for every dtype the specification names (an
// unknown dtype name has element_size 0 and its nbytes is unchecked).
struct RawTensor {
  const std::string* name = nullptr;
  const std::string* dtype = nullptr;  // the file's spelling
  const std::vector<int64_t>* shape = nullptr;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  size_t element_size = 0;  // bytes per element of `dtype`, 0 if the specification does not name it
};

// The safetensors spelling of a dtype: "F32", "BF16", "F16", "F8_E4M3" (the bytes of kFP8); "?" for the block
// types.
std::string_view safetensors_dtype_name(kernels::DType dtype);

// A .safetensors file mapped read-only into memory.
//
// Opening maps the file, parses and validates the whole header: every tensor's offsets must lie inside the
// data area and its byte count must equal prod(shape) x element size (for every dtype whose size is known,
// including ones this project cannot load, such as I64 or F8_E4M3). Offsets may be unsorted or overlap.
// Tensors of an unsupported dtype are listed by names() and are an error only when requested.
//
// Thread safety: after construction all methods are const and may be called concurrently.
// Ownership: movable, not copyable; the destructor unmaps the file, invalidating every TensorInfo::data.
// The file must not be truncated by another process while mapped (the OS would raise SIGBUS).
class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws io::IoError if the file cannot be opened or mapped,
  // std::invalid_argument if its contents are malformed.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // The tensor called `name`, or nullptr if the file has no such tensor. Throws std::invalid_argument if the
  // tensor exists but its dtype is not F32, BF16 or F16 (the message names the tensor, the file and the
  // dtype).
  const TensorInfo* find(std::string_view name) const;

  // Like find(), but a missing tensor throws std::invalid_argument naming the tensor and the file.
  const TensorInfo& get(std::string_view name) const;

  // True if the file has a tensor called `name`, whatever its dtype.
  bool contains(std::string_view name) const;

  // The tensor `name` whatever its dtype, or nullopt if the file has none. Never throws.
  std::optional<RawTensor> raw(std::string_view name) const;

  // The dtype of `name` as spelled in the file ("F32", "I64", "F8_E4M3", ...). Throws if absent.
  const std::string& file_dtype(std::string_view name) const;

  // Every tensor name in the file (all dtypes), sorted.
  std::vector<std::string> names() const;

  // The "__metadata__" entries (empty if the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const std::filesystem::path& path() const { return path_; }

 private:
  struct Entry {
    TensorInfo info;
    std::string file_dtype;
    bool supported = false;
  };
  const Entry* lookup(std::string_view name) const;
  void unmap() noexcept;

  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<Entry> entries_;  // sorted by name
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. `dtype` is the safetensors spelling ("F32", "BF16", "F16", or any other dtype such as
// "I64", written as given so that tests can produce files with foreign dtypes). `bytes` is the row-major
// little-endian payload; the writer does not keep it.
struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

// Writes `tensors` to `path` as a safetensors file that the Hugging Face reader accepts: the header is padded
// with spaces to a multiple of 8 bytes and tensors are laid out contiguously, largest element size first, so
// that every tensor is aligned to its element size. The file is written to `path` + ".tmp" and renamed, so a
// reader never sees a half-written file.
// Throws std::invalid_argument for an empty or duplicate name, a negative dimension, a name "__metadata__",
// or a payload whose size does not match shape x element size (for known dtypes); io::IoError if
// writing fails.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace moe::io

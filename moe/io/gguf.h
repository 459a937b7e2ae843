// Reading GGUF files (ggml's docs/gguf.md, version 3; version 2 has the same layout and is read too).
//
// File layout, little-endian: the magic "GGUF", a u32 version, a u64 tensor count, a u64 metadata count, the
// metadata key/value pairs (a string key, a u32 value type, the value: fixed-size scalars, strings as u64
// length + bytes, arrays as u32 element type + u64 count + elements), the tensor infos (a string name, a u32
// dimension count, that many u64 dimensions ne[0] (the row, innermost) first, a u32 ggml type, a u64 offset
// into the data section), padding to general.alignment (a u32 key, 32 when absent), then the data section.
//
// Errors (every message starts with the file's path and names what is wrong, where, and what was expected):
//   io::IoError             the operating system failed: open, stat, mmap.
//   std::invalid_argument   the contents are wrong: a bad magic or an unsupported version (1, a big-endian
//                           file, one newer than 3), a count or a string length beyond what the file holds, a
//                           value type outside the enum, a bool that is neither 0 nor 1, arrays nested deeper
//                           than 8, an empty, duplicate or over-long key or tensor name, general.alignment
//                           not a u32 power of two, more than 4 dimensions or dimensions whose product
//                           overflows, an unknown or removed ggml type, a row (ne[0]) that the type's blocks
//                           do not divide, a data offset that is not a multiple of the alignment, tensor
//                           bytes past the end of the file, two tensors whose bytes overlap.
// Every count and length read from the file is checked against the bytes the file has before anything of
// that size is allocated: a hostile header allocates nothing beyond a small multiple of the file's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moe/io/gguf_types.h"
#include "moe/io/io_error.h"

namespace moe::io {

// One metadata value. Strings and array elements point into the file's mapping: a GgufValue is valid while
// its GgufFile lives. Cheap to copy.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }

  // The value of an integer type (u8 ... i64; not bool), if it is one and fits the result type.
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  // The value of f32 or f64 (f32 widened exactly).
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;

  // Arrays: the element type and count; element(i) decodes one element (strings and nested arrays are found
  // by walking the ones before them, so elements() is the way to visit them all).
  GgufValueType element_type() const { return element_type_; }
  uint64_t size() const { return count_; }
  GgufValue element(uint64_t i) const;
  std::vector<GgufValue> elements() const;

  // For messages: "u32 7", "f32 2.5", "string 'llama'" (cut at 60 characters), "array of 151936 string".
  std::string describe() const;

 private:
  friend class GgufParser;
  GgufValueType type_ = GgufValueType::kU8;
  GgufValueType element_type_ = GgufValueType::kU8;  // arrays
  uint64_t count_ = 0;                               // arrays
  uint64_t bits_ = 0;                                // fixed-size scalars, little-endian bits
  const std::byte* data_ = nullptr;                  // strings: the bytes; arrays: the first element
  size_t bytes_ = 0;                                 // strings: the length; arrays: the elements' bytes
};

// One tensor of a GGUF file. ne[0] is the innermost dimension (a row); a PyTorch [out, in] matrix is stored
// with ne = {in, out}, an [E, out, in] expert stack with ne = {in, out, E}.
struct GgufTensorInfo {
  std::string_view name;  // into the mapping
  uint32_t type = 0;      // ggml_type id (gguf_types.h)
  GgufTensorTypeInfo type_info;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // dimensions past n_dims are 1
  uint64_t offset = 0;           // of the first byte, from the start of the file
  uint64_t nbytes = 0;
  const std::byte* data = nullptr;  // into the mapping

  int64_t elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // Bytes of one row (ne[0] elements).
  uint64_t row_bytes() const {
    return static_cast<uint64_t>(ne[0] / type_info.block_elements) *
           static_cast<uint64_t>(type_info.block_bytes);
  }
  // "[4096, 14336, 8]" (ne order, as llama.cpp prints it).
  std::string shape_text() const;
};

// A GGUF file mapped read-only into memory. Opening maps the file and parses and validates the whole header
// (metadata and tensor infos); no tensor data is read (pages of the mapping are read when touched).
//
// Thread safety: immutable after construction; every method may be called concurrently.
// Ownership: movable, not copyable; moving keeps the mapping where it is, so GgufValue, GgufTensorInfo::name
// and ::data stay valid; the destructor unmaps the file. The file must not be truncated while it is mapped.
class GgufFile {
 public:
  // Maps and validates `path`. Throws io::IoError if it cannot be opened or mapped, std::invalid_argument if
  // its contents are malformed (see the top of this header).
  explicit GgufFile(const std::filesystem::path& path);
  ~GgufFile();
  GgufFile(GgufFile&& other) noexcept;
  GgufFile& operator=(GgufFile&& other) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // The first byte of the data section (0 when the file has no tensors).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_bytes() const { return map_bytes_; }

  struct Entry {
    std::string_view key;
    GgufValue value;
  };
  // Every metadata entry, in file order.
  const std::vector<Entry>& metadata() const { return metadata_; }
  // The value of `key`, or nullptr.
  const GgufValue* find(std::string_view key) const;

  // Every tensor, in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // The tensor `name`, or nullptr.
  const GgufTensorInfo* tensor(std::string_view name) const;

  const std::filesystem::path& path() const { return path_; }

 private:
  void unmap() noexcept;

  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<Entry> metadata_;
  std::vector<uint32_t> metadata_by_key_;  // indices into metadata_, sorted by key
  std::vector<GgufTensorInfo> tensors_;
  std::vector<uint32_t> tensors_by_name_;  // indices into tensors_, sorted by name
};

// Parses `bytes` as a GGUF file (what GgufFile does after mapping; `where` starts every message). The result
// points into `bytes`, which must outlive it. For GgufFile and the fuzz target.
struct GgufContents {
  uint32_t version = 0;
  uint32_t alignment = 32;
  uint64_t data_offset = 0;
  std::vector<GgufFile::Entry> metadata;
  std::vector<GgufTensorInfo> tensors;
  std::vector<uint32_t> metadata_by_key;  // indices into metadata, sorted by key
  std::vector<uint32_t> tensors_by_name;  // indices into tensors, sorted by name
};
GgufContents parse_gguf(std::span<const std::byte> bytes, const std::string& where);

// A message-safe rendering of bytes from a file: printable ASCII kept, anything else as \xNN, cut at `max`
// characters with "...".
std::string gguf_printable(std::string_view text, size_t max = 80);

}  // namespace moe::io

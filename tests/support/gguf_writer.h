// A GGUF writer for the tests, written from the published specification (ggml's docs/gguf.md, version 3)
// and independently of moe/io's reader: metadata of every value type (arrays and nested arrays included),
// tensor infos, general.alignment, padding, the data section, little-endian, split files the way llama.cpp
// names and keys them. It also records where each field landed, so that the malformed-file tests can corrupt
// one field of an otherwise valid file.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe::testing {

// gguf_metadata_value_type and a few ggml_type ids, spelled out here from the specification.
enum class GgufType : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64 };
namespace ggml_type {
inline constexpr uint32_t F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30,
                          MXFP4 = 39;
}

// Little-endian encodings.
inline void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline std::string gguf_string(const std::string& s) {
  std::string out;
  put_le(out, s.size(), 8);
  return out + s;
}

// One metadata value, encoded (without its key).
struct GgufValueBytes {
  GgufType type;
  std::string payload;  // the value's bytes as they follow the type field
};
inline GgufValueBytes gguf_u32(uint32_t v) {
  GgufValueBytes b{GgufType::U32, {}};
  put_le(b.payload, v, 4);
  return b;
}
inline GgufValueBytes gguf_i32(int32_t v) {
  GgufValueBytes b{GgufType::I32, {}};
  put_le(b.payload, static_cast<uint32_t>(v), 4);
  return b;
}
inline GgufValueBytes gguf_u64(uint64_t v) {
  GgufValueBytes b{GgufType::U64, {}};
  put_le(b.payload, v, 8);
  return b;
}
inline GgufValueBytes gguf_u16(uint16_t v) {
  GgufValueBytes b{GgufType::U16, {}};
  put_le(b.payload, v, 2);
  return b;
}
inline GgufValueBytes gguf_f32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  GgufValueBytes b{GgufType::F32, {}};
  put_le(b.payload, bits, 4);
  return b;
}
inline GgufValueBytes gguf_f64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  GgufValueBytes b{GgufType::F64, {}};
  put_le(b.payload, bits, 8);
  return b;
}
inline GgufValueBytes gguf_bool(bool v) {
  return GgufValueBytes{GgufType::Bool, std::string(1, v ? '\1' : '\0')};
}
inline GgufValueBytes gguf_str(const std::string& s) {
  return GgufValueBytes{GgufType::String, gguf_string(s)};
}
// An array of values of one type (their payloads concatenated).
inline GgufValueBytes gguf_array(GgufType element, const std::vector<GgufValueBytes>& values) {
  GgufValueBytes b{GgufType::Array, {}};
  put_le(b.payload, static_cast<uint32_t>(element), 4);
  put_le(b.payload, values.size(), 8);
  for (const GgufValueBytes& v : values) b.payload += v.payload;
  return b;
}

class GgufWriter {
 public:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;  // ne[0] first (the row)
    uint32_t type;
    std::string data;
  };
  // Where each field of the last bytes() landed.
  struct Layout {
    size_t version_at = 4, tensor_count_at = 8, kv_count_at = 16;
    std::vector<size_t> kv_at;           // each entry's key length field
    std::vector<size_t> info_at;         // each tensor info's name length field
    std::vector<size_t> info_type_at;    // ... its type field
    std::vector<size_t> info_offset_at;  // ... its offset field
    std::vector<size_t> info_dims_at;    // ... its dimension count field
    size_t data_at = 0;                  // the data section
    std::vector<uint64_t> offsets;       // each tensor's offset within it
  };

  uint32_t version = 3;
  uint32_t alignment = 32;  // written as general.alignment when write_alignment

  void add(const std::string& key, GgufValueBytes value) { kvs_.push_back({key, std::move(value)}); }
  // Replaces `key`'s value (or adds it); erase removes the key.
  void set(const std::string& key, GgufValueBytes value) {
    for (auto& [k, v] : kvs_) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
    add(key, std::move(value));
  }
  void erase(const std::string& key) {
    std::erase_if(kvs_, [&](const auto& kv) { return kv.first == key; });
  }
  void erase_tensor(const std::string& name) {
    std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; });
  }
  Tensor* tensor(const std::string& name) {
    for (Tensor& t : tensors_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  void add_tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, std::string data) {
    tensors_.push_back({name, std::move(ne), type, std::move(data)});
  }
  std::vector<Tensor>& tensors() { return tensors_; }

  // The file: header, metadata (general.alignment first when `write_alignment`), tensor infos, padding, data
  // (each tensor at the next multiple of the alignment).
  std::string bytes(bool write_alignment = true) {
    layout_ = Layout{};
    std::vector<std::pair<std::string, GgufValueBytes>> kvs = kvs_;
    if (write_alignment) kvs.insert(kvs.begin(), {"general.alignment", gguf_u32(alignment)});
    std::string out = "GGUF";
    put_le(out, version, 4);
    put_le(out, tensors_.size(), 8);
    put_le(out, kvs.size(), 8);
    for (const auto& [key, value] : kvs) {
      layout_.kv_at.push_back(out.size());
      out += gguf_string(key);
      put_le(out, static_cast<uint32_t>(value.type), 4);
      out += value.payload;
    }
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      layout_.info_at.push_back(out.size());
      out += gguf_string(t.name);
      layout_.info_dims_at.push_back(out.size());
      put_le(out, t.ne.size(), 4);
      for (int64_t n : t.ne) put_le(out, static_cast<uint64_t>(n), 8);
      layout_.info_type_at.push_back(out.size());
      put_le(out, t.type, 4);
      layout_.info_offset_at.push_back(out.size());
      put_le(out, offset, 8);
      layout_.offsets.push_back(offset);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    if (!tensors_.empty()) {
      out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
      layout_.data_at = out.size();
      for (const Tensor& t : tensors_) {
        out += t.data;
        out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
      }
    }
    return out;
  }
  const Layout& layout() const { return layout_; }

  void write(const std::filesystem::path& path, bool write_alignment = true) {
    const std::string b = bytes(write_alignment);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
    if (!f) throw std::runtime_error("cannot write " + path.string());
  }

  // Writes the model as llama.cpp's split files "<prefix>-0000i-of-0000n.gguf" in `dir`: the metadata in the
  // first shard with split.no (u16), split.count (u16) and split.tensors.count (i32), as gguf-split writes
  // them; tensor t goes to shard shard_of[t]. Returns the first shard's path.
  std::filesystem::path write_split(const std::filesystem::path& dir, const std::string& prefix, int count,
                                    const std::vector<int>& shard_of) {
    std::filesystem::path first;
    for (int s = 0; s < count; ++s) {
      GgufWriter shard;
      shard.version = version;
      shard.alignment = alignment;
      if (s == 0) shard.kvs_ = kvs_;
      shard.add("split.no", gguf_u16(static_cast<uint16_t>(s)));
      shard.add("split.count", gguf_u16(static_cast<uint16_t>(count)));
      shard.add("split.tensors.count", gguf_i32(static_cast<int32_t>(tensors_.size())));
      for (size_t t = 0; t < tensors_.size(); ++t) {
        if (shard_of.at(t) == s) shard.tensors_.push_back(tensors_[t]);
      }
      char tail[32];
      std::snprintf(tail, sizeof(tail), "-%05d-of-%05d.gguf", s + 1, count);
      const std::filesystem::path p = dir / (prefix + tail);
      shard.write(p);
      if (s == 0) first = p;
    }
    return first;
  }

 private:
  std::vector<std::pair<std::string, GgufValueBytes>> kvs_;
  std::vector<Tensor> tensors_;
  Layout layout_;
};

// Overwrites `bytes` little-endian bytes of `file` at `at` with `v`.
inline void patch_le(std::string& file, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    file[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace moe::testing

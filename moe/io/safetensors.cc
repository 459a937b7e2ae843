#include "moe/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace moe::io {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors payloads are little-endian");

using json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
// The Hugging Face reader refuses headers above 100 MB; so do we, before handing them to the JSON parser.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// Element size of every dtype of the safetensors specification (nullopt: unknown dtype name).
std::optional<size_t> element_size(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return std::nullopt;
}

std::optional<kernels::DType> supported_dtype(std::string_view dtype) {
  if (dtype == "F32") return kernels::DType::kF32;
  if (dtype == "BF16") return kernels::DType::kBF16;
  if (dtype == "F16") return kernels::DType::kF16;
  return std::nullopt;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// prod(shape), or nullopt on overflow of int64.
std::optional<uint64_t> element_count(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(d)) {
      return std::nullopt;
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& what) {
  throw std::invalid_argument("safetensors file " + path.string() + ": " + what);
}

[[noreturn]] void os_error(const std::filesystem::path& path, const std::string& what, int err) {
  throw IoError("safetensors file " + path.string() + ": " + what + ": " + std::strerror(err));
}

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof(v));
  return v;  // little-endian host (static_assert above)
}

}  // namespace

std::string_view safetensors_dtype_name(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kF32:
      return "F32";
    case kernels::DType::kBF16:
      return "BF16";
    case kernels::DType::kF16:
      return "F16";
    case kernels::DType::kFP8:
      return "F8_E4M3";
    default:  // the block types have no safetensors dtype
      return "?";
  }
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) os_error(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    os_error(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    bad(path, S_ISDIR(st.st_mode) ? "is a directory, not a file" : "not a regular file");
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    bad(path, "truncated file: " + std::to_string(file_bytes) +
                  " bytes, but the 8-byte header length alone needs 8");
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) os_error(path, "cannot mmap " + std::to_string(file_bytes) + " bytes", map_err);
  map_ = map;
  map_bytes_ = file_bytes;

  // From here on the destructor does not run if we throw, so unmap explicitly.
  try {
    const auto* base = static_cast<const std::byte*>(map_);
    const uint64_t header_bytes = read_u64_le(base);
    if (header_bytes > file_bytes - 8) {
      bad(path, "header length " + std::to_string(header_bytes) + " larger than the file (" +
                    std::to_string(file_bytes) + " bytes, so at most " + std::to_string(file_bytes - 8) +
                    "): truncated or not a safetensors file");
    }
    if (header_bytes > kMaxHeaderBytes) {
      bad(path, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                    std::to_string(kMaxHeaderBytes) + " bytes");
    }
    const auto* header_begin = reinterpret_cast<const char*>(base + 8);
    const std::byte* data = base + 8 + header_bytes;
    const uint64_t data_bytes = file_bytes - 8 - header_bytes;

    json header;
    try {
      header = json::parse(header_begin, header_begin + header_bytes);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number that overflows
      bad(path, std::string("invalid JSON header: ") + e.what());
    }
    if (!header.is_object()) bad(path, "JSON header is not an object");

    entries_.reserve(header.size());
    for (const auto& [name, value] : header.items()) {
      if (name == kMetadataKey) {
        if (!value.is_object()) bad(path, "__metadata__ is not an object");
        for (const auto& [key, v] : value.items()) {
          if (!v.is_string()) bad(path, "__metadata__ entry '" + key + "' is not a string");
          metadata_.emplace(key, v.get<std::string>());
        }
        continue;
      }
      const std::string where = "tensor '" + name + "'";
      if (!value.is_object()) bad(path, where + ": header entry is not an object");
      const auto dtype_it = value.find("dtype");
      const auto shape_it = value.find("shape");
      const auto offsets_it = value.find("data_offsets");
      if (dtype_it == value.end() || !dtype_it->is_string())
        bad(path, where + ": missing or non-string dtype");
      if (shape_it == value.end() || !shape_it->is_array()) bad(path, where + ": missing or non-array shape");
      if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
        bad(path, where + ": data_offsets must be an array [begin, end]");
      }

      Entry entry;
      entry.info.name = name;
      entry.file_dtype = dtype_it->get<std::string>();
      for (const auto& d : *shape_it) {
        // nlohmann parses non-negative integers as unsigned and negative ones as signed.
        if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
          bad(path,
              where + ": shape " + shape_it->dump() + " has a dimension that is not a non-negative integer");
        }
        entry.info.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
      }
      for (const auto& o : *offsets_it) {
        if (!o.is_number_unsigned()) {
          bad(path, where + ": data_offsets " + offsets_it->dump() + " are not non-negative integers");
        }
      }
      const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
      const uint64_t end = (*offsets_it)[1].get<uint64_t>();
      if (begin > end || end > data_bytes) {
        bad(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                      "] out of range of the data area (" + std::to_string(data_bytes) + " bytes)");
      }
      const auto count = element_count(entry.info.shape);
      if (!count) bad(path, where + ": shape " + shape_string(entry.info.shape) + " overflows");
      const auto size = element_size(entry.file_dtype);
      if (size) {
        if (*count > std::numeric_limits<uint64_t>::max() / *size || *count * *size != end - begin) {
          bad(path,
              where + ": " + std::to_string(end - begin) + " bytes but shape " +
                  shape_string(entry.info.shape) + " of " + entry.file_dtype + " needs " +
                  (*count > std::numeric_limits<uint64_t>::max() / *size ? std::string("more than 2^64")
                                                                         : std::to_string(*count * *size)));
        }
      }
      const auto dtype = supported_dtype(entry.file_dtype);
      entry.supported = dtype.has_value();
      entry.info.dtype = dtype.value_or(kernels::DType::kF32);
      entry.info.data = data + begin;
      entry.info.nbytes = static_cast<size_t>(end - begin);
      entries_.push_back(std::move(entry));
    }
    // nlohmann::json keeps object keys sorted, but do not rely on it.
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.info.name < b.info.name; });
    for (size_t i = 1; i < entries_.size(); ++i) {
      if (entries_[i].info.name == entries_[i - 1].info.name) {
        bad(path, "duplicate tensor '" + entries_[i].info.name + "'");
      }
    }
  } catch (...) {
    unmap();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  unmap();
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      entries_(std::move(other.entries_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    entries_ = std::move(other.entries_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

const SafetensorsFile::Entry* SafetensorsFile::lookup(std::string_view name) const {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const Entry& e, std::string_view n) { return e.info.name < n; });
  if (it == entries_.end() || it->info.name != name) return nullptr;
  return &*it;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const Entry* e = lookup(name);
  if (e == nullptr) return nullptr;
  if (!e->supported) {
    bad(path_, "tensor '" + std::string(name) + "' has unsupported dtype " + e->file_dtype +
                   " (supported: F32, BF16, F16)");
  }
  return &e->info;
}

const TensorInfo& SafetensorsFile::get(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) bad(path_, "no tensor named '" + std::string(name) + "'");
  return *info;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return lookup(name) != nullptr;
}

std::optional<RawTensor> SafetensorsFile::raw(std::string_view name) const {
  const Entry* e = lookup(name);
  if (e == nullptr) return std::nullopt;
  return RawTensor{&e->info.name, &e->file_dtype, &e->info.shape,
                   e->info.data,  e->info.nbytes, element_size(e->file_dtype).value_or(0)};
}

const std::string& SafetensorsFile::file_dtype(std::string_view name) const {
  const Entry* e = lookup(name);
  if (e == nullptr) bad(path_, "no tensor named '" + std::string(name) + "'");
  return e->file_dtype;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.info.name);
  return out;
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = "write_safetensors " + path.string();
  // Layout order: largest element first (keeps every tensor aligned to its element size), then by name.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto size_of = [](const TensorToWrite& t) { return element_size(t.dtype).value_or(1); };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t sa = size_of(tensors[a]), sb = size_of(tensors[b]);
    if (sa != sb) return sa > sb;
    return tensors[a].name < tensors[b].name;
  });

  json header = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const TensorToWrite& t = tensors[i];
    if (t.name.empty()) throw std::invalid_argument(where + ": empty tensor name");
    if (t.name == kMetadataKey)
      throw std::invalid_argument(where + ": a tensor may not be called __metadata__");
    if (header.contains(t.name)) throw std::invalid_argument(where + ": duplicate tensor '" + t.name + "'");
    for (int64_t d : t.shape) {
      if (d < 0) {
        throw std::invalid_argument(where + ": tensor '" + t.name + "' has negative dimension in shape " +
                                    shape_string(t.shape));
      }
    }
    const auto count = element_count(t.shape);
    if (!count) throw std::invalid_argument(where + ": tensor '" + t.name + "' shape overflows");
    if (const auto size = element_size(t.dtype); size && *count * *size != t.bytes.size()) {
      throw std::invalid_argument(where + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) +
                                  " bytes but shape " + shape_string(t.shape) + " of " + t.dtype + " needs " +
                                  std::to_string(*count * *size));
    }
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(where + ": cannot create " + tmp.string() + ": " + std::strerror(errno));
    const uint64_t header_len = header_text.size();
    out.write(reinterpret_cast<const char*>(&header_len), sizeof(header_len));
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    for (size_t i : order) {
      const auto bytes = tensors[i].bytes;
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    out.flush();
    if (!out) throw IoError(where + ": write to " + tmp.string() + " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw IoError(where + ": cannot rename " + tmp.string() + ": " + ec.message());
  }
}

}  // namespace moe::io

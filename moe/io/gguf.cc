#include "moe/io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace moe::io {

namespace {

constexpr uint64_t kHeaderBytes = 24;     // magic, version, tensor count, metadata count
constexpr uint64_t kMinEntryBytes = 14;   // key length, one key byte, value type, one value byte
constexpr uint64_t kMinTensorBytes = 25;  // name length, one name byte, n_dims, type, offset
constexpr uint64_t kMaxKeyBytes = 65535;  // the specification's limit on keys
constexpr uint64_t kMaxNameBytes = 64;    // ... and on tensor names
constexpr int kMaxArrayDepth = 8;         // arrays of arrays of ...
constexpr int kMaxDims = 4;               // GGML_MAX_DIMS

uint64_t load_le(const std::byte* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(std::to_integer<uint8_t>(p[i])) << (8 * i);
  return v;
}

// The end of a value of `type` that starts at p (in a header already validated by GgufParser).
const std::byte* skip_value(const std::byte* p, GgufValueType type) {
  if (const size_t fixed = gguf_value_type_size(type)) return p + fixed;
  if (type == GgufValueType::kString) return p + 8 + load_le(p, 8);
  const auto element = static_cast<GgufValueType>(load_le(p, 4));
  const uint64_t count = load_le(p + 4, 8);
  p += 12;
  if (const size_t fixed = gguf_value_type_size(element)) return p + count * fixed;
  for (uint64_t i = 0; i < count; ++i) p = skip_value(p, element);
  return p;
}

// Indices 0..n-1 sorted by key(i); throws naming the first key that appears twice.
template <class Key>
std::vector<uint32_t> sorted_unique(size_t n, Key key, const std::string& where, const char* what) {
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  for (size_t i = 1; i < order.size(); ++i) {
    if (key(order[i]) == key(order[i - 1])) {
      throw std::invalid_argument(where + ": the " + what + " '" + gguf_printable(key(order[i])) +
                                  "' appears twice");
    }
  }
  return order;
}

}  // namespace

std::string gguf_printable(std::string_view text, size_t max) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max) return out + "...";
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static const char* digits = "0123456789abcdef";
      out += "\\x";
      out.push_back(digits[c >> 4]);
      out.push_back(digits[c & 15]);
    }
  }
  return out;
}

// Reads the header of a GGUF file out of a byte span, checking every size against what is left.
class GgufParser {
 public:
  GgufParser(std::span<const std::byte> bytes, const std::string& where) : bytes_(bytes), where_(where) {}

  GgufContents parse() {
    GgufContents c;
    if (bytes_.size() < kHeaderBytes) {
      fail("is " + std::to_string(bytes_.size()) + " bytes, too short for a GGUF header (" +
           std::to_string(kHeaderBytes) + " bytes: magic, version, tensor and metadata counts)");
    }
    if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
      fail("is not a GGUF file: its magic is '" +
           gguf_printable(std::string_view(reinterpret_cast<const char*>(bytes_.data()), 4)) +
           "' (expected 'GGUF')");
    }
    pos_ = 4;
    c.version = static_cast<uint32_t>(u(4, "the version"));
    check_version(c.version);
    const uint64_t tensor_count = u(8, "the tensor count");
    const uint64_t kv_count = u(8, "the metadata count");
    if (kv_count > left() / kMinEntryBytes) {
      fail("says it has " + std::to_string(kv_count) + " metadata entries, but the " +
           std::to_string(left()) + " bytes after its header hold at most " +
           std::to_string(left() / kMinEntryBytes));
    }
    c.metadata.reserve(static_cast<size_t>(kv_count));
    for (uint64_t i = 0; i < kv_count; ++i) {
      const std::string what = "metadata entry " + std::to_string(i);
      const std::string_view key = string(what + "'s key");
      if (key.empty()) fail(what + " has an empty key");
      if (key.size() > kMaxKeyBytes) {
        fail(what + "'s key is " + std::to_string(key.size()) + " bytes (at most " +
             std::to_string(kMaxKeyBytes) + ")");
      }
      const std::string key_what = "metadata '" + gguf_printable(key) + "'";
      const uint32_t type = static_cast<uint32_t>(u(4, key_what + "'s value type"));
      c.metadata.push_back({key, value(type, key_what, 0)});
    }
    c.alignment = alignment(c.metadata);
    if (tensor_count > left() / kMinTensorBytes) {
      fail("says it has " + std::to_string(tensor_count) + " tensors, but the " + std::to_string(left()) +
           " bytes after its metadata hold at most " + std::to_string(left() / kMinTensorBytes) +
           " tensor infos");
    }
    c.tensors.reserve(static_cast<size_t>(tensor_count));
    for (uint64_t i = 0; i < tensor_count; ++i) c.tensors.push_back(tensor_info(i, c.alignment));
    if (!c.tensors.empty()) {
      const uint64_t pad = (c.alignment - pos_ % c.alignment) % c.alignment;
      if (pad > left()) {
        fail("ends inside the padding before its data section (the tensor infos end at byte " +
             std::to_string(pos_) + ", general.alignment is " + std::to_string(c.alignment) + ")");
      }
      c.data_offset = pos_ + pad;
      place_tensors(c);
    }
    c.metadata_by_key = sorted_unique(
        c.metadata.size(), [&](uint32_t i) { return c.metadata[i].key; }, where_, "metadata key");
    c.tensors_by_name = sorted_unique(
        c.tensors.size(), [&](uint32_t i) { return c.tensors[i].name; }, where_, "tensor name");
    return c;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw std::invalid_argument(where_ + ": " + what); }

  uint64_t left() const { return bytes_.size() - pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > left()) {
      fail(what + " at byte " + std::to_string(pos_) + " needs " + std::to_string(n) +
           " bytes but the file ends at byte " + std::to_string(bytes_.size()));
    }
  }

  uint64_t u(size_t n, const std::string& what) {
    need(n, what);
    const uint64_t v = load_le(bytes_.data() + pos_, n);
    pos_ += n;
    return v;
  }

  std::string_view string(const std::string& what) {
    const uint64_t len = u(8, what + "'s length");
    if (len > left()) {
      fail(what + ": a string of " + std::to_string(len) + " bytes at byte " + std::to_string(pos_) +
           ", but only " + std::to_string(left()) + " bytes are left in the file");
    }
    const std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  void check_version(uint32_t version) const {
    if (version == 2 || version == 3) return;
    const uint32_t swapped = __builtin_bswap32(version);
    if ((version & 0xffff) == 0 && (swapped == 2 || swapped == 3)) {
      fail("is a big-endian GGUF file (its version reads as " + std::to_string(version) +
           "); this reader reads little-endian files (supported versions: 2, 3)");
    }
    if (version == 1) {
      fail("is GGUF version 1, which is not supported (its counts are 32-bit; supported versions: 2, 3)");
    }
    fail("is GGUF version " + std::to_string(version) +
         ", which is not supported (supported versions: 2, 3)");
  }

  GgufValueType value_type(uint32_t type, const std::string& what) const {
    if (type >= kGgufValueTypeCount) {
      fail(what + " has the value type " + std::to_string(type) + ", which GGUF does not define (0-" +
           std::to_string(kGgufValueTypeCount - 1) + ")");
    }
    return static_cast<GgufValueType>(type);
  }

  GgufValue value(uint32_t raw_type, const std::string& what, int depth) {
    GgufValue v;
    v.type_ = value_type(raw_type, what);
    switch (v.type_) {
      case GgufValueType::kString: {
        const std::string_view s = string(what);
        v.data_ = reinterpret_cast<const std::byte*>(s.data());
        v.bytes_ = s.size();
        return v;
      }
      case GgufValueType::kArray:
        return array(what, depth);
      case GgufValueType::kBool: {
        v.bits_ = u(1, what);
        if (v.bits_ > 1) fail(what + " is a bool of value " + std::to_string(v.bits_) + " (must be 0 or 1)");
        return v;
      }
      default:
        v.bits_ = u(gguf_value_type_size(v.type_), what);
        return v;
    }
  }

  GgufValue array(const std::string& what, int depth) {
    if (depth >= kMaxArrayDepth) {
      fail(what + " nests arrays more than " + std::to_string(kMaxArrayDepth) + " deep");
    }
    GgufValue v;
    v.type_ = GgufValueType::kArray;
    v.element_type_ = value_type(static_cast<uint32_t>(u(4, what + "'s element type")), what + "'s elements");
    v.count_ = u(8, what + "'s element count");
    const size_t fixed = gguf_value_type_size(v.element_type_);
    // A string is at least its 8-byte length, an array its 12-byte type and count.
    const uint64_t min_bytes = fixed ? fixed : v.element_type_ == GgufValueType::kString ? 8 : 12;
    if (v.count_ > left() / min_bytes) {
      fail(what + " is an array of " + std::to_string(v.count_) + " " +
           gguf_value_type_name(static_cast<uint32_t>(v.element_type_)) + " values, but only " +
           std::to_string(left()) + " bytes are left in the file");
    }
    const uint64_t begin = pos_;
    v.data_ = bytes_.data() + pos_;
    if (fixed) {
      pos_ += v.count_ * fixed;
      if (v.element_type_ == GgufValueType::kBool) {
        for (uint64_t i = 0; i < v.count_; ++i) {
          const auto b = std::to_integer<uint8_t>(v.data_[i]);
          if (b > 1) {
            fail(what + "[" + std::to_string(i) + "] is a bool of value " + std::to_string(b) +
                 " (must be 0 or 1)");
          }
        }
      }
    } else {
      for (uint64_t i = 0; i < v.count_; ++i) {
        value(static_cast<uint32_t>(v.element_type_), what + "[" + std::to_string(i) + "]", depth + 1);
      }
    }
    v.bytes_ = static_cast<size_t>(pos_ - begin);
    return v;
  }

  uint32_t alignment(const std::vector<GgufFile::Entry>& metadata) const {
    for (const GgufFile::Entry& e : metadata) {
      if (e.key != "general.alignment") continue;
      if (e.value.type() != GgufValueType::kU32) {
        fail("general.alignment must be a u32 (got " + e.value.describe() + ")");
      }
      const uint64_t a = *e.value.as_uint();
      if (a == 0 || (a & (a - 1)) != 0) {
        fail("general.alignment = " + std::to_string(a) + " is not a power of two");
      }
      return static_cast<uint32_t>(a);
    }
    return 32;  // the specification's default
  }

  GgufTensorInfo tensor_info(uint64_t i, uint32_t alignment) {
    GgufTensorInfo t;
    const std::string what = "tensor info " + std::to_string(i);
    t.name = string(what + "'s name");
    if (t.name.empty()) fail(what + " has an empty name");
    const std::string name = "tensor '" + gguf_printable(t.name) + "'";
    if (t.name.size() > kMaxNameBytes) {
      fail(name + ": its name is " + std::to_string(t.name.size()) + " bytes (at most " +
           std::to_string(kMaxNameBytes) + ")");
    }
    const uint64_t n_dims = u(4, name + "'s dimension count");
    if (n_dims > kMaxDims) {
      fail(name + " has " + std::to_string(n_dims) + " dimensions (at most " + std::to_string(kMaxDims) +
           ")");
    }
    t.n_dims = static_cast<int>(n_dims);
    uint64_t elements = 1;
    bool overflow = false;
    std::string dims;
    for (int d = 0; d < t.n_dims; ++d) {
      const uint64_t n = u(8, name + "'s dimension " + std::to_string(d));
      dims += (d ? ", " : "") + std::to_string(n);
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        overflow = true;
      } else {
        t.ne[d] = static_cast<int64_t>(n);
        if (n != 0 && elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n)
          overflow = true;
        elements *= n;
      }
    }
    if (overflow) fail(name + ": the dimensions [" + dims + "] overflow a 64-bit element count");
    const uint32_t type = static_cast<uint32_t>(u(4, name + "'s type"));
    std::string removed;
    const std::optional<GgufTensorTypeInfo> info = gguf_tensor_type_info(type, &removed);
    if (!info) {
      if (!removed.empty()) {
        fail(name + " has the ggml type " + std::to_string(type) + " (" + removed +
             "), which was removed from GGUF files");
      }
      fail(name + " has the ggml type " + std::to_string(type) + ", which ggml does not define");
    }
    t.type = type;
    t.type_info = *info;
    if (t.ne[0] % info->block_elements != 0) {
      fail(name + ": " + std::string(info->name) + " stores rows in blocks of " +
           std::to_string(info->block_elements) + " elements, but its rows (ne[0]) have " +
           std::to_string(t.ne[0]));
    }
    const uint64_t blocks = elements / static_cast<uint64_t>(info->block_elements);
    const uint64_t block_bytes = static_cast<uint64_t>(info->block_bytes);
    if (blocks > std::numeric_limits<uint64_t>::max() / block_bytes ||
        blocks * block_bytes > std::numeric_limits<size_t>::max()) {
      fail(name + ": [" + dims + "] of " + std::string(info->name) + " is more bytes than 64 bits count");
    }
    t.nbytes = blocks * block_bytes;
    t.offset = u(8, name + "'s data offset");
    if (t.offset % alignment != 0) {
      fail(name + ": its data offset " + std::to_string(t.offset) +
           " is not a multiple of general.alignment (" + std::to_string(alignment) + ")");
    }
    return t;
  }

  // Turns data-section offsets into file offsets and pointers; every tensor inside the file, none
  // overlapping.
  void place_tensors(GgufContents& c) const {
    const uint64_t size = bytes_.size();
    for (GgufTensorInfo& t : c.tensors) {
      const std::string name = "tensor '" + gguf_printable(t.name) + "'";
      const uint64_t room = size - c.data_offset;
      if (t.offset > room || t.nbytes > room - t.offset) {
        fail(name + ": its " + std::to_string(t.nbytes) + " bytes at data offset " +
             std::to_string(t.offset) + " end past the end of the file (the data section starts at byte " +
             std::to_string(c.data_offset) + ", the file has " + std::to_string(size) + ")");
      }
      t.offset += c.data_offset;
      t.data = bytes_.data() + t.offset;
    }
    std::vector<const GgufTensorInfo*> order;
    for (const GgufTensorInfo& t : c.tensors) {
      if (t.nbytes > 0) order.push_back(&t);
    }
    std::sort(order.begin(), order.end(),
              [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensorInfo& a = *order[i - 1];
      const GgufTensorInfo& b = *order[i];
      if (a.offset + a.nbytes > b.offset) {
        fail("tensors '" + gguf_printable(a.name) + "' (bytes " + std::to_string(a.offset) + "-" +
             std::to_string(a.offset + a.nbytes) + ") and '" + gguf_printable(b.name) + "' (bytes " +
             std::to_string(b.offset) + "-" + std::to_string(b.offset + b.nbytes) + ") overlap");
      }
    }
  }

  std::span<const std::byte> bytes_;
  const std::string& where_;
  uint64_t pos_ = 0;
};

GgufContents parse_gguf(std::span<const std::byte> bytes, const std::string& where) {
  return GgufParser(bytes, where).parse();
}

std::optional<int64_t> GgufValue::as_int() const {
  switch (type_) {
    case GgufValueType::kU8:
    case GgufValueType::kU16:
    case GgufValueType::kU32:
      return static_cast<int64_t>(bits_);
    case GgufValueType::kU64:
      if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(bits_);
    case GgufValueType::kI8:
      return static_cast<int8_t>(bits_);
    case GgufValueType::kI16:
      return static_cast<int16_t>(bits_);
    case GgufValueType::kI32:
      return static_cast<int32_t>(bits_);
    case GgufValueType::kI64:
      return static_cast<int64_t>(bits_);
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> GgufValue::as_uint() const {
  if (type_ == GgufValueType::kU64) return bits_;
  const std::optional<int64_t> v = as_int();
  if (!v || *v < 0) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

std::optional<double> GgufValue::as_float() const {
  if (type_ == GgufValueType::kF32) {
    const auto b = static_cast<uint32_t>(bits_);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  if (type_ == GgufValueType::kF64) {
    double d;
    std::memcpy(&d, &bits_, 8);
    return d;
  }
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (type_ != GgufValueType::kBool) return std::nullopt;
  return bits_ != 0;
}

std::optional<std::string_view> GgufValue::as_string() const {
  if (type_ != GgufValueType::kString) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(data_), bytes_);
}

std::vector<GgufValue> GgufValue::elements() const {
  std::vector<GgufValue> out;
  if (type_ != GgufValueType::kArray) return out;
  out.reserve(static_cast<size_t>(count_));
  const size_t fixed = gguf_value_type_size(element_type_);
  const std::byte* p = data_;
  for (uint64_t i = 0; i < count_; ++i) {
    GgufValue e;
    e.type_ = element_type_;
    const std::byte* end = skip_value(p, element_type_);
    if (fixed) {
      e.bits_ = load_le(p, fixed);
    } else if (element_type_ == GgufValueType::kString) {
      e.data_ = p + 8;
      e.bytes_ = static_cast<size_t>(end - e.data_);
    } else {  // a nested array: its element type and count, then its elements
      e.element_type_ = static_cast<GgufValueType>(load_le(p, 4));
      e.count_ = load_le(p + 4, 8);
      e.data_ = p + 12;
      e.bytes_ = static_cast<size_t>(end - e.data_);
    }
    out.push_back(e);
    p = end;
  }
  return out;
}

GgufValue GgufValue::element(uint64_t i) const {
  if (type_ != GgufValueType::kArray || i >= count_) return GgufValue{};
  const size_t fixed = gguf_value_type_size(element_type_);
  if (fixed) {
    GgufValue e;
    e.type_ = element_type_;
    e.bits_ = load_le(data_ + i * fixed, fixed);
    return e;
  }
  return elements()[static_cast<size_t>(i)];
}

std::string GgufValue::describe() const {
  std::ostringstream s;
  switch (type_) {
    case GgufValueType::kString:
      s << "string '" << gguf_printable(*as_string(), 60) << "'";
      break;
    case GgufValueType::kArray:
      s << "array of " << count_ << " " << gguf_value_type_name(static_cast<uint32_t>(element_type_));
      break;
    case GgufValueType::kBool:
      s << "bool " << (bits_ ? "true" : "false");
      break;
    case GgufValueType::kF32:
    case GgufValueType::kF64:
      s << gguf_value_type_name(static_cast<uint32_t>(type_)) << " " << *as_float();
      break;
    case GgufValueType::kU64:
      s << "u64 " << bits_;
      break;
    default:
      s << gguf_value_type_name(static_cast<uint32_t>(type_)) << " " << *as_int();
      break;
  }
  return s.str();
}

std::string GgufTensorInfo::shape_text() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

GgufFile::GgufFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open " + path.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError("cannot stat " + path.string() + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError("cannot read " + path.string() + ": not a regular file");
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ > 0) {
    map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      const int err = errno;
      map_ = nullptr;
      ::close(fd);
      throw IoError("cannot map " + path.string() + ": " + std::strerror(err));
    }
  }
  ::close(fd);
  try {
    GgufContents c = parse_gguf(std::span<const std::byte>(static_cast<const std::byte*>(map_), map_bytes_),
                                path.string());
    version_ = c.version;
    alignment_ = c.alignment;
    data_offset_ = c.data_offset;
    metadata_ = std::move(c.metadata);
    tensors_ = std::move(c.tensors);
    metadata_by_key_ = std::move(c.metadata_by_key);
    tensors_by_name_ = std::move(c.tensors_by_name);
  } catch (...) {
    unmap();
    throw;
  }
}

GgufFile::~GgufFile() {
  unmap();
}

void GgufFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
}

GgufFile::GgufFile(GgufFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      version_(other.version_),
      alignment_(other.alignment_),
      data_offset_(other.data_offset_),
      metadata_(std::move(other.metadata_)),
      metadata_by_key_(std::move(other.metadata_by_key_)),
      tensors_(std::move(other.tensors_)),
      tensors_by_name_(std::move(other.tensors_by_name_)) {}

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    version_ = other.version_;
    alignment_ = other.alignment_;
    data_offset_ = other.data_offset_;
    metadata_ = std::move(other.metadata_);
    metadata_by_key_ = std::move(other.metadata_by_key_);
    tensors_ = std::move(other.tensors_);
    tensors_by_name_ = std::move(other.tensors_by_name_);
  }
  return *this;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = std::lower_bound(metadata_by_key_.begin(), metadata_by_key_.end(), key,
                                   [&](uint32_t i, std::string_view k) { return metadata_[i].key < k; });
  if (it == metadata_by_key_.end() || metadata_[*it].key != key) return nullptr;
  return &metadata_[*it].value;
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
  const auto it = std::lower_bound(tensors_by_name_.begin(), tensors_by_name_.end(), name,
                                   [&](uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  if (it == tensors_by_name_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

}  // namespace moe::io

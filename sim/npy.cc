#include "sim/npy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>

#include "kernels/f16.h"
#include "sim/errors.h"
#include "sim/input_file.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

// The one message for a dtype router logits cannot have (parse_npy's unknown dtypes, parse_npy_f32's int32).
std::string unsupported_logits_dtype(const std::string& descr, const std::string& name) {
  return "dtype '" + descr +
         "' is not supported: router logits must be float32 ('<f4'; float64 and float16 are converted). "
         "Convert with: python3 -c \"import numpy; a = numpy.load('" +
         name + "'); numpy.save('" + name + "', a.astype('<f4'))\"";
}

// A Python literal of the subset numpy writes in .npy headers: a dict of str keys to str, bool or a tuple of
// ints.
struct HeaderValue {
  enum class Kind { kString, kBool, kTuple } kind = Kind::kString;
  std::string str;
  bool boolean = false;
  std::vector<int64_t> tuple;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& name) : s_(text), name_(name) {}

  std::map<std::string, HeaderValue> parse_dict() {
    std::map<std::string, HeaderValue> out;
    expect('{');
    skip_space();
    while (peek() != '}') {
      const std::string key = parse_string();
      expect(':');
      out[key] = parse_value();
      skip_space();
      if (peek() == ',') {
        ++i_;
        skip_space();
      } else if (peek() != '}') {
        fail("expected ',' or '}' in the header dict");
      }
    }
    ++i_;
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw DataError("malformed .npy file '" + name_ + "': " + why + " (header: " + s_ + ")");
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  char peek() const {
    if (i_ >= s_.size()) fail("header ends early");
    return s_[i_];
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string parse_string() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    const size_t end = s_.find(quote, i_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  int64_t parse_int() {
    skip_space();
    size_t j = i_;
    while (j < s_.size() && s_[j] >= '0' && s_[j] <= '9') ++j;
    if (j == i_ || j - i_ > 15) fail("expected a dimension");
    const int64_t v = std::stoll(s_.substr(i_, j - i_));
    i_ = j;
    // numpy writes 3L on Python 2.
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;
    return v;
  }
  HeaderValue parse_value() {
    skip_space();
    HeaderValue v;
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = HeaderValue::Kind::kString;
      v.str = parse_string();
    } else if (s_.compare(i_, 4, "True") == 0) {
      v.kind = HeaderValue::Kind::kBool;
      v.boolean = true;
      i_ += 4;
    } else if (s_.compare(i_, 5, "False") == 0) {
      v.kind = HeaderValue::Kind::kBool;
      i_ += 5;
    } else if (c == '(') {
      v.kind = HeaderValue::Kind::kTuple;
      ++i_;
      skip_space();
      while (peek() != ')') {
        v.tuple.push_back(parse_int());
        skip_space();
        if (peek() == ',') {
          ++i_;
          skip_space();
        } else if (peek() != ')') {
          fail("expected ',' or ')' in the shape");
        }
      }
      ++i_;
    } else {
      fail("unsupported value in the header");
    }
    return v;
  }

  const std::string& s_;
  const std::string& name_;
  size_t i_ = 0;
};

uint32_t read_le(const std::string& bytes, size_t at, int width) {
  uint32_t v = 0;
  for (int b = width - 1; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(bytes[at + b]);
  return v;
}

}  // namespace

NpyArray parse_npy(const std::string& bytes, const std::string& name) {
  auto fail = [&](const std::string& why) -> void {
    throw DataError("bad .npy file '" + name + "': " + why);
  };
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0) fail("not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3) {
    fail("unsupported format version " + std::to_string(major) + "." + std::to_string(minor));
  }
  const int len_width = major == 1 ? 2 : 4;
  if (bytes.size() < static_cast<size_t>(8 + len_width)) fail("truncated header");
  const size_t header_len = read_le(bytes, 8, len_width);
  const size_t data_begin = 8 + len_width + header_len;
  if (bytes.size() < data_begin) fail("truncated header");
  const std::string header = bytes.substr(8 + len_width, header_len);
  const auto dict = HeaderParser(header, name).parse_dict();

  auto field = [&](const std::string& key, HeaderValue::Kind kind) -> const HeaderValue& {
    const auto it = dict.find(key);
    if (it == dict.end()) fail("header has no '" + key + "'");
    if (it->second.kind != kind) fail("header field '" + key + "' has the wrong type");
    return it->second;
  };
  NpyArray a;
  const std::string& descr = field("descr", HeaderValue::Kind::kString).str;
  const bool little = std::endian::native == std::endian::little;
  auto is = [&](const char* code) {  // "f4": '<f4', or '=f4' / 'f4' on a little-endian host
    return descr == std::string("<") + code ||
           (little && (descr == std::string("=") + code || descr == code));
  };
  // float64 and float16 are converted to float32 words (a.converted_from says so).
  size_t itemsize = 4;
  if (is("f4")) {
    a.dtype = "f4";
  } else if (is("i4")) {
    a.dtype = "i4";
  } else if (is("f8") || is("f2")) {
    a.dtype = "f4";
    itemsize = is("f8") ? 8 : 2;
    a.converted_from = itemsize == 8 ? "float64" : "float16";
  } else {
    fail(unsupported_logits_dtype(descr, name));
  }
  if (field("fortran_order", HeaderValue::Kind::kBool).boolean) {
    fail("fortran_order is True: save a C-ordered array (numpy.ascontiguousarray)");
  }
  a.shape = field("shape", HeaderValue::Kind::kTuple).tuple;
  int64_t count = 1;
  std::string dims;
  for (int64_t d : a.shape) {
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    if (d < 0 || (d > 0 && count > kMaxNpyValues / d)) {
      fail("array too large: shape (" + dims + "" + ") has more than 2^31 - 1 values");
    }
    count *= d;
  }
  const size_t data_bytes = static_cast<size_t>(count) * itemsize;
  if (bytes.size() - data_begin < data_bytes) {
    fail("truncated: shape (" + dims + ") needs " + std::to_string(data_bytes) +
         " data bytes but the file has " + std::to_string(bytes.size() - data_begin));
  }
  if (bytes.size() - data_begin > data_bytes) {
    fail("file is longer than shape (" + dims + ") needs (" +
         std::to_string(bytes.size() - data_begin - data_bytes) + " extra bytes)");
  }
  if (!little && itemsize != 4) fail("float64 and float16 arrays are converted on little-endian hosts only");
  a.words.resize(static_cast<size_t>(count));
  const char* data = bytes.data() + data_begin;
  const size_t cols = a.shape.empty() ? 1 : static_cast<size_t>(std::max<int64_t>(1, a.shape.back()));
  if (itemsize == 8) {
    for (size_t i = 0; i < a.words.size(); ++i) {
      double v;
      std::memcpy(&v, data + 8 * i, 8);
      if (std::isfinite(v) && std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
        fail("float64 value " + format_double(v) + " at row " + std::to_string(i / cols) + ", column " +
             std::to_string(i % cols) + " does not fit float32");
      }
      a.words[i] = std::bit_cast<uint32_t>(static_cast<float>(v));
    }
    return a;
  }
  if (itemsize == 2) {
    for (size_t i = 0; i < a.words.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      a.words[i] = std::bit_cast<uint32_t>(kernels::f16_to_f32(h));
    }
    return a;
  }
  if (data_bytes > 0) std::memcpy(a.words.data(), data, data_bytes);  // an empty array has no buffer
  if (!little) {
    for (uint32_t& b : a.words) b = (b >> 24) | ((b >> 8) & 0xff00u) | ((b << 8) & 0xff0000u) | (b << 24);
  }
  return a;
}

namespace {

// The largest valid file: kMaxNpyValues float64 values after a header of at most 4 GiB (format 2.x/3.x).
constexpr uint64_t kMaxNpyFileBytes = uint64_t{12} + 0xffffffffull + static_cast<uint64_t>(kMaxNpyValues) * 8;

}  // namespace

NpyArray read_npy(const std::string& path) {
  return parse_npy(read_input_file(path, ".npy file", kMaxNpyFileBytes), path);
}

LogitsMatrix parse_npy_f32(const std::string& bytes, const std::string& name) {
  const NpyArray a = parse_npy(bytes, name);
  auto fail = [&](const std::string& why) { throw DataError("bad .npy file '" + name + "': " + why); };
  if (a.dtype != "f4") {
    fail(unsupported_logits_dtype("<" + a.dtype, name));
  }
  if (a.shape.size() != 2)
    fail("expected a 2-D array [tokens, experts], got " + std::to_string(a.shape.size()) + "-D");
  LogitsMatrix m;
  m.rows = a.shape[0];
  m.cols = a.shape[1];
  if (m.rows < 1 || m.cols < 1)
    fail("empty array (shape " + std::to_string(m.rows) + "x" + std::to_string(m.cols) + ")");
  m.values.resize(a.words.size());
  std::memcpy(m.values.data(), a.words.data(), a.words.size() * 4);
  m.converted_from = a.converted_from;
  return m;
}

LogitsMatrix read_npy_f32(const std::string& path) {
  return parse_npy_f32(read_input_file(path, "logits file", kMaxNpyFileBytes), path);
}

void write_npy_f32(const std::string& path, const LogitsMatrix& m) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(m.rows) + ", " +
                       std::to_string(m.cols) + "), }";
  // Pad so that the data starts at a multiple of 64 bytes; the header ends with '\n'.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) throw DataError("cannot write '" + path + "'");
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  out.write(len, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(m.values.data()),
            static_cast<std::streamsize>(m.values.size() * 4));
  if (!out) throw DataError("cannot write '" + path + "'");
}

}  // namespace moe::sim

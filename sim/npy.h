// Reading router logits saved with numpy.save.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

namespace moe::sim {

struct LogitsMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;  // row-major [rows, cols]
  // The file's dtype when it was not float32 and the values were converted: "float64" or "float16"; else "".
  std::string converted_from;
};

// The most values an array may hold.
inline constexpr int64_t kMaxNpyValues = int64_t{2147483647};

// Any .npy array read as 4-byte elements: dtype "f4" (float32) or "i4" (int32), little-endian, C order, any
// shape (a 0-D array has one element); words holds the elements' bits in host order. float64 ('<f8', numpy's
// default) and float16 ('<f2') arrays are converted to "f4" (converted_from: "float64" or "float16"; float64
// rounds to nearest, and a finite value beyond float32's range is an error naming its row and column).
struct NpyArray {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint32_t> words;
  std::string converted_from;
  float f32(size_t i) const { return std::bit_cast<float>(words[i]); }
  int32_t i32(size_t i) const { return static_cast<int32_t>(words[i]); }
};
// Parses an in-memory .npy image / reads a file. Throws DataError naming the file and the problem: a missing
// path or a directory, bad magic, unsupported version, any other dtype (naming it and the numpy conversion to
// run), Fortran order, more than kMaxNpyValues values, truncated or too long.
NpyArray parse_npy(const std::string& bytes, const std::string& name);
NpyArray read_npy(const std::string& path);

// Reads a .npy file holding a 2-D float array [tokens, experts] (parse_npy's rules; float64 and float16
// converted, converted_from says so). Throws DataError as parse_npy does, and for int32, not 2-D or empty.
LogitsMatrix read_npy_f32(const std::string& path);

// Parses an in-memory .npy image (the whole file); `name` appears in error messages.
LogitsMatrix parse_npy_f32(const std::string& bytes, const std::string& name);

// Writes a float32 [rows, cols] array as .npy version 1.0 (used by tests and examples).
void write_npy_f32(const std::string& path, const LogitsMatrix& m);

}  // namespace moe::sim

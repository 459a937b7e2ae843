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

// Any .npy array of 4-byte elements: dtype "f4" (float32) or "i4" (int32), little-endian, C order, any shape
// (a 0-D array has one element); words holds the elements' bits in host order. '<f8' (numpy's default
// float64) and '<f2' (float16) arrays are converted to "f4" (converted_from says "float64" / "float16";
// float64 rounds to nearest, and a finite value beyond float32's range is an error naming its index).
struct NpyArray {
  std::string dtype;
  std::string converted_from;
  std::vector<int64_t> shape;
  std::vector<uint32_t> words;
  float f32(size_t i) const { return std::bit_cast<float>(words[i]); }
  int32_t i32(size_t i) const { return static_cast<int32_t>(words[i]); }
};
// Parses an in-memory .npy image / reads a file: magic "\x93NUMPY", format version 1.x, 2.x or 3.x, a header
// dict with 'descr', 'fortran_order': False and a 'shape' tuple, then exactly the shape's bytes. Throws
// DataError naming the file and the problem: a missing path or a directory, bad magic, unsupported version,
// any other dtype (naming it and the numpy conversion to run), Fortran order, more than kMaxNpyValues values,
// truncated or too long.
NpyArray parse_npy(const std::string& bytes, const std::string& name);
NpyArray read_npy(const std::string& path);

// Reads a .npy file holding a 2-D float array [tokens, experts] (parse_npy's dtypes but int32; float64 and
// float16 converted): also throws DataError for an int32 array, not 2-D, or an empty one.
LogitsMatrix read_npy_f32(const std::string& path);

// Parses an in-memory .npy image (the whole file); `name` appears in error messages.
LogitsMatrix parse_npy_f32(const std::string& bytes, const std::string& name);

// Writes a float32 [rows, cols] array as .npy version 1.0 (used by tests and examples).
void write_npy_f32(const std::string& path, const LogitsMatrix& m);

}  // namespace moe::sim

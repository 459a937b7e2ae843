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
};

// Any .npy array of 4-byte elements: dtype "f4" (float32) or "i4" (int32), little-endian, C order, any shape
// (a 0-D array has one element); words holds the elements' bits in host order.
struct NpyArray {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint32_t> words;
  float f32(size_t i) const { return std::bit_cast<float>(words[i]); }
  int32_t i32(size_t i) const { return static_cast<int32_t>(words[i]); }
};
// Parses an in-memory .npy image / reads a file. Throws DataError naming the file and the problem (the
// checks of read_npy_f32 below, other dtypes refused by name).
NpyArray parse_npy(const std::string& bytes, const std::string& name);
NpyArray read_npy(const std::string& path);

// Reads a .npy file holding a 2-D float32 array: magic "\x93NUMPY", format version 1.x, 2.x or 3.x, a header
// dict with 'descr': '<f4' (or '=f4' / 'f4' on a little-endian host), 'fortran_order': False and a 2-tuple
// 'shape', then exactly rows * cols * 4 bytes. Throws DataError naming the file and the problem (bad magic,
// unsupported version, dtype other than float32 (naming it), Fortran order, not 2-D, truncated or too long).
LogitsMatrix read_npy_f32(const std::string& path);

// Parses an in-memory .npy image (the whole file); `name` appears in error messages.
LogitsMatrix parse_npy_f32(const std::string& bytes, const std::string& name);

// Writes a float32 [rows, cols] array as .npy version 1.0 (used by tests and examples).
void write_npy_f32(const std::string& path, const LogitsMatrix& m);

}  // namespace moe::sim

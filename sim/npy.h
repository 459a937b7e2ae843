// Reading router logits saved with numpy.save.
#pragma once

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

// The most values a logits array may hold.
inline constexpr int64_t kMaxNpyValues = int64_t{2147483647};

// Reads a .npy file holding a 2-D float array: magic "\x93NUMPY", format version 1.x, 2.x or 3.x, a header
// dict with 'descr', 'fortran_order': False and a 2-tuple 'shape', then exactly rows * cols * itemsize bytes.
// descr '<f4' (or '=f4' / 'f4' on a little-endian host) is read as is; '<f8' (numpy's default float64) and
// '<f2' (float16) are converted to float32 (converted_from says so; float64 rounds to nearest, and a finite
// value beyond float32's range is an error naming its row and column). Throws DataError naming the file and
// the problem: a missing path or a directory, bad magic, unsupported version, any other dtype (naming it and
// the numpy conversion to run), Fortran order, not 2-D, more than kMaxNpyValues values, truncated or too
// long.
LogitsMatrix read_npy_f32(const std::string& path);

// Parses an in-memory .npy image (the whole file); `name` appears in error messages.
LogitsMatrix parse_npy_f32(const std::string& bytes, const std::string& name);

// Writes a float32 [rows, cols] array as .npy version 1.0 (used by tests and examples).
void write_npy_f32(const std::string& path, const LogitsMatrix& m);

}  // namespace moe::sim

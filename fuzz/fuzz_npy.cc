// .npy router logits (sim/npy.h): any bytes give a matrix that fits the header's shape, or a DataError.
#include "fuzz/fuzz_util.h"
#include "sim/errors.h"
#include "sim/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const moe::sim::LogitsMatrix m = moe::sim::parse_npy_f32(moe::fuzz::as_string(data, size), "fuzz.npy");
    MOE_FUZZ_CHECK(m.rows >= 1 && m.cols >= 1);
    MOE_FUZZ_CHECK(m.values.size() == static_cast<size_t>(m.rows * m.cols));
    MOE_FUZZ_CHECK(m.converted_from.empty() || m.converted_from == "float64" ||
                   m.converted_from == "float16");
  } catch (const moe::sim::DataError&) {
  }
  return 0;
}

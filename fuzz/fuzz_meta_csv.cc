// Token-metadata CSV (sim/meta_csv.h): rows, or a DataError naming the line.
#include "fuzz/fuzz_util.h"
#include "sim/errors.h"
#include "sim/meta_csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte, when present, picks the row count the caller expects (-1: any).
  const long long expected = size > 0 ? static_cast<long long>(data[0] % 8) - 1 : -1;
  try {
    const auto rows = moe::sim::parse_meta_csv(moe::fuzz::as_string(data, size), "fuzz.csv", expected);
    MOE_FUZZ_CHECK(expected < 0 || static_cast<long long>(rows.size()) == expected);
  } catch (const moe::sim::DataError&) {
  }
  return 0;
}

// Request traces (sim/trace_reader.h), CSV and JSONL: requests within the stated bounds, or a DataError.
#include <set>

#include "fuzz/fuzz_util.h"
#include "sim/errors.h"
#include "sim/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the format (odd: JSONL), the rest is the file.
  const bool jsonl = data[0] & 1;
  try {
    const auto requests = moe::sim::parse_trace(moe::fuzz::as_string(data + 1, size - 1),
                                                jsonl ? "fuzz.jsonl" : "fuzz.csv", jsonl);
    MOE_FUZZ_CHECK(!requests.empty());
    std::set<uint64_t> ids;
    for (const auto& r : requests) {
      MOE_FUZZ_CHECK(ids.insert(r.id).second);
      MOE_FUZZ_CHECK(r.arrival_step >= 0 && r.arrival_step <= (int64_t{1} << 30));
      MOE_FUZZ_CHECK(r.prompt_len >= 1 && r.prompt_len <= (1u << 30));
      MOE_FUZZ_CHECK(r.decode_len <= (1u << 30));
    }
  } catch (const moe::sim::DataError&) {
  }
  return 0;
}

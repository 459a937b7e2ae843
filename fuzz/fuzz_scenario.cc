// TOML scenarios (sim/scenario.h) through build_config (sim/sim_config.h), which checks every setting's value
// (length distributions, skew specs, router and policy): a configuration, or a UsageError / DataError. A
// valid configuration's workload size goes through the one size check (sim/workload.h), which must refuse,
// never allocate, a workload that does not fit.
#include "fuzz/fuzz_util.h"
#include "sim/errors.h"
#include "sim/experiment.h"
#include "sim/scenario.h"
#include "sim/sim_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const moe::sim::Overrides o = moe::sim::parse_scenario(moe::fuzz::as_string(data, size), "fuzz.toml");
    const moe::sim::SimConfig c = moe::sim::build_config(o);
    MOE_FUZZ_CHECK(c.router.num_experts >= 1 && c.router.top_k >= 1 &&
                   c.router.top_k <= c.router.num_experts);
    const int ranked = moe::sim::ranks_needed(c.router, c.policy);
    MOE_FUZZ_CHECK(ranked >= c.router.top_k);
    moe::sim::check_workload_size(moe::sim::expected_footprint(c.workload), c.router.num_experts,
                                  c.router.top_k, ranked, "fuzz");
  } catch (const moe::sim::UsageError&) {
  } catch (const moe::sim::DataError&) {
  }
  return 0;
}

// Scenario files: a saved set of settings in TOML.
#pragma once

#include <string>

#include "sim/sim_config.h"

namespace moe::sim {

// Reads a TOML scenario. Every flag has a key of the same name without the dashes' prefix ("top-k = 2",
// "prompt-len = \"lognormal:mean=512,sigma=0.8\"", "json = true"). Keys may sit at the top level or in
// tables of any name (e.g. [router], [workload]): tables only group, the leaf key names the setting.
// Arrays become comma-separated lists ("capacity-factors = [0.5, 1.0]"; for "axis", each element is one
// axis). Throws DataError for a missing or malformed file (text that is not UTF-8 included, naming the
// byte), and UsageError naming the file and key for an unknown key, a key given twice, or a value of an
// unsupported type.
Overrides read_scenario(const std::string& path);

// Parses TOML text (for tests); `name` appears in messages.
Overrides parse_scenario(const std::string& text, const std::string& name);

}  // namespace moe::sim

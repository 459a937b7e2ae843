#include "sim/deploy/placement.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "moe/parallel/eplb.h"
#include "sim/errors.h"
#include "sim/input_file.h"
#include "sim/text.h"

namespace moe::sim::deploy {
namespace {

// The loads of a moe-sim JSON output: its (first run's, first point's) routing choices, else its expert load.
const nlohmann::json* loads_of(const nlohmann::json& j) {
  if (j.is_array()) return &j;
  if (!j.is_object()) return nullptr;
  if (auto r = j.find("routing"); r != j.end() && r->is_object()) {
    if (auto c = r->find("choices_per_expert"); c != r->end()) return &*c;
  }
  if (auto l = j.find("expert_load"); l != j.end()) return &*l;
  for (const char* list : {"runs", "points", "results"}) {
    if (auto it = j.find(list); it != j.end() && it->is_array() && !it->empty()) return loads_of(it->front());
  }
  return nullptr;
}

}  // namespace

bool balances_loads(Placement p) {
  return p == Placement::kEplb || p == Placement::kHierarchical || p == Placement::kGlobal;
}

parallel::ExpertPlacement make_placement(const DeployConfig& config, int num_experts, int num_groups,
                                         std::span<const float> loads) {
  const int P = config.ep_size;
  try {
    switch (config.placement) {
      case Placement::kContiguous:
        return parallel::ExpertPlacement::contiguous(num_experts, P);
      case Placement::kRoundRobin: {
        std::vector<int> owner(num_experts);
        for (int e = 0; e < num_experts; ++e) owner[e] = e % P;
        return parallel::ExpertPlacement::from_map(std::move(owner), P);
      }
      case Placement::kEplb:
      case Placement::kHierarchical:
      case Placement::kGlobal: {
        const int physical = num_experts + config.redundant_experts;
        const int nodes = config.nodes();
        parallel::ExpertReplication r =
            config.placement == Placement::kGlobal ? parallel::eplb::rebalance_global(loads, physical, P)
            : config.placement == Placement::kHierarchical
                ? parallel::eplb::rebalance_hierarchical(loads, physical, num_groups, nodes, P)
                : parallel::eplb::rebalance(loads, physical, num_groups, nodes, P);
        return parallel::ExpertPlacement::from_replication(r);
      }
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError("placement " + std::string(to_string(config.placement)) + ": " + e.what());
  }
  throw UsageError("unknown placement");
}

std::vector<float> read_loads(const std::string& path, int num_experts) {
  const std::string text = read_input_file(path, "loads file", uint64_t{1} << 30);
  const std::string where = "loads file '" + path + "'";
  std::vector<double> values;
  const std::string start = trim(text.substr(0, std::min<size_t>(text.size(), 64)));
  if (!start.empty() && (start[0] == '{' || start[0] == '[')) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(where + ": not valid JSON (" + e.what() + ")");
    }
    const nlohmann::json* list = loads_of(j);
    if (list == nullptr || !list->is_array())
      throw DataError(where + ": no per-expert loads (routing.choices_per_expert, expert_load or an array)");
    for (const nlohmann::json& v : *list) {
      if (!v.is_number()) throw DataError(where + ": a load is not a number (" + v.dump() + ")");
      values.push_back(v.get<double>());
    }
  } else {
    for (std::string_view line : lines(text)) {
      const std::string_view data = line.substr(0, line.find('#'));
      std::string cleaned(data);
      for (char& c : cleaned) {
        if (c == ',' || c == '\t' || c == '\r') c = ' ';
      }
      for (const std::string& word : split(cleaned, ' ')) {
        if (word.empty()) continue;
        try {
          values.push_back(parse_double(word, where));
        } catch (const UsageError& e) {
          throw DataError(e.what());
        }
      }
    }
  }
  if (values.empty()) throw DataError(where + ": no loads in it");
  if (values.size() != static_cast<size_t>(num_experts)) {
    throw DataError(where + " has " + std::to_string(values.size()) + " loads, the router has " +
                    std::to_string(num_experts) + " experts (one load per expert)");
  }
  std::vector<float> out;
  for (size_t e = 0; e < values.size(); ++e) {
    if (!std::isfinite(values[e]) || values[e] < 0 || values[e] > 3e38) {
      throw DataError(where + ": expert " + std::to_string(e) + "'s load " + format_double(values[e]) +
                      " is not finite and >= 0");
    }
    out.push_back(static_cast<float>(values[e]));
  }
  return out;
}

}  // namespace moe::sim::deploy

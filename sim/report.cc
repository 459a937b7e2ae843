#include "sim/report.h"

#include <algorithm>
#include <cstdio>

#include "sim/text.h"

namespace moe::sim {

void Table::print(std::ostream& out) const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      const std::string pad(width[c] - cell.size(), ' ');
      if (c > 0) s += "  ";
      s += c == 0 ? cell + pad : pad + cell;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line(header_);
  for (const auto& row : rows_) line(row);
}

void Table::print_csv(std::ostream& out) const {
  auto cell = [](const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) out << (c ? "," : "") << cell(row[c]);
    out << "\n";
  };
  line(header_);
  for (const auto& row : rows_) line(row);
}

std::string provenance_line(const SimConfig& config, Command command) {
  return std::string("# moe-sim ") + MOE_VERSION + " " + command_name(command) + " " +
         config_line(config, command);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

nlohmann::ordered_json run_stats_json(const RunStats& s, bool multi_step) {
  nlohmann::ordered_json j;
  j["steps"] = s.steps;
  j["tokens"] = s.tokens;
  j["pairs"] = s.pairs;
  j["kept"] = s.kept;
  j["rerouted"] = s.rerouted;
  j["dropped"] = s.dropped;
  j["drop_rate"] = s.drop_rate;
  j["tokens_fully_dropped"] = s.tokens_fully_dropped;
  nlohmann::ordered_json cap;
  const bool dropless = !s.expert_capacity.empty() && s.expert_capacity[0] < 0;
  if (dropless) {
    cap = nullptr;
  } else if (multi_step) {
    cap["per_step_min"] = s.step_capacity_min;
    cap["per_step_mean"] = s.step_capacity_mean;
    cap["per_step_max"] = s.step_capacity_max;
    cap["per_expert_total"] = s.expert_capacity;
  } else {
    cap["slots_per_expert"] = s.step_capacity_mean;
    cap["per_expert"] = s.expert_capacity;
  }
  j["capacity"] = cap;
  j["expert_load"] = s.expert_load;
  j["load_imbalance"] = s.load_imbalance;
  if (multi_step) {
    nlohmann::ordered_json per_step;
    per_step["drop_rate_mean"] = s.step_drop_rate_mean;
    per_step["drop_rate_max"] = s.step_drop_rate_max;
    per_step["load_imbalance_mean"] = s.step_imbalance_mean;
    per_step["load_imbalance_max"] = s.step_imbalance_max;
    per_step["peak_load_vs_nominal_mean"] = s.step_peak_load_mean;
    per_step["peak_load_vs_nominal_max"] = s.step_peak_load_max;
    j["per_step"] = per_step;
  }
  j["routing"] = routing_stats_json(s.routing);
  if (s.engine.steps > 0) j["serving"] = serving_stats_json(s);
  return j;
}

double cache_hit_rate(const serving::EngineStats& e) {
  return e.prompt_tokens > 0
             ? static_cast<double>(e.cached_prompt_tokens) / static_cast<double>(e.prompt_tokens)
             : 0.0;
}

std::string cache_key_name(const RoutingRule& rule) {
  switch (rule.scope) {
    case CapacityScope::kPrefix:
      return "tokens+salt(prefix, lookahead " + std::to_string(rule.lookahead) + ")";
    case CapacityScope::kSequence:
      return "tokens+salt(sequence: prompt length)";
    default:
      return "tokens";
  }
}

nlohmann::ordered_json serving_stats_json(const RunStats& s) {
  const serving::EngineStats& e = s.engine;
  nlohmann::ordered_json j;
  j["cache_key"] = cache_key_name(s.cache_rule);
  j["prompt_tokens"] = e.prompt_tokens;
  j["cached_prompt_tokens"] = e.cached_prompt_tokens;
  j["cache_hit_rate"] = cache_hit_rate(e);
  j["cached_tokens"] = e.cached_tokens;
  j["evictions"] = e.evictions;
  j["peak_blocks_used"] = e.peak_blocks_used;
  j["preemptions"] = e.preemptions;
  j["draft_tokens"] = e.drafted;
  j["accepted_draft_tokens"] = e.accepted;
  return j;
}

nlohmann::ordered_json routing_stats_json(const RoutingStats& r) {
  nlohmann::ordered_json j;
  j["pairs"] = r.pairs;
  j["expert_share_min"] = r.share_min;
  j["expert_share_max"] = r.share_max;
  j["load_imbalance"] = r.load_imbalance;
  j["consecutive_pairs"] = r.consecutive;
  j["same_first_rate"] = r.same_first;
  j["same_first_or_second_rate"] = r.same_first_or_second;
  j["choices_per_expert"] = r.choices;
  return j;
}

nlohmann::ordered_json probe_json(const ProbeResult& r) {
  nlohmann::ordered_json j;
  j["mode"] = r.mode;
  j["scope"] = std::string(to_string(r.policy.scope));
  j["priority"] = std::string(to_string(r.policy.priority));
  j["overflow"] = std::string(to_string(r.policy.overflow));
  j["capacity_factor"] = r.policy.capacity_factor;
  j["trials"] = r.trials;
  j["probe_pairs"] = r.probe_pairs;
  j["displaced_pairs"] = r.displaced_pairs;
  j["displacement_rate"] = r.displacement_rate;
  j["trials_displaced"] = r.trials_displaced;
  j["distinct_outcomes"] = r.distinct_outcomes;
  j["alone_drop_rate"] = r.alone_drop_rate;
  j["mean_drop_rate"] = r.mean_drop_rate;
  j["mean_batch_tokens"] = r.mean_batch_tokens;
  return j;
}

void print_run_table(std::ostream& out, const RunStats& s, int64_t num_requests, bool serving) {
  Table t({"metric", "value"});
  if (num_requests >= 0) t.add_row({"requests", std::to_string(num_requests)});
  t.add_row({"steps", std::to_string(s.steps)});
  t.add_row({"tokens", std::to_string(s.tokens)});
  t.add_row({"pairs", std::to_string(s.pairs)});
  t.add_row({"kept", std::to_string(s.kept)});
  t.add_row({"rerouted", std::to_string(s.rerouted)});
  t.add_row({"dropped", std::to_string(s.dropped)});
  t.add_row({"drop_rate", fixed(s.drop_rate)});
  t.add_row({"tokens_fully_dropped", std::to_string(s.tokens_fully_dropped)});
  const bool dropless = !s.expert_capacity.empty() && s.expert_capacity[0] < 0;
  if (dropless) {
    t.add_row({"capacity", "dropless"});
  } else if (s.steps > 1) {
    t.add_row({"capacity/step min", fixed(s.step_capacity_min, 1)});
    t.add_row({"capacity/step mean", fixed(s.step_capacity_mean, 1)});
    t.add_row({"capacity/step max", fixed(s.step_capacity_max, 1)});
  } else {
    t.add_row({"capacity (slots/expert)", fixed(s.step_capacity_mean, 1)});
  }
  t.add_row({"load_imbalance (max/mean)", fixed(s.load_imbalance)});
  if (s.steps > 1) {
    t.add_row({"step drop_rate mean", fixed(s.step_drop_rate_mean)});
    t.add_row({"step drop_rate max", fixed(s.step_drop_rate_max)});
    t.add_row({"step load_imbalance mean", fixed(s.step_imbalance_mean)});
    t.add_row({"step load_imbalance max", fixed(s.step_imbalance_max)});
    t.add_row({"step peak load / (cf*T*k/E) mean", fixed(s.step_peak_load_mean)});
    t.add_row({"step peak load / (cf*T*k/E) max", fixed(s.step_peak_load_max)});
  }
  const RoutingStats& r = s.routing;
  t.add_row({"routing: expert share min", fixed(r.share_min)});
  t.add_row({"routing: expert share max", fixed(r.share_max)});
  t.add_row({"routing: load imbalance (share max * E)", fixed(r.load_imbalance)});
  t.add_row({"routing: consecutive same first choice", fixed(r.same_first)});
  t.add_row({"routing: consecutive same first or second", fixed(r.same_first_or_second)});
  if (serving) {
    const serving::EngineStats& e = s.engine;
    t.add_row({"serving: cache key", cache_key_name(s.cache_rule)});
    t.add_row({"serving: prompt tokens from the cache", std::to_string(e.cached_prompt_tokens) + " of " +
                                                            std::to_string(e.prompt_tokens) + " (" +
                                                            fixed(cache_hit_rate(e)) + ")"});
    t.add_row({"serving: preemptions", std::to_string(e.preemptions)});
    t.add_row(
        {"serving: draft tokens accepted", std::to_string(e.accepted) + " of " + std::to_string(e.drafted)});
  }
  t.print(out);
  out << "expert_load:";
  for (int64_t l : s.expert_load) out << " " << l;
  out << "\n";
}

Table sweep_table(const std::vector<SweepPoint>& points, bool serving) {
  std::vector<std::string> header;
  if (!points.empty()) {
    for (const auto& [name, value] : points.front().axis_values) header.push_back(name);
  }
  for (const char* h :
       {"mode", "cf", "drop_rate", "dropped", "rerouted", "fully_dropped", "load_imbalance", "capacity/step",
        "step_drop_max", "peak_load_max", "share_min", "share_max", "same_first", "same_top2"}) {
    header.push_back(h);
  }
  if (serving) {
    for (const char* h : {"cache_hit", "preempted", "drafts_accepted"}) header.push_back(h);
  }
  Table t(header);
  for (const auto& p : points) {
    std::vector<std::string> row;
    for (const auto& [name, value] : p.axis_values) row.push_back(value);
    const bool dropless = !p.stats.expert_capacity.empty() && p.stats.expert_capacity[0] < 0;
    row.push_back(p.mode);
    row.push_back(format_double(p.capacity_factor));
    row.push_back(fixed(p.stats.drop_rate));
    row.push_back(std::to_string(p.stats.dropped));
    row.push_back(std::to_string(p.stats.rerouted));
    row.push_back(std::to_string(p.stats.tokens_fully_dropped));
    row.push_back(fixed(p.stats.load_imbalance));
    row.push_back(dropless ? "dropless" : fixed(p.stats.step_capacity_mean, 1));
    row.push_back(fixed(p.stats.step_drop_rate_max));
    row.push_back(fixed(p.stats.step_peak_load_max));
    row.push_back(fixed(p.stats.routing.share_min));
    row.push_back(fixed(p.stats.routing.share_max));
    row.push_back(fixed(p.stats.routing.same_first));
    row.push_back(fixed(p.stats.routing.same_first_or_second));
    if (serving) {
      row.push_back(fixed(cache_hit_rate(p.stats.engine)));
      row.push_back(std::to_string(p.stats.engine.preemptions));
      row.push_back(std::to_string(p.stats.engine.accepted) + "/" + std::to_string(p.stats.engine.drafted));
    }
    t.add_row(std::move(row));
  }
  return t;
}

Table probe_table(const std::vector<ProbeResult>& results) {
  Table t({"mode", "scope", "priority", "cf", "displacement", "trials_displaced", "outcomes", "alone_drop",
           "mean_drop"});
  for (const auto& r : results) {
    t.add_row({r.mode, std::string(to_string(r.policy.scope)), std::string(to_string(r.policy.priority)),
               format_double(r.policy.capacity_factor), fixed(r.displacement_rate),
               std::to_string(r.trials_displaced) + "/" + std::to_string(r.trials),
               std::to_string(r.distinct_outcomes), fixed(r.alone_drop_rate), fixed(r.mean_drop_rate)});
  }
  return t;
}

}  // namespace moe::sim

#include "sim/report.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "sim/deploy/deploy_report.h"
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

nlohmann::ordered_json policy_json(std::string_view mode, const DispatchPolicy& policy,
                                   std::optional<std::string_view> kernel) {
  nlohmann::ordered_json j;
  j["mode"] = std::string(mode);
  j["scope"] = std::string(to_string(policy.scope));
  j["priority"] = std::string(to_string(policy.priority));
  j["overflow"] = std::string(to_string(policy.overflow));
  j["capacity_factor"] = policy.capacity_factor;
  j["rounding"] = std::string(to_string(policy.rounding));
  j["min_capacity"] = policy.min_capacity;
  j["reroute_depth"] = policy.reroute_depth;
  j["renormalize_survivors"] = policy.renormalize_survivors;
  if (policy.scope == CapacityScope::kPrefix) j["lookahead"] = policy.lookahead;
  j["seed"] = policy.seed;
  j["kernel"] = kernel ? nlohmann::ordered_json(std::string(*kernel)) : nlohmann::ordered_json(nullptr);
  return j;
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
  if (s.deploy.enabled) j["deployment"] = deploy::stats_json(s.deploy);
  return j;
}

double cache_hit_rate(const serving::EngineStats& e) {
  return e.prompt_tokens > 0
             ? static_cast<double>(e.cached_prompt_tokens) / static_cast<double>(e.prompt_tokens)
             : 0.0;
}

std::string cache_key_name(const std::vector<RoutingRule>& rules) {
  std::vector<std::string> salted;
  for (const RoutingRule& rule : rules) {
    // A rule salts its blocks when a decode block (ending past a 1-token prompt) is keyed by the prompt
    // length; a rule that never salts adds nothing to the key.
    if (prefix_cache_salt(rule, 2, 1) == 0) continue;
    std::string name(to_string(rule.scope));
    if (rule.scope == CapacityScope::kPrefix) name += ", lookahead " + std::to_string(rule.lookahead);
    if (rule.scope == CapacityScope::kSequence) name += ": prompt length";
    if (std::find(salted.begin(), salted.end(), name) == salted.end()) salted.push_back(name);
  }
  if (salted.empty()) return "tokens";
  std::sort(salted.begin(), salted.end());  // the key, whatever order the policies came in
  std::string out = "tokens+salt(";
  for (size_t i = 0; i < salted.size(); ++i) out += (i ? "; " : "") + salted[i];
  return out + ")";
}

nlohmann::ordered_json serving_stats_json(const RunStats& s) {
  const serving::EngineStats& e = s.engine;
  nlohmann::ordered_json j;
  j["cache_key"] = cache_key_name(s.cache_rules);
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
  j["policy"] = policy_json(r.mode, r.policy);
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

void print_run_table(std::ostream& out, const std::vector<RunColumn>& columns, bool serving) {
  std::vector<std::string> header = {"metric"};
  for (const RunColumn& c : columns) header.push_back(c.label);
  Table t(header);
  // One row: a metric and its value in every column.
  auto row = [&](const std::string& metric, const std::function<std::string(const RunStats&)>& value) {
    std::vector<std::string> cells = {metric};
    for (const RunColumn& c : columns) cells.push_back(value(*c.stats));
    t.add_row(std::move(cells));
  };
  auto any = [&](const std::function<bool(const RunStats&)>& test) {
    return std::any_of(columns.begin(), columns.end(), [&](const RunColumn& c) { return test(*c.stats); });
  };
  auto dropless = [](const RunStats& s) { return !s.expert_capacity.empty() && s.expert_capacity[0] < 0; };
  auto multi_step = [](const RunStats& s) { return s.steps > 1; };
  auto count = [](int64_t RunStats::*field) {
    return [field](const RunStats& s) { return std::to_string(s.*field); };
  };
  auto rate = [](double RunStats::*field, int decimals) {
    return [field, decimals](const RunStats& s) { return fixed(s.*field, decimals); };
  };
  if (columns.front().num_requests >= 0) {
    std::vector<std::string> cells = {"requests"};
    for (const RunColumn& c : columns) cells.push_back(std::to_string(c.num_requests));
    t.add_row(std::move(cells));
  }
  row("steps", count(&RunStats::steps));
  row("tokens", count(&RunStats::tokens));
  row("pairs", count(&RunStats::pairs));
  row("kept", count(&RunStats::kept));
  row("rerouted", count(&RunStats::rerouted));
  row("dropped", count(&RunStats::dropped));
  row("drop_rate", rate(&RunStats::drop_rate, 4));
  row("tokens_fully_dropped", count(&RunStats::tokens_fully_dropped));
  // A row that applies to some columns only shows "-" in the others.
  auto where = [](bool (*applies)(const RunStats&), std::function<std::string(const RunStats&)> value) {
    return [applies, value](const RunStats& s) { return applies(s) ? value(s) : std::string("-"); };
  };
  auto capped_multi = [](const RunStats& s) {
    return !(!s.expert_capacity.empty() && s.expert_capacity[0] < 0) && s.steps > 1;
  };
  auto capped_single = [](const RunStats& s) {
    return !(!s.expert_capacity.empty() && s.expert_capacity[0] < 0) && s.steps <= 1;
  };
  if (any(dropless)) row("capacity", [&](const RunStats& s) { return dropless(s) ? "dropless" : "-"; });
  if (any(capped_multi)) {
    row("capacity/step min", where(capped_multi, rate(&RunStats::step_capacity_min, 1)));
    row("capacity/step mean", where(capped_multi, rate(&RunStats::step_capacity_mean, 1)));
    row("capacity/step max", where(capped_multi, rate(&RunStats::step_capacity_max, 1)));
  }
  if (any(capped_single)) {
    row("capacity (slots/expert)", where(capped_single, rate(&RunStats::step_capacity_mean, 1)));
  }
  row("load_imbalance (max/mean)", rate(&RunStats::load_imbalance, 4));
  if (any(multi_step)) {
    row("step drop_rate mean", where(multi_step, rate(&RunStats::step_drop_rate_mean, 4)));
    row("step drop_rate max", where(multi_step, rate(&RunStats::step_drop_rate_max, 4)));
    row("step load_imbalance mean", where(multi_step, rate(&RunStats::step_imbalance_mean, 4)));
    row("step load_imbalance max", where(multi_step, rate(&RunStats::step_imbalance_max, 4)));
    row("step peak load / (cf*T*k/E) mean", where(multi_step, rate(&RunStats::step_peak_load_mean, 4)));
    row("step peak load / (cf*T*k/E) max", where(multi_step, rate(&RunStats::step_peak_load_max, 4)));
  }
  auto routing = [](double RoutingStats::*field) {
    return [field](const RunStats& s) { return fixed(s.routing.*field); };
  };
  row("routing: expert share min", routing(&RoutingStats::share_min));
  row("routing: expert share max", routing(&RoutingStats::share_max));
  row("routing: load imbalance (share max * E)", routing(&RoutingStats::load_imbalance));
  row("routing: consecutive same first choice", routing(&RoutingStats::same_first));
  row("routing: consecutive same first or second", routing(&RoutingStats::same_first_or_second));
  if (serving) {
    row("serving: cache key", [](const RunStats& s) { return cache_key_name(s.cache_rules); });
    row("serving: prompt tokens from the cache", [](const RunStats& s) {
      const serving::EngineStats& e = s.engine;
      return std::to_string(e.cached_prompt_tokens) + " of " + std::to_string(e.prompt_tokens) + " (" +
             fixed(cache_hit_rate(e)) + ")";
    });
    row("serving: preemptions", [](const RunStats& s) { return std::to_string(s.engine.preemptions); });
    row("serving: draft tokens accepted", [](const RunStats& s) {
      return std::to_string(s.engine.accepted) + " of " + std::to_string(s.engine.drafted);
    });
  }
  t.print(out);
  for (const RunColumn& c : columns) {
    out << (columns.size() == 1 ? std::string("expert_load:") : "expert_load " + c.label + ":");
    for (int64_t l : c.stats->expert_load) out << " " << l;
    out << "\n";
  }
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
  const bool deployment = !points.empty() && points.front().stats.deploy.enabled;
  if (deployment) {
    for (const std::string& h : deploy::sweep_header()) header.push_back(h);
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
    if (deployment) {
      for (std::string& cell : deploy::sweep_cells(p.stats.deploy)) row.push_back(std::move(cell));
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

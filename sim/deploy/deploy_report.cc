#include "sim/deploy/deploy_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "sim/errors.h"
#include "sim/text.h"

namespace moe::sim::deploy {
namespace {

using nlohmann::ordered_json;

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// A total per accounted step (0 without steps).
double per_step(double total, const DeployStats& s) {
  return s.steps > 0 ? total / static_cast<double>(s.steps) : 0.0;
}

double us(double seconds) {
  return seconds * 1e6;
}

ordered_json ratio_json(const StepRatio& r) {
  ordered_json j;
  j["max_over_mean_mean"] = r.mean;
  j["max_over_mean_max"] = r.max;
  return j;
}

int64_t replicated(const DeployStats& s) {
  int64_t n = 0;
  for (const auto& r : s.replicas) n += r.size() > 1 ? 1 : 0;
  return n;
}

int64_t physical(const DeployStats& s) {
  int64_t n = 0;
  for (const auto& r : s.replicas) n += static_cast<int64_t>(r.size());
  return n;
}

// Experts (copies) each rank holds.
std::vector<int64_t> held(const DeployStats& s) {
  std::vector<int64_t> h(s.rank_rows.size(), 0);
  for (const auto& r : s.replicas) {
    for (int rank : r) ++h[static_cast<size_t>(rank)];
  }
  return h;
}

// Bytes of one phase per link class, from the dispatch's rows (combine: the same rows back).
ordered_json phase_json(const DeployStats& s, int64_t row_bytes) {
  ordered_json j;
  j["row_bytes"] = row_bytes;
  j["local_bytes"] = sum(s.rank_local) * row_bytes;
  j["nvlink_bytes"] = sum(s.rank_nvlink_send) * row_bytes;
  j["rdma_bytes"] = sum(s.rank_rdma_send) * row_bytes;
  return j;
}

std::string mb(double bytes) {
  return fixed(bytes / 1e6, 2);
}

double drop_rate(const DeployStats& s) {
  return s.pairs > 0 ? static_cast<double>(s.expert_dropped + s.rank_dropped) / static_cast<double>(s.pairs)
                     : 0;
}

}  // namespace

double mean_step_us(const DeployStats& s) {
  return us(per_step(s.step_s, s));
}

ordered_json config_json(const DeployConfig& c) {
  ordered_json j;
  j["ep_size"] = c.ep_size;
  j["ranks_per_node"] = c.ranks_per_node;
  j["nodes"] = c.nodes();
  ordered_json p;
  p["policy"] = std::string(to_string(c.placement));
  p["redundant_experts"] = c.redundant_experts;
  p["loads"] = c.loads;
  j["placement"] = p;
  j["warmup_steps"] = c.warmup_steps;
  j["rank_capacity_factor"] =
      c.rank_capacity_factor > 0 ? ordered_json(c.rank_capacity_factor) : ordered_json();
  j["token_homes"] = std::string(to_string(c.homes));
  j["a2a"] = std::string(to_string(c.a2a));
  j["intranode"] = c.intranode_rdma ? "rdma" : "nvlink";
  j["dispatch_dtype"] = std::string(to_string(c.dispatch));
  j["combine_dtype"] = std::string(to_string(c.combine));
  ordered_json m;
  m["hidden"] = c.model.hidden;
  m["expert_intermediate"] = c.model.intermediate;
  m["shared_experts"] = c.model.shared_experts;
  m["gated"] = c.model.gated;
  m["weight_dtype"] = std::string(to_string(c.model.weights));
  j["model"] = m;
  const HardwareProfile& h = c.hardware;
  ordered_json hw;
  hw["profile"] = c.hardware_name;
  hw["fp8_tflops"] = h.fp8_tflops;
  hw["bf16_tflops"] = h.bf16_tflops;
  hw["fp4_tflops"] = h.fp4_tflops;
  hw["hbm_gbps"] = h.hbm_gbps;
  hw["nvlink_gbps"] = h.nvlink_gbps;
  hw["rdma_gbps"] = h.rdma_gbps;
  hw["a2a_base_us"] = h.a2a_base_us;
  hw["nvlink_latency_us"] = h.nvlink_latency_us;
  hw["rdma_latency_us"] = h.rdma_latency_us;
  j["hardware"] = hw;
  return j;
}

ordered_json stats_json(const DeployStats& s) {
  ordered_json j;
  const int64_t ranks = static_cast<int64_t>(s.rank_rows.size());
  j["ep_size"] = ranks;
  j["nodes"] = (ranks + s.ranks_per_node - 1) / s.ranks_per_node;
  ordered_json p;
  p["physical_experts"] = physical(s);
  p["replicated_experts"] = replicated(s);
  p["replicas"] = s.replicas;
  j["placement"] = p;
  j["warmup_steps"] = s.warmup_steps;
  j["steps"] = s.steps;
  j["tokens"] = s.tokens;
  j["pairs"] = s.pairs;
  j["computed_pairs"] = s.computed;
  j["dropped_by_expert_capacity"] = s.expert_dropped;
  j["dropped_by_rank_capacity"] = s.rank_dropped;
  j["drop_rate"] = drop_rate(s);
  j["rank_capacity_per_step"] =
      s.rank_capacity > 0 ? ordered_json(per_step(static_cast<double>(s.rank_capacity), s)) : ordered_json();
  ordered_json b;
  b["tokens_per_rank"] = ratio_json(s.token_balance);
  b["pairs_per_rank"] = ratio_json(s.rank_balance);
  b["pairs_per_node"] = ratio_json(s.node_balance);
  j["balance"] = b;
  ordered_json m;
  const double P = static_cast<double>(ranks);
  m["tokens_per_rank"] = per_step(static_cast<double>(s.tokens), s) / P;
  m["pairs_per_rank"] = per_step(static_cast<double>(s.computed), s) / P;
  m["busiest_rank_nvlink_send_rows"] = per_step(static_cast<double>(s.max_nvlink_send), s);
  m["busiest_rank_rdma_send_rows"] = per_step(static_cast<double>(s.max_rdma_send), s);
  j["per_step_mean"] = m;
  ordered_json t;
  t["dispatch"] = phase_json(s, s.dispatch_row_bytes);
  t["combine"] = phase_json(s, s.combine_row_bytes);
  j["traffic"] = t;
  ordered_json time;
  time["step_mean_us"] = mean_step_us(s);
  time["step_max_us"] = us(s.step_max_s);
  time["dispatch_mean_us"] = us(per_step(s.dispatch_s, s));
  time["gemm_mean_us"] = us(per_step(s.gemm_s, s));
  time["combine_mean_us"] = us(per_step(s.combine_s, s));
  time["gemm_balanced_mean_us"] = us(per_step(s.gemm_mean_s, s));
  time["total_s"] = s.step_s;
  j["time"] = time;
  ordered_json r;
  r["experts_held"] = held(s);
  r["tokens"] = s.rank_tokens;
  r["pairs"] = s.rank_rows;
  auto bytes = [](const std::vector<int64_t>& rows, int64_t row_bytes) {
    std::vector<int64_t> out;
    for (int64_t x : rows) out.push_back(x * row_bytes);
    return out;
  };
  r["dispatch_nvlink_send_bytes"] = bytes(s.rank_nvlink_send, s.dispatch_row_bytes);
  r["dispatch_rdma_send_bytes"] = bytes(s.rank_rdma_send, s.dispatch_row_bytes);
  r["combine_nvlink_send_bytes"] = bytes(s.rank_nvlink_recv, s.combine_row_bytes);
  r["combine_rdma_send_bytes"] = bytes(s.rank_rdma_recv, s.combine_row_bytes);
  std::vector<double> gemm_us;
  for (double g : s.rank_gemm_s) gemm_us.push_back(us(g));
  r["gemm_us"] = gemm_us;
  j["per_rank"] = r;
  return j;
}

void print_deploy_table(std::ostream& out, const std::vector<DeployColumn>& columns, const DeployConfig& c) {
  std::vector<std::string> header = {"deployment"};
  for (const DeployColumn& col : columns) header.push_back(col.label);
  Table t(header);
  auto row = [&](const std::string& name, const std::function<std::string(const DeployStats&)>& value) {
    std::vector<std::string> cells = {name};
    for (const DeployColumn& col : columns) cells.push_back(value(*col.stats));
    t.add_row(std::move(cells));
  };
  const double P = static_cast<double>(c.ep_size);
  row("ranks x nodes", [&](const DeployStats&) {
    return std::to_string(c.ep_size) + " x " + std::to_string(c.nodes()) + " (" +
           std::to_string(std::min(c.ep_size, c.ranks_per_node)) + " per node)";
  });
  row("placement", [&](const DeployStats& s) {
    std::string p =
        std::string(to_string(c.placement)) + ", " + std::to_string(physical(s)) + " physical experts";
    if (replicated(s) > 0) p += " (" + std::to_string(replicated(s)) + " replicated)";
    return p;
  });
  row("hardware", [&](const DeployStats&) { return c.hardware_name; });
  row("accounted steps", [](const DeployStats& s) {
    return std::to_string(s.steps) +
           (s.warmup_steps > 0 ? " (after " + std::to_string(s.warmup_steps) + " warm-up)" : "");
  });
  row("tokens / rank / step",
      [&](const DeployStats& s) { return fixed(per_step(static_cast<double>(s.tokens), s) / P, 1); });
  row("pairs / rank / step",
      [&](const DeployStats& s) { return fixed(per_step(static_cast<double>(s.computed), s) / P, 1); });
  row("tokens per rank max/mean (mean, max)", [](const DeployStats& s) {
    return fixed(s.token_balance.mean, 3) + ", " + fixed(s.token_balance.max, 3);
  });
  row("pairs per rank max/mean (mean, max)", [](const DeployStats& s) {
    return fixed(s.rank_balance.mean, 3) + ", " + fixed(s.rank_balance.max, 3);
  });
  row("pairs per node max/mean (mean, max)", [](const DeployStats& s) {
    return fixed(s.node_balance.mean, 3) + ", " + fixed(s.node_balance.max, 3);
  });
  row("drop rate (expert + rank capacity)", [](const DeployStats& s) {
    return fixed(drop_rate(s)) + " (" + std::to_string(s.expert_dropped) + " + " +
           std::to_string(s.rank_dropped) + ")";
  });
  // Bytes per step: all ranks, and the busiest rank's sends.
  auto bytes = [&](const char* phase, bool rdma) {
    return [=](const DeployStats& s) {
      const int64_t row = std::string(phase) == "dispatch" ? s.dispatch_row_bytes : s.combine_row_bytes;
      const int64_t rows = sum(rdma ? s.rank_rdma_send : s.rank_nvlink_send);
      const int64_t busiest = rdma ? s.max_rdma_send : s.max_nvlink_send;
      return mb(per_step(static_cast<double>(rows * row), s)) + " (busiest rank " +
             mb(per_step(static_cast<double>(busiest * row), s)) + ")";
    };
  };
  row("dispatch MB / step, NVLink", bytes("dispatch", false));
  row("dispatch MB / step, RDMA", bytes("dispatch", true));
  row("combine MB / step, NVLink", bytes("combine", false));
  row("combine MB / step, RDMA", bytes("combine", true));
  row("step us (modelled, mean)", [](const DeployStats& s) { return fixed(mean_step_us(s), 1); });
  row("  dispatch / gemm / combine us", [](const DeployStats& s) {
    return fixed(us(per_step(s.dispatch_s, s)), 1) + " / " + fixed(us(per_step(s.gemm_s, s)), 1) + " / " +
           fixed(us(per_step(s.combine_s, s)), 1);
  });
  row("  gemm us if balanced", [](const DeployStats& s) { return fixed(us(per_step(s.gemm_mean_s, s)), 1); });
  row("step us max", [](const DeployStats& s) { return fixed(us(s.step_max_s), 1); });
  row("modelled time s", [](const DeployStats& s) { return fixed(s.step_s, 6); });
  t.print(out);
}

std::vector<std::string> sweep_header() {
  return {"ranks_max/mean", "nodes_max/mean", "step_us",      "dispatch_us", "gemm_us",
          "combine_us",     "nvlink_MB/step", "rdma_MB/step", "rank_dropped"};
}

std::vector<std::string> sweep_cells(const DeployStats& s) {
  const double nvlink = static_cast<double>(sum(s.rank_nvlink_send)) *
                        static_cast<double>(s.dispatch_row_bytes + s.combine_row_bytes);
  const double rdma = static_cast<double>(sum(s.rank_rdma_send)) *
                      static_cast<double>(s.dispatch_row_bytes + s.combine_row_bytes);
  return {fixed(s.rank_balance.mean, 3),
          fixed(s.node_balance.mean, 3),
          fixed(mean_step_us(s), 1),
          fixed(us(per_step(s.dispatch_s, s)), 1),
          fixed(us(per_step(s.gemm_s, s)), 1),
          fixed(us(per_step(s.combine_s, s)), 1),
          mb(per_step(nvlink, s)),
          mb(per_step(rdma, s)),
          std::to_string(s.rank_dropped)};
}

std::vector<std::string> rank_header() {
  return {"rank",
          "node",
          "experts",
          "tokens/step",
          "pairs/step",
          "dispatch_nvlink_B/step",
          "dispatch_rdma_B/step",
          "combine_nvlink_B/step",
          "combine_rdma_B/step",
          "gemm_us/step"};
}

void add_rank_rows(Table& table, const std::vector<std::string>& lead, const DeployStats& s) {
  const std::vector<int64_t> experts = held(s);
  const size_t P = s.rank_rows.size();
  for (size_t r = 0; r < P; ++r) {
    std::vector<std::string> cells = lead;
    auto step = [&](int64_t v, int64_t bytes) {
      return fixed(per_step(static_cast<double>(v * bytes), s), 1);
    };
    cells.push_back(std::to_string(r));
    cells.push_back(std::to_string(static_cast<int64_t>(r) / s.ranks_per_node));
    cells.push_back(std::to_string(experts[r]));
    cells.push_back(step(s.rank_tokens[r], 1));
    cells.push_back(step(s.rank_rows[r], 1));
    cells.push_back(step(s.rank_nvlink_send[r], s.dispatch_row_bytes));
    cells.push_back(step(s.rank_rdma_send[r], s.dispatch_row_bytes));
    cells.push_back(step(s.rank_nvlink_recv[r], s.combine_row_bytes));
    cells.push_back(step(s.rank_rdma_recv[r], s.combine_row_bytes));
    cells.push_back(fixed(us(per_step(s.rank_gemm_s[r], s)), 2));
    table.add_row(std::move(cells));
  }
}

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw DataError("cannot write '" + path + "'");
  out << text;
  if (!out) throw DataError("cannot write '" + path + "'");
}

std::string csv_text(const std::string& provenance, const Table& table) {
  std::ostringstream s;
  s << provenance << "\n";
  table.print_csv(s);
  return s.str();
}

}  // namespace

void write_run_files(const DeployConfig& config, const std::string& provenance,
                     const std::vector<DeployColumn>& columns) {
  if (!config.csv_path.empty()) {
    std::vector<std::string> header = {"run"};
    for (const std::string& h : rank_header()) header.push_back(h);
    Table table(header);
    for (const DeployColumn& c : columns) add_rank_rows(table, {c.label}, *c.stats);
    write_file(config.csv_path, csv_text(provenance, table));
  }
  if (!config.svg_path.empty()) {
    LinePlot plot;
    plot.title = "Pairs per rank and step (EP " + std::to_string(config.ep_size) + ", " +
                 std::string(to_string(config.placement)) + ")";
    plot.x_label = "rank";
    plot.y_label = "pairs computed per step";
    plot.description = provenance.substr(2);
    for (const DeployColumn& c : columns) {
      PlotSeries series{c.label, {}, {}};
      for (size_t r = 0; r < c.stats->rank_rows.size(); ++r) {
        series.x.push_back(static_cast<double>(r));
        series.y.push_back(per_step(static_cast<double>(c.stats->rank_rows[r]), *c.stats));
      }
      plot.series.push_back(std::move(series));
    }
    write_file(config.svg_path, render_svg(plot));
  }
}

void write_sweep_files(const DeployConfig& config, const std::string& provenance,
                       const std::vector<SweepPoint>& points) {
  if (points.empty() || !points.front().stats.deploy.enabled) return;
  if (!config.csv_path.empty()) {
    std::vector<std::string> header;
    for (const auto& [name, value] : points.front().axis_values) header.push_back(name);
    header.push_back("mode");
    header.push_back("cf");
    for (const std::string& h : rank_header()) header.push_back(h);
    Table table(header);
    for (const SweepPoint& p : points) {
      std::vector<std::string> lead;
      for (const auto& [name, value] : p.axis_values) lead.push_back(value);
      lead.push_back(p.mode);
      lead.push_back(format_double(p.capacity_factor));
      add_rank_rows(table, lead, p.stats.deploy);
    }
    write_file(config.csv_path, csv_text(provenance, table));
  }
  if (!config.svg_path.empty()) {
    const auto& axes = points.front().axis_values;
    const bool by_ep =
        std::any_of(axes.begin(), axes.end(), [](const auto& a) { return a.first == "ep-size"; });
    const bool several_cf = std::any_of(points.begin(), points.end(), [&](const SweepPoint& p) {
      return p.capacity_factor != points.front().capacity_factor;
    });
    LinePlot plot;
    plot.title = by_ep ? "Modelled step time against EP size" : "Modelled step time against capacity factor";
    plot.x_label = by_ep ? "EP size (ranks)" : "capacity factor";
    plot.y_label = "modelled step time, us (mean over steps)";
    plot.description = provenance.substr(2);
    for (const SweepPoint& p : points) {
      std::string name = p.mode;
      double x = p.capacity_factor;
      for (const auto& [axis, value] : p.axis_values) {
        if (by_ep && axis == "ep-size") {
          x = parse_double(value, "ep-size");
        } else {
          name += " " + axis + "=" + value;
        }
      }
      if (by_ep && several_cf) name += " cf=" + format_double(p.capacity_factor);
      auto it = std::find_if(plot.series.begin(), plot.series.end(),
                             [&](const PlotSeries& s) { return s.name == name; });
      if (it == plot.series.end()) {
        plot.series.push_back(PlotSeries{name, {}, {}});
        it = plot.series.end() - 1;
      }
      it->x.push_back(x);
      it->y.push_back(mean_step_us(p.stats.deploy));
    }
    write_file(config.svg_path, render_svg(plot));
  }
}

}  // namespace moe::sim::deploy

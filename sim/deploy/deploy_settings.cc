#include "sim/deploy/deploy_settings.h"

#include <climits>

#include "sim/errors.h"
#include "sim/text.h"

namespace moe::sim::deploy {
namespace {

int to_int(const std::string& name, const std::string& v) {
  const int64_t x = parse_int(v, "--" + name);
  if (x < INT_MIN || x > INT_MAX) throw UsageError("--" + name + ": " + v + " is out of range");
  return static_cast<int>(x);
}

}  // namespace

void add_deploy_settings(std::vector<Setting>& s) {
  const unsigned kWhere = kRun | kSweep;
  auto add = [&](std::string name, std::string type, std::string help,
                 std::function<void(SimConfig&, const std::string&)> apply,
                 std::function<std::string(const SimConfig&)> show) {
    Setting setting{std::move(name),  std::move(type), std::move(help), kWhere, false, false, true,
                    std::move(apply), std::move(show)};
    setting.deployment = true;
    s.push_back(std::move(setting));
  };
  // An integer setting of DeployConfig / ModelShape.
  auto add_int = [&](const std::string& name, const std::string& help, int DeployConfig::*field) {
    add(
        name, "INT", help, [=](SimConfig& c, const std::string& v) { c.deploy.*field = to_int(name, v); },
        [=](const SimConfig& c) { return std::to_string(c.deploy.*field); });
  };
  auto add_model_int = [&](const std::string& name, const std::string& help, int ModelShape::*field) {
    add(
        name, "INT", help,
        [=](SimConfig& c, const std::string& v) { c.deploy.model.*field = to_int(name, v); },
        [=](const SimConfig& c) { return std::to_string(c.deploy.model.*field); });
  };
  // A figure of the hardware profile, overriding the named profile's.
  auto add_figure = [&](const std::string& name, const std::string& help, double HardwareProfile::*field) {
    add(
        name, "FLOAT", help,
        [=](SimConfig& c, const std::string& v) { c.deploy.hardware.*field = parse_double(v, "--" + name); },
        [=](const SimConfig& c) { return format_double(c.deploy.hardware.*field); });
  };

  add_int("ep-size",
          "expert-parallel ranks P of a deployment to account (0 = none): per-rank load, traffic, step time",
          &DeployConfig::ep_size);
  add_int("ranks-per-node", "ranks of one node (its NVLink domain); default 8",
          &DeployConfig::ranks_per_node);
  add(
      "placement", "contiguous|round-robin|eplb|hierarchical|global",
      "where the experts live (eplb, hierarchical, global: DeepSeek's load balancer over measured loads)",
      [](SimConfig& c, const std::string& v) { c.deploy.placement = parse_placement(v); },
      [](const SimConfig& c) { return std::string(to_string(c.deploy.placement)); });
  add_int("redundant-experts", "R: physical experts beyond E, replicas of hot ones (EPLB placements)",
          &DeployConfig::redundant_experts);
  add(
      "placement-loads", "warmup|FILE",
      "the loads EPLB balances: the warm-up's choices, or a file (a moe-sim JSON, or E numbers)",
      [](SimConfig& c, const std::string& v) { c.deploy.loads = v; },
      [](const SimConfig& c) { return c.deploy.loads; });
  add_int("warmup-steps", "first steps not accounted, whose router choices are the warm-up loads",
          &DeployConfig::warmup_steps);
  add(
      "rank-capacity-factor", "FLOAT",
      "a rank takes at most ceil(f T k / P) of a step's kept pairs (0 = no rank capacity)",
      [](SimConfig& c, const std::string& v) {
        c.deploy.rank_capacity_factor = parse_double(v, "--rank-capacity-factor");
      },
      [](const SimConfig& c) { return format_double(c.deploy.rank_capacity_factor); });
  add(
      "token-homes", "rows|requests",
      "a token's home rank: even blocks of the step's rows, or request id mod P",
      [](SimConfig& c, const std::string& v) { c.deploy.homes = parse_token_homes(v); },
      [](const SimConfig& c) { return std::string(to_string(c.deploy.homes)); });
  add(
      "a2a", "low-latency|normal",
      "all-to-all traffic: a message per kept pair, or a token once per rank / once per node (DeepEP's "
      "kinds)",
      [](SimConfig& c, const std::string& v) { c.deploy.a2a = parse_a2a(v); },
      [](const SimConfig& c) { return std::string(to_string(c.deploy.a2a)); });
  add(
      "intranode", "nvlink|rdma", "the link of same-node messages (low-latency a2a)",
      [](SimConfig& c, const std::string& v) {
        if (v != "nvlink" && v != "rdma")
          throw UsageError("unknown intranode '" + v + "' (known: nvlink, rdma)");
        c.deploy.intranode_rdma = v == "rdma";
      },
      [](const SimConfig& c) { return std::string(c.deploy.intranode_rdma ? "rdma" : "nvlink"); });
  add(
      "dispatch-dtype", "fp8|bf16|fp32", "element of a dispatched row (fp8: with a float scale per 128)",
      [](SimConfig& c, const std::string& v) { c.deploy.dispatch = parse_dtype(v, "dispatch-dtype"); },
      [](const SimConfig& c) { return std::string(to_string(c.deploy.dispatch)); });
  add(
      "combine-dtype", "bf16|fp32|fp8", "element of a combined row",
      [](SimConfig& c, const std::string& v) { c.deploy.combine = parse_dtype(v, "combine-dtype"); },
      [](const SimConfig& c) { return std::string(to_string(c.deploy.combine)); });
  add(
      "weight-dtype", "fp8|bf16|mxfp4", "the experts' weights (default: the preset model's)",
      [](SimConfig& c, const std::string& v) { c.deploy.model.weights = parse_dtype(v, "weight-dtype"); },
      [](const SimConfig& c) { return std::string(to_string(c.deploy.model.weights)); });
  add_model_int("hidden", "model dimension H (default: the preset model's)", &ModelShape::hidden);
  add_model_int("expert-intermediate", "a routed expert's intermediate size I (default: the preset model's)",
                &ModelShape::intermediate);
  add_model_int("shared-experts",
                "shared experts of a routed expert's size on every rank (default: the preset's)",
                &ModelShape::shared_experts);
  add(
      "hardware", "h800|h200|b200", "GPU and link figures (docs/cli.md, Deployment); each overridable below",
      [](SimConfig& c, const std::string& v) {
        c.deploy.hardware = hardware_profile(v);
        c.deploy.hardware_name = v;
      },
      [](const SimConfig& c) { return c.deploy.hardware_name; });
  add_figure("fp8-tflops", "dense FP8 tensor TFLOP/s", &HardwareProfile::fp8_tflops);
  add_figure("bf16-tflops", "dense BF16 tensor TFLOP/s", &HardwareProfile::bf16_tflops);
  add_figure("fp4-tflops", "dense FP4 tensor TFLOP/s (0: none)", &HardwareProfile::fp4_tflops);
  add_figure("hbm-gbps", "HBM bandwidth, GB/s", &HardwareProfile::hbm_gbps);
  add_figure("nvlink-gbps", "NVLink bandwidth one way per GPU, GB/s", &HardwareProfile::nvlink_gbps);
  add_figure("rdma-gbps", "RDMA NIC bandwidth one way per GPU, GB/s", &HardwareProfile::rdma_gbps);
  add_figure("a2a-base-us", "fixed latency of an all-to-all phase, us", &HardwareProfile::a2a_base_us);
  add_figure("nvlink-latency-us", "latency of an NVLink hop, us", &HardwareProfile::nvlink_latency_us);
  add_figure("rdma-latency-us", "latency of a network hop, us", &HardwareProfile::rdma_latency_us);
  add(
      "deploy-csv", "FILE", "also write the deployment as CSV (run: per rank; sweep: per point)",
      [](SimConfig& c, const std::string& v) { c.deploy.csv_path = v; },
      [](const SimConfig& c) { return c.deploy.csv_path.empty() ? std::string("none") : c.deploy.csv_path; });
  add(
      "deploy-svg", "FILE", "also write an SVG plot (run: rows per rank; sweep: modelled step time)",
      [](SimConfig& c, const std::string& v) { c.deploy.svg_path = v; },
      [](const SimConfig& c) { return c.deploy.svg_path.empty() ? std::string("none") : c.deploy.svg_path; });
}

}  // namespace moe::sim::deploy

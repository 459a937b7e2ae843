#include "moe/parallel/eplb.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace moe::parallel::eplb {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("eplb: " + msg);
}

void check_positive(const char* name, int v) {
  if (v < 1) fail(std::string(name) + " (" + std::to_string(v) + ") must be >= 1");
}

void check_loads(std::span<const float> load) {
  if (load.empty()) fail("the load vector is empty");
  for (size_t e = 0; e < load.size(); ++e) {
    if (!std::isfinite(load[e]) || load[e] < 0.0f) {
      fail("the load of expert " + std::to_string(e) + " (" + std::to_string(load[e]) +
           ") must be finite and >= 0");
    }
  }
}

// inverse[perm[i]] = i.
std::vector<int> inverse(const std::vector<int>& perm) {
  std::vector<int> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int>(i);
  return inv;
}

}  // namespace

Packing balanced_packing(std::span<const float> weight, int num_packs) {
  check_positive("num_packs", num_packs);
  const int n = static_cast<int>(weight.size());
  if (n % num_packs != 0) {
    fail(std::to_string(n) + " items do not split evenly into " + std::to_string(num_packs) + " packs");
  }
  const int per_pack = n / num_packs;
  Packing out{std::vector<int>(n, -1), std::vector<int>(n, -1)};
  if (per_pack == 1) {
    for (int i = 0; i < n; ++i) {
      out.pack[i] = i;
      out.rank_in_pack[i] = 0;
    }
    return out;
  }
  // Heaviest first. The published code sorts with torch.sort(descending=True), which on CPU is std::sort on
  // (value, index) pairs compared by value alone: the same call gives the same order of equal weights.
  std::vector<std::pair<float, int>> order(n);
  for (int i = 0; i < n; ++i) order[i] = {weight[i], i};
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<float> pack_weight(num_packs, 0.0f);
  std::vector<int> pack_items(num_packs, 0);
  for (const auto& [w, item] : order) {
    int best = -1;
    for (int p = 0; p < num_packs; ++p) {  // the lightest pack with room; the first of equal ones
      if (pack_items[p] < per_pack && (best < 0 || pack_weight[p] < pack_weight[best])) best = p;
    }
    out.pack[item] = best;
    out.rank_in_pack[item] = pack_items[best];
    pack_weight[best] += weight[item];
    ++pack_items[best];
  }
  return out;
}

Replicas replicate_experts(std::span<const float> weight, int num_physical) {
  const int num_log = static_cast<int>(weight.size());
  if (num_physical < num_log) {
    fail(std::to_string(num_physical) + " physical experts cannot hold " + std::to_string(num_log) +
         " experts");
  }
  Replicas out;
  out.physical_to_logical.resize(num_physical);
  out.replica_rank.assign(num_physical, 0);
  out.replica_count.assign(num_log, 1);
  for (int p = 0; p < num_log; ++p) out.physical_to_logical[p] = p;
  for (int p = num_log; p < num_physical; ++p) {
    // The expert of the largest load per replica (float32 quotients, as torch divides); the first of equal
    // ones.
    int best = 0;
    float best_share = weight[0] / static_cast<float>(out.replica_count[0]);
    for (int e = 1; e < num_log; ++e) {
      const float share = weight[e] / static_cast<float>(out.replica_count[e]);
      if (share > best_share) {
        best = e;
        best_share = share;
      }
    }
    out.physical_to_logical[p] = best;
    out.replica_rank[p] = out.replica_count[best]++;
  }
  return out;
}

namespace {

// The published rebalance_experts_hierarchical for one layer: slot -> expert and each slot's replica rank.
struct Physical {
  std::vector<int> physical_to_logical;
  std::vector<int> replica_rank;
  std::vector<int> replica_count;
};

Physical hierarchical(std::span<const float> load, int num_replicas, int num_groups, int num_nodes,
                      int num_gpus) {
  check_loads(load);
  check_positive("num_groups", num_groups);
  check_positive("num_nodes", num_nodes);
  check_positive("num_gpus", num_gpus);
  const int E = static_cast<int>(load.size());
  if (E % num_groups != 0) {
    fail(std::to_string(E) + " experts do not split into " + std::to_string(num_groups) + " equal groups");
  }
  if (num_groups % num_nodes != 0) {
    fail(std::to_string(num_groups) + " groups do not split evenly over " + std::to_string(num_nodes) +
         " nodes (the global policy does not need it: eplb::rebalance_global)");
  }
  if (num_gpus % num_nodes != 0) {
    fail("num_gpus (" + std::to_string(num_gpus) + ") must be a multiple of num_nodes (" +
         std::to_string(num_nodes) + ")");
  }
  if (num_replicas < E) {
    fail("num_replicas (" + std::to_string(num_replicas) + ") must be at least the " + std::to_string(E) +
         " experts");
  }
  if (num_replicas % num_gpus != 0) {
    fail("num_replicas (" + std::to_string(num_replicas) + ") must be a multiple of num_gpus (" +
         std::to_string(num_gpus) + ")");
  }
  const int group_size = E / num_groups, groups_per_node = num_groups / num_nodes;
  const int per_node = E / num_nodes, phys_per_node = num_replicas / num_nodes;
  const int gpus_per_node = num_gpus / num_nodes, phys_per_gpu = num_replicas / num_gpus;
  if (per_node * num_nodes != E) fail("the experts do not split evenly over the nodes");  // implied above

  // 1. Groups to nodes: group g -> node pack[g], place rank[g] there; expert e's index m ("meta-logical") in
  // node-major order.
  std::vector<float> group_load(num_groups, 0.0f);
  for (int g = 0; g < num_groups; ++g) {
    for (int i = 0; i < group_size; ++i) group_load[g] += load[static_cast<size_t>(g * group_size + i)];
  }
  const Packing groups = balanced_packing(group_load, num_nodes);
  std::vector<int> log2mlog(E);
  for (int e = 0; e < E; ++e) {
    const int g = e / group_size;
    log2mlog[e] = (groups.pack[g] * groups_per_node + groups.rank_in_pack[g]) * group_size + e % group_size;
  }
  const std::vector<int> mlog2log = inverse(log2mlog);

  // 2. Replicas within each node; 3. the node's physical experts onto its GPUs.
  Physical out;
  out.physical_to_logical.resize(num_replicas);
  out.replica_rank.resize(num_replicas);
  std::vector<int> mlog_count(E);
  for (int n = 0; n < num_nodes; ++n) {
    std::vector<float> mlog_load(per_node);
    for (int i = 0; i < per_node; ++i) mlog_load[i] = load[static_cast<size_t>(mlog2log[n * per_node + i])];
    const Replicas rep = replicate_experts(mlog_load, phys_per_node);
    std::vector<float> phy_load(phys_per_node);
    for (int p = 0; p < phys_per_node; ++p) {
      const int m = rep.physical_to_logical[p];
      phy_load[p] = mlog_load[m] / static_cast<float>(rep.replica_count[m]);
    }
    const Packing gpus = balanced_packing(phy_load, gpus_per_node);
    std::vector<int> phy2pphy(phys_per_node);
    for (int p = 0; p < phys_per_node; ++p) phy2pphy[p] = gpus.pack[p] * phys_per_gpu + gpus.rank_in_pack[p];
    const std::vector<int> pphy2phy = inverse(phy2pphy);
    for (int q = 0; q < phys_per_node; ++q) {
      const int p = pphy2phy[q];
      out.physical_to_logical[n * phys_per_node + q] = mlog2log[rep.physical_to_logical[p] + n * per_node];
      out.replica_rank[n * phys_per_node + q] = rep.replica_rank[p];
    }
    for (int i = 0; i < per_node; ++i) mlog_count[n * per_node + i] = rep.replica_count[i];
  }
  out.replica_count.resize(E);
  for (int e = 0; e < E; ++e) out.replica_count[e] = mlog_count[log2mlog[e]];
  return out;
}

ExpertReplication finish(Physical p, int num_gpus) {
  ExpertReplication out;
  out.num_gpus = num_gpus;
  const int E = static_cast<int>(p.replica_count.size());
  out.logical_to_physical.resize(E);
  for (int e = 0; e < E; ++e) out.logical_to_physical[e].assign(p.replica_count[e], -1);
  for (int s = 0; s < static_cast<int>(p.physical_to_logical.size()); ++s) {
    out.logical_to_physical[p.physical_to_logical[s]][p.replica_rank[s]] = s;
  }
  out.physical_to_logical = std::move(p.physical_to_logical);
  out.replica_count = std::move(p.replica_count);
  return out;
}

}  // namespace

ExpertReplication rebalance_hierarchical(std::span<const float> load, int num_replicas, int num_groups,
                                         int num_nodes, int num_gpus) {
  return finish(hierarchical(load, num_replicas, num_groups, num_nodes, num_gpus), num_gpus);
}

ExpertReplication rebalance_global(std::span<const float> load, int num_replicas, int num_gpus) {
  return finish(hierarchical(load, num_replicas, 1, 1, num_gpus), num_gpus);
}

ExpertReplication rebalance(std::span<const float> load, int num_replicas, int num_groups, int num_nodes,
                            int num_gpus) {
  check_positive("num_groups", num_groups);
  check_positive("num_nodes", num_nodes);
  if (num_groups % num_nodes == 0) {
    return rebalance_hierarchical(load, num_replicas, num_groups, num_nodes, num_gpus);
  }
  return rebalance_global(load, num_replicas, num_gpus);
}

std::vector<double> gpu_loads(std::span<const float> load, const ExpertReplication& replication) {
  if (static_cast<int>(load.size()) != replication.num_experts()) {
    fail("the load vector has " + std::to_string(load.size()) + " experts, the replication " +
         std::to_string(replication.num_experts()));
  }
  std::vector<double> out(replication.num_gpus, 0.0);
  for (int s = 0; s < replication.num_replicas(); ++s) {
    const int e = replication.physical_to_logical[s];
    out[replication.gpu_of_slot(s)] += static_cast<double>(load[e]) / replication.replica_count[e];
  }
  return out;
}

double imbalance(std::span<const double> loads) {
  if (loads.empty()) return 0.0;
  double sum = 0.0, max = 0.0;
  for (double l : loads) {
    sum += l;
    max = std::max(max, l);
  }
  return sum > 0.0 ? max / (sum / static_cast<double>(loads.size())) : 0.0;
}

}  // namespace moe::parallel::eplb

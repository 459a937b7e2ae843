#include "moe/layer/fingerprint.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace moe {
namespace {

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string build_description() {
  return std::string(MOE_BUILD_COMPILER) + "; flags: " + MOE_BUILD_FLAGS + "; type: " + MOE_BUILD_TYPE;
}

std::string Fingerprint::to_json() const {
  nlohmann::ordered_json j;
  j["config_hash"] = hex16(config_hash);
  j["weights_hash"] = hex16(weights_hash);
  j["version"] = version;
  j["build"] = build;
  j["kernel"] = kernel;
  j["dispatch"] = dispatch;
  j["device"] = device;
  j["num_threads"] = num_threads;
  j["world_size"] = world_size;
  return j.dump();
}

}  // namespace moe

#include "sim/serving/block_store.h"

#include <stdexcept>

namespace moe::sim::serving {

void check_restored_blocks(const Admission& a, const std::vector<const BlockTag*>& tags) {
  const std::string who = "restore of request " + std::to_string(a.id);
  auto fail = [&](const std::string& m) { throw std::invalid_argument(who + ": " + m); };
  if (tags.size() != a.blocks.size() || a.keys.size() != a.blocks.size()) {
    fail(std::to_string(a.blocks.size()) + " cached blocks with " + std::to_string(a.keys.size()) +
         " keys and " + std::to_string(tags.size()) + " payloads");
  }
  if (a.blocks.empty()) {
    if (a.cached != 0) fail(std::to_string(a.cached) + " cached positions but no cached block");
    return;
  }
  // Blocks of equal size, from position 0: block i holds [i * size, (i + 1) * size).
  const uint32_t size = a.cached / static_cast<uint32_t>(a.blocks.size());
  if (size == 0 || size * a.blocks.size() != a.cached) {
    fail(std::to_string(a.cached) + " cached positions do not split into " + std::to_string(a.blocks.size()) +
         " equal blocks");
  }
  for (size_t i = 0; i < tags.size(); ++i) {
    const BlockTag& t = *tags[i];
    const uint32_t begin = static_cast<uint32_t>(i) * size;
    const std::string block = "cached block " + std::to_string(i) + " (pool block " +
                              std::to_string(a.blocks[i]) + ", positions [" + std::to_string(begin) + ", " +
                              std::to_string(begin + size) + "))";
    if (!t.kept) fail(block + " has no payload: the cache never kept one for it");
    if (t.begin != begin || t.end != begin + size) {
      fail(block + " holds the payload of positions [" + std::to_string(t.begin) + ", " +
           std::to_string(t.end) + ")");
    }
    if (!(t.key == a.keys[i])) {
      fail(block + " holds a payload kept under key " + t.key.hex() + ", not the matched key " +
           a.keys[i].hex() + " (another prefix's computation)");
    }
  }
}

}  // namespace moe::sim::serving

// A flat hash map from request id to a small trivially copyable value, for the per-token lookups of the
// simulator's in-order chains (std::unordered_map costs a prime modulo and a node hop per lookup).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/splitmix64.h"

namespace moe::sim {

// Open addressing: linear probing over a power-of-two table at most half full, backward-shift deletion (no
// tombstones), mix64 of the id as the hash. Pointers returned stay valid until the next insertion or erase.
template <class V>
class RequestMap {
  static_assert(std::is_trivially_copyable_v<V>);

 public:
  size_t size() const { return size_; }

  // The value of `id` and false if it is held; else `value` inserted for it and true.
  std::pair<V*, bool> try_emplace(uint64_t id, const V& value) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = home(id);
    while (slots_[i].used) {
      if (slots_[i].id == id) return {&slots_[i].value, false};
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{id, value, true};
    ++size_;
    return {&slots_[i].value, true};
  }

  // Forgets `id`; returns whether it was held.
  bool erase(uint64_t id) {
    if (size_ == 0) return false;
    size_t i = home(id);
    while (slots_[i].used && slots_[i].id != id) i = (i + 1) & mask_;
    if (!slots_[i].used) return false;
    // Backward shift: move later entries of the probe run into the hole when their home allows it.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j].used; j = (j + 1) & mask_) {
      const size_t h = home(slots_[j].id);
      // The entry at j may move to the hole when its home is not in (hole, j] (cyclically).
      const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
      if (stays) continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole].used = false;
    --size_;
    return true;
  }

 private:
  struct Slot {
    uint64_t id = 0;
    V value{};
    bool used = false;
  };
  size_t home(uint64_t id) const { return static_cast<size_t>(mix64(id)) & mask_; }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& s : old) {
      if (s.used) try_emplace(s.id, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace moe::sim

// A progress bar on stderr for long runs. Silent unless enabled and stderr is a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace moe::sim {

class Progress {
 public:
  // Draws only when `enabled` and stderr is a terminal (isatty). Output is never part of a result.
  Progress(std::string label, int64_t total, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t n = 1);

 private:
  void draw(bool final);

  std::string label_;
  int64_t total_;
  int64_t done_ = 0;
  bool active_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace moe::sim

#include "sim/progress.h"

#include <unistd.h>

#include <cstdio>

namespace moe::sim {

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total), active_(enabled && total > 0 && isatty(STDERR_FILENO) == 1) {
  last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
  if (active_) draw(true);
}

void Progress::advance(int64_t n) {
  done_ += n;
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::draw(bool final) {
  constexpr int kWidth = 30;
  const double f = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(f * kWidth);
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld", label_.c_str(), bar.c_str(), static_cast<long long>(done_),
               static_cast<long long>(total_));
  if (final) std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace moe::sim

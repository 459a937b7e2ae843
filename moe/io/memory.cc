#include "moe/io/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "moe/io/io_error.h"

namespace moe::io {
namespace {

std::optional<uint64_t> read_number(const char* path) {
  std::ifstream f(path);
  std::string text;
  if (!(f >> text) || text == "max") return std::nullopt;
  try {
    size_t used = 0;
    const unsigned long long v = std::stoull(text, &used);
    if (used != text.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<uint64_t> meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return uint64_t{kb} * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> cgroup_available() {
  if (const auto max = read_number("/sys/fs/cgroup/memory.max")) {  // v2
    const uint64_t used = read_number("/sys/fs/cgroup/memory.current").value_or(0);
    return *max > used ? *max - used : 0;
  }
  const auto limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");  // v1
  if (limit && *limit < (uint64_t{1} << 60)) {
    const uint64_t used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes").value_or(0);
    return *limit > used ? *limit - used : 0;
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> available_memory_bytes() {
  if (const char* env = std::getenv("MOE_MEMORY_LIMIT_BYTES"); env != nullptr && *env != '\0') {
    try {
      size_t used = 0;
      const unsigned long long v = std::stoull(env, &used);
      if (used == std::string(env).size() && v > 0) return v;
    } catch (const std::exception&) {
    }
  }
  const auto mem = meminfo_available();
  const auto cg = cgroup_available();
  if (mem && cg) return std::min(*mem, *cg);
  return mem ? mem : cg;
}

std::string format_bytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= 1000000000ull) {
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  } else if (bytes >= 1000000ull) {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(bytes) / 1e3);
  }
  return buf;
}

void check_memory(uint64_t bytes, const std::string& what) {
  const auto available = available_memory_bytes();
  if (!available || bytes <= *available) return;
  throw OutOfMemory(what + " needs " + format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes) but " +
                    format_bytes(*available) + " are available (MemAvailable, cgroup limit or " +
                    "MOE_MEMORY_LIMIT_BYTES)");
}

void release_pages(const void* data, uint64_t bytes) {
#if defined(MADV_PAGEOUT)
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (data == nullptr || bytes == 0 || page_size <= 0) return;
  const uint64_t page = static_cast<uint64_t>(page_size);
  const uint64_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uint64_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end <= begin) return;
  // A hint: its failure (an old kernel, memory that is not a mapping) changes nothing but the RSS.
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace moe::io

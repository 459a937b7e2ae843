// How much memory the process may still take, and the check that runs before a large allocation (a layer's
// converted or dequantized weights, the bf16 copies of bf16 compute), so that a layer that does not fit the
// machine is refused with numbers instead of failing in the allocator or the OOM killer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace moe::io {

// min(MemAvailable of /proc/meminfo, the cgroup's memory.max - memory.current (v2) or limit - usage (v1)),
// in bytes; nullopt when neither can be read (not Linux). MOE_MEMORY_LIMIT_BYTES, when set to a positive
// integer, replaces it (tests, and machines that share memory with other work).
std::optional<uint64_t> available_memory_bytes();

// Throws io::OutOfMemory when `bytes` exceeds available_memory_bytes(): "<what> needs 22.5 GB but 20.1 GB are
// available (MemAvailable / cgroup limit)". No-op when the available memory is unknown. `what` names the
// allocation and, ideally, what would make it smaller.
void check_memory(uint64_t bytes, const std::string& what);

// Tells the OS that this process will not read the whole pages inside [data, data + bytes) again soon
// (madvise MADV_PAGEOUT; a no-op where that is unknown): their contents stay (a later read faults them back
// in), and the clean pages of a mapped checkpoint leave the process's RSS at once instead of waiting for
// memory pressure. For the mapped tensors a layer has copied into its own layout (ExpertFfns' quantized
// panels).
void release_pages(const void* data, uint64_t bytes);

// "22.5 GB" (decimal units, one decimal), for messages and reports.
std::string format_bytes(uint64_t bytes);

}  // namespace moe::io

// The error type of weights I/O.
#pragma once

#include <stdexcept>

namespace moe::io {

// Thrown by moe_io when the operating system fails it: a file or directory that does not exist or cannot be
// opened, read, mapped, written or renamed. Malformed content (bad headers, wrong shapes, unknown names) is
// std::invalid_argument instead. Derives from std::runtime_error, so handlers of that keep working; the C API
// maps exactly this type to MOE_IO_ERROR.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown before an allocation that would not fit: the bytes a layer's weights (or their prepared copies)
// need against the memory this process may still take (moe/io/memory.h). The message names both and what
// to change (storage dtype, a smaller layer). The C API maps it to MOE_OUT_OF_MEMORY, Python to MemoryError.
class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace moe::io

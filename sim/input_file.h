// Reading an input file (logits, metadata, trace, scenario) whole, with errors that name what is wrong with
// the path itself: missing, a directory, not readable, or larger than the caller's limit.
#pragma once

#include <cstdint>
#include <string>

namespace moe::sim {

// The bytes of `path`. `what` names the file's role in messages ("logits file", "trace file", ...).
// Throws DataError:
//   "cannot open <what> '<path>': no such file or directory"
//   "<what> '<path>' is a directory, not a file"
//   "cannot read <what> '<path>': <strerror>"       (permissions, I/O errors)
//   "<what> '<path>' is <n> bytes, more than the limit of <max_bytes> bytes"   (checked before reading)
// Pipes and character devices (e.g. --trace <(...)) are read to their end; a regular file's size is checked
// against max_bytes before anything is allocated.
std::string read_input_file(const std::string& path, const std::string& what,
                            uint64_t max_bytes = uint64_t{1} << 32);

}  // namespace moe::sim

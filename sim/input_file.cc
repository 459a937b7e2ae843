#include "sim/input_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "sim/errors.h"

namespace moe::sim {

std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      throw DataError("cannot open " + what + " '" + path + "': no such file or directory");
    }
    throw DataError("cannot read " + what + " '" + path + "': " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) throw DataError(what + " '" + path + "' is a directory, not a file");
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
    throw DataError(what + " '" + path + "' is " + std::to_string(st.st_size) +
                    " bytes, more than the limit of " + std::to_string(max_bytes) + " bytes");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw DataError("cannot read " + what + " '" + path +
                    "': " + (err != 0 ? std::strerror(err) : "open failed"));
  }
  std::string out;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > max_bytes) {
      throw DataError(what + " '" + path + "' is more than the limit of " + std::to_string(max_bytes) +
                      " bytes");
    }
  }
  if (in.bad()) throw DataError("cannot read " + what + " '" + path + "': read failed");
  return out;
}

}  // namespace moe::sim

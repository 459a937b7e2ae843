#include "sim/install_paths.h"

#include <cstdlib>
#include <system_error>

#include "sim/errors.h"

namespace moe::sim {

namespace fs = std::filesystem;

fs::path program_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw DataError("cannot find the running program (/proc/self/exe): " + ec.message());
  return exe.parent_path();
}

fs::path prefix_dir() {
  const fs::path dir = program_dir();
  if (dir.filename() == "moe" && dir.parent_path().filename() == "libexec")
    return dir.parent_path().parent_path();
  return dir.parent_path();
}

fs::path data_dir() {
  const fs::path dir = prefix_dir() / "share" / "moe";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw DataError("moe-sim's data directory " + dir.string() +
                    " is missing (the program expects <prefix>/share/moe beside <prefix>/bin; reinstall, or "
                    "give the paths explicitly)");
  }
  return dir;
}

fs::path cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return fs::path(xdg) / "moe";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    return fs::path(home) / ".cache" / "moe";
  }
  throw DataError("no cache directory: neither XDG_CACHE_HOME nor HOME is set");
}

std::string resolve_scenario(const std::string& path) {
  std::error_code ec;
  if (path.empty() || fs::exists(path, ec) || path.find('/') != std::string::npos) return path;
  const std::string name = path.ends_with(".toml") ? path : path + ".toml";
  try {
    const fs::path shipped = data_dir() / "scenarios" / name;
    if (fs::is_regular_file(shipped, ec)) return shipped.string();
  } catch (const DataError&) {
  }
  return path;
}

}  // namespace moe::sim

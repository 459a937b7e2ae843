#include "sim/diverge/corpus.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "sim/install_paths.h"

extern char** environ;

namespace moe::sim::diverge {
namespace fs = std::filesystem;
namespace {

bool has_heldout(const fs::path& dir) {
  std::error_code ec;
  return fs::file_size(dir / "heldout.txt", ec) > 0 && !ec;
}

// Runs `bash script out` with its output on stderr; returns its exit status (or -1 when it cannot start).
int run_script(const fs::path& script, const fs::path& out) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  std::vector<std::string> args = {"bash", script.string(), out.string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "bash", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

fs::path locate_corpus(std::ostream& note) {
  const fs::path data = data_dir();
  if (has_heldout(data / "kjv")) return data / "kjv";
  const fs::path cache = cache_dir() / "kjv";
  if (has_heldout(cache)) return cache;

  const fs::path script = data / "scripts" / "fetch-corpus.sh";
  const std::string command = "bash " + script.string() + " " + cache.string();
  note << "moe-sim: note: preparing the held-out text once, into " << cache.string() << " (" << command << ")"
       << std::endl;
  std::error_code ec;
  fs::create_directories(cache.parent_path(), ec);
  // Built beside the cache and renamed into place, so that a concurrent run never reads half a file.
  const fs::path staging = cache.parent_path() / ("kjv.tmp." + std::to_string(::getpid()));
  const int status = ec ? -1 : run_script(script, staging);
  if (status == 0) {
    fs::rename(staging, cache, ec);
    if (ec) fs::remove_all(staging, ec);  // another run put it there first
    if (has_heldout(cache)) return cache;
  }
  fs::remove_all(staging, ec);
  throw std::runtime_error(
      "diverge: the held-out text (heldout.txt) is missing and could not be prepared: run `" + command +
      "` (it needs the packages bible-kjv and bible-kjv-text: apt install bible-kjv bible-kjv-text), or give "
      "--corpus DIR");
}

}  // namespace moe::sim::diverge

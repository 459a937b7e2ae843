// Where moe-sim finds its data: beside the program, by one rule for an install and a build tree.
//
//   <prefix>/bin/moe-sim                     (build tree: build/bin/moe-sim)
//   <prefix>/share/moe/models/kjv-moe/       the trained model and its tokenizer (build tree: links to the
//   <prefix>/share/moe/scenarios/*.toml      sources' models/kjv-moe, sim/scenarios and scripts/)
//   <prefix>/share/moe/scripts/fetch-corpus.sh
//   <prefix>/libexec/moe/moe-sim-mpi         moe-sim linked with MPI (sim/launch.h)
//
// Nothing here names the source tree, so an installed moe-sim works wherever its prefix is moved.
#pragma once

#include <filesystem>
#include <string>

namespace moe::sim {

// The directory of the running program (from /proc/self/exe), without symbolic links.
std::filesystem::path program_dir();

// The prefix the program is installed in: the parent of program_dir() (bin/), or its grandparent for a
// program in libexec/moe/.
std::filesystem::path prefix_dir();

// <prefix>/share/moe. Throws DataError naming the directory when it does not exist.
std::filesystem::path data_dir();

// The user's cache for data moe-sim prepares itself: $XDG_CACHE_HOME/moe, else $HOME/.cache/moe (not created
// here). Throws DataError when neither variable is set.
std::filesystem::path cache_dir();

// A scenario given by name: `path` itself when it names a file, else, for a bare name such as "serving" or
// "serving.toml", the shipped <data_dir>/scenarios/<name>.toml when that exists; otherwise `path` unchanged
// (the reader then names it as missing).
std::string resolve_scenario(const std::string& path);

}  // namespace moe::sim

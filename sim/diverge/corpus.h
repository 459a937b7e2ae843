// The held-out KJV text the divergence lab draws stranger prompts from (heldout.txt: Ruth, Ecclesiastes,
// Jonah, Acts, Philippians; scripts/fetch-corpus.sh builds it from Debian's bible-kjv-text).
#pragma once

#include <filesystem>
#include <ostream>

namespace moe::sim::diverge {

// The directory holding heldout.txt when none is given: <data_dir>/kjv (a build tree links it to the corpus
// the tests build), else the user's cache <cache_dir>/kjv (sim/install_paths.h); when neither has it, it is
// prepared once into the cache by <data_dir>/scripts/fetch-corpus.sh (a few seconds; it needs the packages
// bible-kjv and bible-kjv-text, which the moe package depends on), saying so on `note`. Throws
// std::runtime_error naming the one command that prepares it when it cannot.
std::filesystem::path locate_corpus(std::ostream& note);

}  // namespace moe::sim::diverge

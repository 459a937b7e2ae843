// RunStats as bytes and back: how the points a rank computed travel to the others (sim/distribute.h).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "sim/experiment.h"

namespace moe::sim {

// Appends `stats` to `out`: every field's bits (integers and doubles copied as they are, vectors with their
// lengths), so that a decoded RunStats prints the same bytes as the one encoded. Host byte order: the ranks
// of one job share it.
void encode_run_stats(const RunStats& stats, std::string& out);

// Reads one RunStats from `bytes` at `offset` and moves `offset` past it. Throws DataError when the bytes end
// early or a length is impossible.
RunStats decode_run_stats(std::string_view bytes, size_t& offset);

}  // namespace moe::sim

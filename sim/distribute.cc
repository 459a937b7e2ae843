#include "sim/distribute.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "moe/parallel/communicator.h"
#include "sim/errors.h"
#include "sim/run_stats_codec.h"

namespace moe::sim {
namespace {

// A rank's contribution: a status byte, then its points' statistics (kOk) or the error's message.
enum Status : char { kOk = 0, kUsage = 1, kData = 2, kOther = 3 };

std::string failure(Status status, const char* what) {
  return std::string(1, status) + what;
}

}  // namespace

PointRange point_range(size_t count, int rank, int ranks) {
  const size_t n = static_cast<size_t>(ranks), r = static_cast<size_t>(rank);
  const size_t base = count / n, extra = count % n;
  const size_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

std::vector<PointResult> compute_points(size_t count, parallel::Communicator* comm,
                                        const std::function<std::vector<PointResult>(PointRange)>& compute) {
  const int ranks = comm ? comm->size() : 1;
  const int rank = comm ? comm->rank() : 0;
  const PointRange range = point_range(count, rank, ranks);
  if (ranks == 1) {
    std::vector<PointResult> results = compute(range);
    if (results.size() != count) throw std::logic_error("compute_points: compute returned the wrong count");
    return results;
  }
  std::string mine;
  try {
    const std::vector<PointResult> results = compute(range);
    if (results.size() != range.size())
      throw std::logic_error("compute_points: compute returned the wrong count");
    mine.push_back(kOk);
    for (const PointResult& p : results) {
      mine.append(reinterpret_cast<const char*>(&p.requests), sizeof p.requests);
      encode_run_stats(p.stats, mine);
    }
  } catch (const UsageError& e) {
    mine = failure(kUsage, e.what());
  } catch (const DataError& e) {
    mine = failure(kData, e.what());
  } catch (const std::exception& e) {
    mine = failure(kOther, e.what());
  }
  std::vector<size_t> sizes(static_cast<size_t>(ranks));
  comm->all_gather_sizes(mine.size(), sizes);
  size_t total = 0;
  for (size_t s : sizes) total += s;
  std::string all(total, '\0');
  comm->all_gather_v(mine.data(), mine.size(), all.data(), sizes);

  std::vector<PointResult> results;
  results.reserve(count);
  size_t offset = 0;
  for (int r = 0; r < ranks; ++r) {
    const size_t end = offset + sizes[static_cast<size_t>(r)];
    const std::string_view block(all.data() + offset, end - offset);
    if (block.empty() || block[0] != kOk) {
      const std::string message = block.empty() ? std::string("no result") : std::string(block.substr(1));
      const std::string where = " (rank " + std::to_string(r) + " of " + std::to_string(ranks) + ")";
      if (!block.empty() && block[0] == kUsage) throw UsageError(message);
      if (!block.empty() && block[0] == kData) throw DataError(message + where);
      throw std::runtime_error(message + where);
    }
    size_t at = 1;
    const PointRange theirs = point_range(count, r, ranks);
    for (size_t i = 0; i < theirs.size(); ++i) {
      PointResult p;
      if (block.size() - at < sizeof p.requests)
        throw DataError("compute_points: rank " + std::to_string(r) + "'s bytes end early");
      std::memcpy(&p.requests, block.data() + at, sizeof p.requests);
      at += sizeof p.requests;
      p.stats = decode_run_stats(block, at);
      results.push_back(std::move(p));
    }
    if (at != block.size())
      throw DataError("compute_points: rank " + std::to_string(r) + " sent extra bytes");
    offset = end;
  }
  return results;
}

}  // namespace moe::sim

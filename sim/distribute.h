// Spreading the independent points of an experiment (a sweep's points, a run's seeds) over the processes of
// an MPI job (`mpirun -np N moe-sim sweep ...`), with the same results, in the same order, as one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "sim/experiment.h"

namespace moe::parallel {
class Communicator;
}

namespace moe::sim {

// The points [begin, end) that one rank computes.
struct PointRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// What one point computed: its statistics and the requests of its workload.
struct PointResult {
  RunStats stats;
  int64_t requests = 0;
};

// Rank `rank` of `ranks` takes a contiguous block of the `count` points; the first count % ranks ranks take
// one point more. Contiguous, so that a rank's points mostly share a workload (a sweep plans all its points
// of one axis combination in one streamed pass).
PointRange point_range(size_t count, int rank, int ranks);

// Computes `count` points spread over the ranks of `comm` (nullptr: all in this process) and returns every
// point's result on every rank, in point order. This rank calls compute(point_range(count, rank, size)),
// which returns the results of those points in order; then every rank's results are gathered
// (Communicator::all_gather_v; exact bits, sim/run_stats_codec.h). An error on any rank is rethrown on every
// rank - the lowest failing rank's, as UsageError, DataError or std::runtime_error - so that every process of
// the job ends with the same message and exit status. Collective: every rank calls it with the same count.
std::vector<PointResult> compute_points(size_t count, parallel::Communicator* comm,
                                        const std::function<std::vector<PointResult>(PointRange)>& compute);

}  // namespace moe::sim

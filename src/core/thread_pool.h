// A fixed pool of worker threads for data-parallel loops. parallel_for splits [0, n) into
// contiguous chunks, one per thread; chunks are claimed by whichever thread is running (the caller
// included), so a descheduled worker does not stall the region. Nested calls run serially.
#pragma once
#include <cstdint>
#include <functional>

namespace tetra {

// Number of threads used by parallel_for (default: hardware concurrency; TETRA_NUM_THREADS).
int num_threads();
void set_num_threads(int n);

// fn(begin, end) is called on disjoint ranges covering [0, n). Ranges are deterministic for a
// given (n, num_threads) so reductions inside a range are reproducible.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tetra

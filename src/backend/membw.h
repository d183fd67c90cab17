// In-process memory read-bandwidth probe: the roofline denominator of `tetra bench` / `tetra doctor`
// (a memory-bound kernel's GB/s divided by this is its % of the limit). It streams a buffer far
// larger than the caches with wide loads and a reduction that keeps every load live, and reports
// the best of several timed passes after a warm-up. Method and numbers: docs/perf.md.
#pragma once
#include <cstddef>

#include "backend/backend.h"

namespace tetra {

// Measured sustained read bandwidth in bytes/s of the backend's device memory. bytes = 0: 256 MiB
// on the CPU; on CUDA 1 GiB, at most a quarter of the free memory. bytes ≥ 1 MiB (else an error).
// CPU: every pool thread (core/thread_pool) reads its share with AVX2 loads (SSE2 elsewhere).
// CUDA: a read-only kernel on the backend's stream, timed with CUDA events. Blocks the caller.
double measure_read_bandwidth(backend& be, size_t bytes = 0);

namespace cuda {
// The CUDA implementation (src/backend/cuda/membw.cu); only in builds with TETRA_HAVE_CUDA.
double measure_read_bandwidth_cuda(backend& be, size_t bytes);
}  // namespace cuda

}  // namespace tetra

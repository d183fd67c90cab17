// Helpers of the CUDA kernel benchmarks (bench_matmul.cu, bench_moe_stream.cu): a checked CUDA call,
// device buffers filled with hashed words, and the median time of a batch of launches on g_stream
// (plain, or replayed from one CUDA graph). Each benchmark is one translation unit: the definitions
// are local to it.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(expr)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #expr); \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)

namespace {

__global__ void fill_kernel(uint32_t* p, size_t n_words, uint32_t seed, uint32_t and_mask, uint32_t or_mask) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        p[i] = (h & and_mask) | or_mask;
    }
}

void fill(void* p, size_t bytes, uint32_t seed, uint32_t and_mask = ~0u, uint32_t or_mask = 0) {
    fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed, and_mask, or_mask);
    CK(cudaGetLastError());
}

cudaStream_t g_stream = nullptr;  // the stream every timed launch goes to (graphs need a non-legacy one)

template <class F>
double median_us(F&& launch_batch, int batch, int samples = 15) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    launch_batch();  // warm-up (also plans cuBLASLt heuristics)
    launch_batch();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int s = 0; s < samples; ++s) {
        CK(cudaEventRecord(a, g_stream));
        launch_batch();
        CK(cudaEventRecord(b, g_stream));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(1000.0 * ms / batch);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// The same batch captured once into a CUDA graph on g_stream and replayed (after a warm-up of
// the plain batch, so cuBLASLt has planned the shape before the capture).
template <class F>
double median_graph_us(F&& launch_batch, int batch, int samples = 15) {
    launch_batch();
    CK(cudaStreamSynchronize(g_stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
    launch_batch();
    CK(cudaStreamEndCapture(g_stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    double us = median_us([&] { CK(cudaGraphLaunch(exec, g_stream)); }, batch, samples);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    return us;
}

}  // namespace

// bench_sync: what one dependent step costs on the GPU, as a kernel boundary or as a grid-wide
// barrier inside one persistent kernel — the question behind a persistent decode kernel
// (docs/perf.md, session 16). Standalone (no tetra sources; CMake target bench_sync in CUDA builds,
// or nvcc -O3 -arch=sm_90a bench_sync.cu). Args: [steps] (default 256). PDL needs sm_90.
//
// Every variant runs the same chain of N steps over G CTAs (one per SM, 256 threads): in step s,
// CTA c reads the value CTA (c + 1) % G wrote in step s − 1, adds one, and writes its own slot, so
// every step depends on another CTA's previous step. Optionally every CTA also streams `bytes`
// of a read-only buffer per step (weights: a kernel may read them before its PDL wait, a
// persistent kernel before its barrier). Variants:
//   graph        N launches captured in one CUDA graph, plain stream order
//   graph+pdl    the same with programmatic dependent launch (griddepcontrol.wait / launch_dependents)
//   persist-ctr  one launch, N steps, barrier: one atomic counter per launch, spin on it
//   persist-flag one launch, N steps, barrier: each CTA publishes its step in its own flag, every
//                CTA's warp 0 polls all flags (no atomics)
// The chain's final values are checked (each slot must equal N), so a broken barrier fails.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

constexpr int THREADS = 256;

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Stream `bytes` of w (this CTA's share at offset c·bytes) with 16-B loads; returns a value that
// depends on all of them so the loads are not removed.
__device__ __forceinline__ unsigned stream(const uint4* w, size_t bytes, int c) {
    const uint4* p = w + size_t(c) * (bytes / 16);
    unsigned acc = 0;
    for (size_t i = threadIdx.x; i < bytes / 16; i += THREADS) {
        uint4 v;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p + i));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    return acc;
}

// One step as its own kernel. slots: [2][G]; step s reads half (s & 1), writes half (s + 1) & 1.
template <bool PDL>
__global__ void __launch_bounds__(THREADS) step_kernel(unsigned* slots, int s, int G, const uint4* w, size_t bytes,
                                                        unsigned* sink) {
    const int c = blockIdx.x;
    unsigned acc = bytes ? stream(w, bytes, c) : 0;  // weights: before the wait
#if __CUDA_ARCH__ >= 900
    if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    if (threadIdx.x == 0) {
        unsigned v = slots[(s & 1) * G + (c + 1) % G];
        slots[((s + 1) & 1) * G + c] = v + 1;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

// All N steps in one launch. counter: monotone (step s ends when it reaches (s + 1)·G).
template <int MODE>  // 0: counter, 1: flags
__global__ void __launch_bounds__(THREADS) persist_kernel(unsigned* slots, int N, int G, unsigned* counter,
                                                           unsigned* flags, const uint4* w, size_t bytes,
                                                           unsigned* sink) {
    const int c = blockIdx.x;
    unsigned acc = 0;
    for (int s = 0; s < N; ++s) {
        if (bytes) acc ^= stream(w + (size_t(s % 8) * G * 65536) / 16, bytes, c);
        if (threadIdx.x == 0) {
            unsigned v = slots[(s & 1) * G + (c + 1) % G];
            slots[((s + 1) & 1) * G + c] = v + 1;
        }
        __syncthreads();
        if (MODE == 0) {
            if (threadIdx.x == 0) {
                red_release_add(counter, 1);
                const unsigned target = unsigned(s + 1) * unsigned(G);
                while (ld_acquire(counter) < target) {
                }
            }
        } else {
            if (threadIdx.x == 0) st_release(flags + c, unsigned(s + 1));
            if (threadIdx.x < 32) {
                for (int i = threadIdx.x; i < G; i += 32)
                    while (ld_acquire(flags + i) < unsigned(s + 1)) {
                    }
                __syncwarp();
            }
        }
        __syncthreads();
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

int main(int argc, char** argv) {
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int G = sms, N = argc > 1 ? std::atoi(argv[1]) : 256;
    const size_t byte_opts[] = {0, 16384, 65536};
    unsigned *slots, *counter, *flags, *sink;
    uint4* w;
    const size_t w_bytes = size_t(G) * 65536 * 8;  // rotate over 8 copies: beyond L2 at 64 KB/CTA
    CK(cudaMalloc(&slots, 2 * G * sizeof(unsigned)));
    CK(cudaMalloc(&counter, sizeof(unsigned)));
    CK(cudaMalloc(&flags, G * sizeof(unsigned)));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    CK(cudaMalloc(&w, w_bytes));
    CK(cudaMemset(w, 1, w_bytes));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    auto reset = [&]() {
        CK(cudaMemsetAsync(slots, 0, 2 * G * sizeof(unsigned), st));
        CK(cudaMemsetAsync(counter, 0, sizeof(unsigned), st));
        CK(cudaMemsetAsync(flags, 0, G * sizeof(unsigned), st));
    };
    auto check = [&](const char* what) {
        std::vector<unsigned> h(2 * G);
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(h.data(), slots, h.size() * 4, cudaMemcpyDeviceToHost));
        for (int c = 0; c < G; ++c)
            if (h[(N & 1) * G + c] != unsigned(N)) {
                std::printf("FAIL %s: slot %d = %u, expected %d\n", what, c, h[(N & 1) * G + c], N);
                std::exit(1);
            }
    };
    auto time_it = [&](auto&& launch_once, const char* what) {
        std::vector<float> v;
        for (int rep = 0; rep < 12; ++rep) {
            reset();
            CK(cudaEventRecord(e0, st));
            launch_once();
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            check(what);
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep >= 2) v.push_back(ms);
        }
        std::sort(v.begin(), v.end());
        return v[v.size() / 2] * 1000.0f / N;  // µs per step
    };

    std::printf("bench_sync: %d CTAs x %d threads, %d steps (median of 10, us per step)\n", G, THREADS, N);
    std::printf("%-14s %10s %10s %10s\n", "variant", "0 KB/CTA", "16 KB/CTA", "64 KB/CTA");
    for (int variant = 0; variant < 4; ++variant) {
        const char* names[] = {"graph", "graph+pdl", "persist-ctr", "persist-flag"};
        std::printf("%-14s", names[variant]);
        for (size_t bytes : byte_opts) {
            float us = 0;
            if (variant < 2) {
                cudaGraph_t g;
                cudaGraphExec_t ge;
                CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
                for (int s = 0; s < N; ++s) {
                    const uint4* wp = w + (size_t(s % 8) * G * 65536) / 16;
                    cudaLaunchConfig_t cfg = {};
                    cfg.gridDim = dim3(G);
                    cfg.blockDim = dim3(THREADS);
                    cfg.stream = st;
                    cudaLaunchAttribute attr[1];
                    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                    attr[0].val.programmaticStreamSerializationAllowed = 1;
                    cfg.attrs = attr;
                    cfg.numAttrs = variant == 1 ? 1 : 0;
                    if (variant == 1)
                        CK(cudaLaunchKernelEx(&cfg, step_kernel<true>, slots, s, G, wp, bytes, sink));
                    else
                        CK(cudaLaunchKernelEx(&cfg, step_kernel<false>, slots, s, G, wp, bytes, sink));
                }
                CK(cudaStreamEndCapture(st, &g));
                CK(cudaGraphInstantiate(&ge, g, 0));
                us = time_it([&] { CK(cudaGraphLaunch(ge, st)); }, names[variant]);
                CK(cudaGraphExecDestroy(ge));
                CK(cudaGraphDestroy(g));
            } else {
                us = time_it(
                    [&] {
                        if (variant == 2)
                            persist_kernel<0><<<G, THREADS, 0, st>>>(slots, N, G, counter, flags, w, bytes, sink);
                        else
                            persist_kernel<1><<<G, THREADS, 0, st>>>(slots, N, G, counter, flags, w, bytes, sink);
                        CK(cudaGetLastError());
                    },
                    names[variant]);
            }
            std::printf(" %10.3f", us);
        }
        std::printf("\n");
    }
    std::printf("(weights: step s reads copy s %% 8 of %.1f MB in all, beyond L2)\n", w_bytes / 1e6);
    return 0;
}

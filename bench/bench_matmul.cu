// Kernel benchmark of the CUDA matmuls (not a test): measures the device's streaming read bandwidth
// in-process (kernels.md §6.1), then W4A16 NVFP4 (matmul_nvfp4_w4a16_sm80) at Llama-3.1-8B shapes
// beside cuBLASLt BF16 at the same shapes, and the bf16 lm_head. CUDA events after warm-up, median
// of 15 samples of 10 launches each; weights rotate over enough copies to exceed the 50 MB L2.
// Prints: shape, M, µs, GB/s (weights + x + out bytes), % of measured read bandwidth, TFLOP/s,
// cuBLAS time / ours. Usage: bench_matmul [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/matmul_launch.h"

using namespace tetra;

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

__global__ void read_kernel(const uint4* p, size_t n_vec, uint32_t* sink) {
    uint32_t acc = 0;
    size_t stride = size_t(gridDim.x) * blockDim.x, i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    for (; i + 3 * stride < n_vec; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(p + i + u * stride));
#pragma unroll
        for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n_vec; i += stride) acc ^= p[i].x;
    if (acc == 0x9E3779B9u) *sink = acc;
}

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
        CK(cudaEventRecord(a));
        launch_batch();
        CK(cudaEventRecord(b));
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

double measure_read_bw(int sms) {
    size_t bytes = size_t(2) << 30;
    void* p = nullptr;
    uint32_t* sink = nullptr;
    CK(cudaMalloc(&p, bytes));
    CK(cudaMalloc(&sink, 4));
    fill(p, bytes, 1);
    double us = median_us([&] { read_kernel<<<sms * 8, 256>>>(static_cast<const uint4*>(p), bytes / 16, sink); }, 1, 9);
    CK(cudaFree(p));
    CK(cudaFree(sink));
    return double(bytes) / (us * 1e-6) / 1e9;
}

// Copies of a weight so that one pass over them exceeds L2 (≥ 200 MB in total).
int copies_for(size_t bytes) { return int(std::max<size_t>(1, (size_t(200) << 20) / bytes + 1)); }

struct row {
    std::string shape;
    long m;
    double us, gbs, pct, tflops, vs_cublas;
};

void print_row(const row& r) {
    std::printf("| %-26s | %5ld | %10.2f | %7.0f | %5.1f %% | %7.2f | %6.2f |\n", r.shape.c_str(), r.m, r.us, r.gbs,
                r.pct, r.tflops, r.vs_cublas);
    std::fflush(stdout);
}

}  // namespace

// --pattern: the small-M kernel's weight access pattern alone (each warp streams its 16-row tile's
// 512-B chunks, `DEPTH` 16-B loads in flight per lane), to separate memory from compute limits.
template <int DEPTH>
__global__ void pattern_kernel(const uint4* codes, long k_chunks, long n_tiles, int chunks_per_split, uint32_t* sink) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long tile = blockIdx.x * 8L + warp;
    if (tile >= n_tiles) return;
    long c0 = long(blockIdx.y) * chunks_per_split, c1 = c0 + chunks_per_split < k_chunks ? c0 + chunks_per_split : k_chunks;
    const uint4* base = codes + tile * k_chunks * 32 + lane;
    uint32_t acc = 0;
    for (long c = c0; c < c1; c += DEPTH) {
        uint4 v[DEPTH];
#pragma unroll
        for (int u = 0; u < DEPTH; ++u)
            if (c + u < c1)
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(base + (c + u) * 32));
            else v[u] = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < DEPTH; ++u) acc ^= v[u].x + v[u].y + v[u].z + v[u].w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}

static void run_pattern(int sms, double bw) {
    struct nk { long n, k; };
    for (nk s : {nk{4096, 4096}, nk{28672, 4096}, nk{4096, 14336}}) {
        cuda::w4a16_sm80_dims d = cuda::w4a16_sm80_dims_of(s.n, s.k);
        int copies = copies_for(d.codes_bytes);
        std::vector<void*> bufs(static_cast<size_t>(copies));
        for (auto& b : bufs) { CK(cudaMalloc(&b, d.codes_bytes)); fill(b, d.codes_bytes, 3); }
        uint32_t* sink = nullptr;
        CK(cudaMalloc(&sink, 4));
        long rb = (d.n_tiles + 7) / 8;
        for (int splits : {1, 2, 4, 8}) {
            int cps = int((d.k_chunks + splits - 1) / splits);
            for (int depth : {8, 16}) {
                int ci = 0;
                double us = median_us([&] {
                    for (int b = 0; b < 10; ++b) {
                        const uint4* p = static_cast<const uint4*>(bufs[size_t(ci++ % copies)]);
                        if (depth == 8) pattern_kernel<8><<<dim3(unsigned(rb), unsigned(splits)), 256>>>(p, d.k_chunks, d.n_tiles, cps, sink);
                        else pattern_kernel<16><<<dim3(unsigned(rb), unsigned(splits)), 256>>>(p, d.k_chunks, d.n_tiles, cps, sink);
                    }
                }, 10);
                double gbs = double(d.codes_bytes) / us / 1e3;
                std::printf("pattern %ldx%ld splits %d depth %2d: %7.2f us %6.0f GB/s %5.1f %% (CTAs %ld)\n", s.n, s.k,
                            splits, depth, us, gbs, 100 * gbs / bw, rb * splits);
            }
        }
        for (void* b : bufs) CK(cudaFree(b));
        CK(cudaFree(sink));
    }
    (void)sms;
}

// --one N K M: 20 launches of the W4A16 launcher on one shape, for a profiler (ncu) to pick from.
static int run_one(long n, long k, long m) {
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cuda::w4a16_sm80_dims d = cuda::w4a16_sm80_dims_of(n, k);
    void *pc, *ps, *x, *out, *part, *cnt, *deq, *lt;
    CK(cudaMalloc(&pc, d.codes_bytes));
    CK(cudaMalloc(&ps, d.scales_bytes));
    fill(pc, d.codes_bytes, 1);
    fill(ps, d.scales_bytes, 2, 0x1F1F1F1Fu, 0x28282828u);
    cuda::w4a16_sm80_workspace ws = cuda::w4a16_sm80_workspace_need(m, n, k, sms);
    CK(cudaMalloc(&x, size_t(m * k) * 2));
    CK(cudaMalloc(&out, size_t(m * n) * 2));
    CK(cudaMalloc(&part, std::max<size_t>(ws.partial_bytes, 4)));
    CK(cudaMalloc(&cnt, std::max<size_t>(ws.counter_count * 4, 4)));
    CK(cudaMemset(cnt, 0, std::max<size_t>(ws.counter_count * 4, 4)));
    CK(cudaMalloc(&deq, std::max<size_t>(ws.dequant_bytes, 4)));
    CK(cudaMalloc(&lt, cuda::CUBLASLT_WORKSPACE_BYTES));
    fill(x, size_t(m * k) * 2, 3, 0x3FFF3FFFu, 0x3C003C00u);
    ws.partial = part, ws.counters = static_cast<int*>(cnt), ws.dequant = deq;
    ws.cublas = lt, ws.cublas_bytes = cuda::CUBLASLT_WORKSPACE_BYTES;
    cuda::w4a16_sm80_weight w{pc, ps, n, k, 0.01f};
    for (int i = 0; i < 20; ++i) cuda::matmul_nvfp4_w4a16_sm80_launch(x, m, w, out, ws, sms, 0);
    CK(cudaDeviceSynchronize());
    return 0;
}

int main(int argc, char** argv) {
    bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    if (argc == 5 && std::strcmp(argv[1], "--one") == 0) return run_one(atol(argv[2]), atol(argv[3]), atol(argv[4]));
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, dev));
    double bw = measure_read_bw(sms);
    std::printf("device: %s, %d SMs; measured streaming read bandwidth %.0f GB/s\n\n", prop.name, sms, bw);
    if (argc > 1 && std::strcmp(argv[1], "--pattern") == 0) {
        run_pattern(sms, bw);
        return 0;
    }

    struct nk { long n, k; const char* what; };
    std::vector<nk> shapes = {{4096, 4096, "o_proj"}, {6144, 4096, "qkv"}, {28672, 4096, "gate+up"},
                              {4096, 14336, "down"}};
    std::vector<long> ms = {1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096};
    if (quick) ms = {1, 16, 1024};
    const long m_max = 4096;

    std::printf("| shape (N x K)              |     M |         us |    GB/s | %% of BW | TFLOP/s | cuBLAS/ours |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    void* ws_cublas = nullptr;
    CK(cudaMalloc(&ws_cublas, cuda::CUBLASLT_WORKSPACE_BYTES));
    for (const nk& s : shapes) {
        cuda::w4a16_sm80_dims d = cuda::w4a16_sm80_dims_of(s.n, s.k);
        size_t wbytes = d.codes_bytes + d.scales_bytes;
        int copies = copies_for(wbytes);
        std::vector<cuda::w4a16_sm80_weight> ws(static_cast<size_t>(copies));
        std::vector<void*> bufs;
        for (int c = 0; c < copies; ++c) {
            void *pc = nullptr, *ps = nullptr;
            CK(cudaMalloc(&pc, d.codes_bytes));
            CK(cudaMalloc(&ps, d.scales_bytes));
            fill(pc, d.codes_bytes, 10 + c);
            fill(ps, d.scales_bytes, 20 + c, 0x1F1F1F1Fu, 0x28282828u);  // e4m3 in [2^-2, 2)
            ws[size_t(c)] = {pc, ps, s.n, s.k, 0.01f};
            bufs.push_back(pc), bufs.push_back(ps);
        }
        cuda::w4a16_sm80_workspace wsp = cuda::w4a16_sm80_workspace_need(m_max, s.n, s.k, sms);
        void *part = nullptr, *cnt = nullptr, *deq = nullptr, *x = nullptr, *out = nullptr;
        CK(cudaMalloc(&part, std::max<size_t>(wsp.partial_bytes, 4)));
        CK(cudaMalloc(&cnt, std::max<size_t>(wsp.counter_count * 4, 4)));
        CK(cudaMemset(cnt, 0, std::max<size_t>(wsp.counter_count * 4, 4)));
        CK(cudaMalloc(&deq, wsp.dequant_bytes));
        CK(cudaMalloc(&x, size_t(m_max * s.k) * 2));
        CK(cudaMalloc(&out, size_t(m_max * s.n) * 2));
        fill(x, size_t(m_max * s.k) * 2, 5, 0x3FFF3FFFu, 0x3C003C00u);  // bf16 in ±[2^-7, 2)
        wsp.partial = part, wsp.counters = static_cast<int*>(cnt), wsp.dequant = deq;
        wsp.cublas = ws_cublas, wsp.cublas_bytes = cuda::CUBLASLT_WORKSPACE_BYTES;

        // cuBLAS BF16 baseline weights
        size_t bbytes = size_t(s.n * s.k) * 2;
        int bcopies = copies_for(bbytes);
        std::vector<void*> bw16(static_cast<size_t>(bcopies));
        for (int c = 0; c < bcopies; ++c) {
            CK(cudaMalloc(&bw16[size_t(c)], bbytes));
            fill(bw16[size_t(c)], bbytes, 30 + c, 0x3FFF3FFFu, 0x3C003C00u);
        }
        char name[64];
        std::snprintf(name, sizeof name, "%s %ldx%ld", s.what, s.n, s.k);
        for (long m : ms) {
            const int batch = 10;
            int ci = 0, bi = 0;
            double t_ours = median_us([&] {
                for (int b = 0; b < batch; ++b)
                    cuda::matmul_nvfp4_w4a16_sm80_launch(x, m, ws[size_t(ci++ % copies)], out, wsp, sms, 0);
            }, batch);
            double t_cub = median_us([&] {
                for (int b = 0; b < batch; ++b)
                    cuda::gemm_bf16_tn_launch(x, bw16[size_t(bi++ % bcopies)], out, m, s.n, s.k, s.n, 1.0f, ws_cublas,
                                              cuda::CUBLASLT_WORKSPACE_BYTES, 0);
            }, batch);
            double io = double(m) * s.k * 2 + double(m) * s.n * 2;
            double flop = 2.0 * m * s.n * s.k;
            row r{std::string("w4a16 ") + name, m, t_ours, (wbytes + io) / t_ours / 1e3, 0, flop / t_ours / 1e6,
                  t_cub / t_ours};
            r.pct = 100.0 * r.gbs / bw;
            print_row(r);
            row c{std::string("cublas bf16 ") + name, m, t_cub, (bbytes + io) / t_cub / 1e3, 0, flop / t_cub / 1e6, 1.0};
            c.pct = 100.0 * c.gbs / bw;
            print_row(c);
        }
        for (void* p : bufs) CK(cudaFree(p));
        for (void* p : bw16) CK(cudaFree(p));
        for (void* p : {part, cnt, deq, x, out}) CK(cudaFree(p));
    }

    // lm_head: dense bf16 through cuBLASLt (matmul_dense_bf16); one copy exceeds L2.
    {
        const long n = 128256, k = 4096;
        size_t bytes = size_t(n * k) * 2;
        void *w = nullptr, *x = nullptr, *out = nullptr;
        CK(cudaMalloc(&w, bytes));
        CK(cudaMalloc(&x, size_t(m_max * k) * 2));
        CK(cudaMalloc(&out, size_t(m_max * n) * 2));
        fill(w, bytes, 40, 0x3FFF3FFFu, 0x3C003C00u);
        fill(x, size_t(m_max * k) * 2, 41, 0x3FFF3FFFu, 0x3C003C00u);
        for (long m : ms) {
            const int batch = m >= 1024 ? 3 : 10;
            double t = median_us([&] {
                for (int b = 0; b < batch; ++b)
                    cuda::gemm_bf16_tn_launch(x, w, out, m, n, k, n, 1.0f, ws_cublas, cuda::CUBLASLT_WORKSPACE_BYTES, 0);
            }, batch, 7);
            double io = double(m) * k * 2 + double(m) * n * 2;
            row r{"dense bf16 lm_head 128256x4096", m, t, (bytes + io) / t / 1e3, 0, 2.0 * m * n * k / t / 1e6, 1.0};
            r.pct = 100.0 * r.gbs / bw;
            print_row(r);
        }
        for (void* p : {w, x, out}) CK(cudaFree(p));
    }
    CK(cudaFree(ws_cublas));
    return 0;
}

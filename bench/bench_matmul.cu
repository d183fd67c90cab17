// Kernel benchmark of the CUDA matmuls (not a test): measures the device's streaming read bandwidth
// in-process (kernels.md §6.1), then W4A16 NVFP4 (m ≤ 8 with x fitting in shared memory: the decode
// kernel matmul_nvfp4_w4a16_gemv_sm80; the sm80 launcher: small-M mma.sync up to 64 — its choice,
// and beside it small-M v1 where the launcher runs v2 — dequant + cuBLASLt above; --variants: the
// small-M plans and versions) at Llama-3.1-8B shapes beside
// cuBLASLt BF16 at the same shapes, and the bf16 lm_head. CUDA events after warm-up, median of 15
// samples of 10 launches each, (a) plain stream launches and (b) the same 10 launches captured in
// one CUDA graph and replayed (how decode runs); weights rotate over enough copies to exceed the
// 50 MB L2. Prints: shape, M, µs (stream, graph), GB/s and % of measured read bandwidth (graph),
// TFLOP/s, cuBLAS graph time / ours. Usage:
// bench_matmul [--quick | --variants | --sweep | --sweep-tw | --sweep-pattern | --splits | --large | --hot |
//               --pattern | --pattern-bulk | --one N K M [gemv | v1]]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/matmul_launch.h"
#include "bench_util.cuh"

using namespace tetra;

namespace {

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

}  // namespace

// --pattern: the small-M kernel's weight access pattern alone (each warp streams its 16-row tile's
// 512-B chunks, `DEPTH` 16-B loads in flight per lane), to separate memory from compute limits.
// LAYOUT 0: tile-major (a tile's chunks contiguous: the packed layout before 2026-11-23); 1:
// group-major (the 4-KB groups of every tile for group 0, then group 1, ...: the packed layout);
// 2: chunk-major (chunk 0 of every tile, ...).
template <int DEPTH, int LAYOUT = 0>
__global__ void pattern_kernel(const uint4* codes, long k_chunks, long n_tiles, int chunks_per_split, uint32_t* sink) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long tile = blockIdx.x * 8L + warp;
    if (tile >= n_tiles) return;
    long c0 = long(blockIdx.y) * chunks_per_split, c1 = c0 + chunks_per_split < k_chunks ? c0 + chunks_per_split : k_chunks;
    auto at = [&](long c) -> long {  // chunk index of (tile, c)
        return LAYOUT == 0 ? tile * k_chunks + c : LAYOUT == 1 ? ((c >> 3) * n_tiles + tile) * 8 + (c & 7) : c * n_tiles + tile;
    };
    const uint4* base = codes + lane;
    uint32_t acc = 0;
    for (long c = c0; c < c1; c += DEPTH) {
        uint4 v[DEPTH];
#pragma unroll
        for (int u = 0; u < DEPTH; ++u)
            if (c + u < c1)
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(base + at(c + u) * 32));
            else v[u] = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < DEPTH; ++u) acc ^= v[u].x + v[u].y + v[u].z + v[u].w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}

// The packed codes of an [n, k] weight in enough copies that one pass exceeds L2, and a sink word
// (the pattern kernels' output), freed at scope end.
struct pattern_bufs {
    cuda::w4a16_sm80_dims d;
    std::vector<void*> bufs;
    uint32_t* sink = nullptr;
    pattern_bufs(long n, long k) : d(cuda::w4a16_sm80_dims_of(n, k)) {
        bufs.resize(size_t(copies_for(d.codes_bytes)));
        for (auto& b : bufs) { CK(cudaMalloc(&b, d.codes_bytes)); fill(b, d.codes_bytes, 3); }
        CK(cudaMalloc(&sink, 4));
    }
    ~pattern_bufs() {
        for (void* b : bufs) cudaFree(b);
        cudaFree(sink);
    }
};

static void run_pattern(int sms, double bw) {
    using pattern_fn = void (*)(const uint4*, long, long, int, uint32_t*);
    const pattern_fn kernels[3][2] = {{pattern_kernel<8, 0>, pattern_kernel<16, 0>},  // [layout][depth 8 / 16]
                                      {pattern_kernel<8, 1>, pattern_kernel<16, 1>},
                                      {pattern_kernel<8, 2>, pattern_kernel<16, 2>}};
    struct nk { long n, k; };
    for (nk s : {nk{4096, 4096}, nk{28672, 4096}, nk{4096, 14336}}) {
        pattern_bufs pb(s.n, s.k);
        const cuda::w4a16_sm80_dims& d = pb.d;
        const long rb = (d.n_tiles + 7) / 8;
        for (int layout : {0, 1, 2})
        for (int splits : {1, 2, 4, 8}) {
            int cps = int((d.k_chunks + splits - 1) / splits);
            for (int depth : {8, 16}) {
                int ci = 0;
                double us = median_us([&] {
                    for (int b = 0; b < 10; ++b) {
                        const uint4* p = static_cast<const uint4*>(pb.bufs[size_t(ci++) % pb.bufs.size()]);
                        kernels[layout][depth == 16]<<<dim3(unsigned(rb), unsigned(splits)), 256>>>(p, d.k_chunks, d.n_tiles,
                                                                                                     cps, pb.sink);
                    }
                }, 10);
                double gbs = double(d.codes_bytes) / us / 1e3;
                std::printf("pattern %ldx%ld %s splits %d depth %2d: %7.2f us %6.0f GB/s %5.1f %% (CTAs %ld)\n", s.n, s.k,
                            layout == 0 ? "tile-major " : layout == 1 ? "group-major" : "chunk-major", splits, depth, us, gbs,
                            100 * gbs / bw, rb * splits);
            }
        }
    }
    (void)sms;
}

// --pattern-bulk (sm_90+): the group-major pattern streamed by 1-D bulk copies (one lane per warp
// issues each 4-KB group of its tile as PIECE-byte cp.async.bulk pieces into a ring of SLOTS group
// slots, completion on one mbarrier per slot), to compare the DRAM efficiency of bulk copies with
// 16-B loads on the same access pattern.
template <int SLOTS, int PIECE>
__global__ void pattern_bulk_kernel(const uint4* codes, long k_chunks, long n_tiles, int chunks_per_split, uint32_t* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint4 sm[];
    __shared__ __align__(8) uint64_t bar[8][SLOTS];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long tile = blockIdx.x * 8L + warp;
    long c0 = long(blockIdx.y) * chunks_per_split, c1 = c0 + chunks_per_split < k_chunks ? c0 + chunks_per_split : k_chunks;
    long g0 = c0 / 8, g1 = (c1 + 7) / 8;
    uint4* ring = sm + size_t(warp) * SLOTS * 256;  // 4 KB per slot
    if (lane == 0)
        for (int i = 0; i < SLOTS; ++i)
            asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(uint32_t(__cvta_generic_to_shared(&bar[warp][i]))));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // the inits before the copies
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
    if (tile >= n_tiles) return;
    auto issue = [&](long gi, int slot) {
        uint32_t b = uint32_t(__cvta_generic_to_shared(&bar[warp][slot]));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the warp's reads of the slot first
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(4096) : "memory");
        const char* src = reinterpret_cast<const char*>(codes + (gi * n_tiles + tile) * 256);
        uint32_t dst = uint32_t(__cvta_generic_to_shared(ring + slot * 256));
#pragma unroll
        for (int o = 0; o < 4096; o += PIECE)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst + o),
                         "l"(src + o), "r"(PIECE), "r"(b) : "memory");
    };
    if (lane == 0)
        for (int i = 0; i < SLOTS && g0 + i < g1; ++i) issue(g0 + i, i);
    uint32_t acc = 0;
    for (long gi = g0; gi < g1; ++gi) {
        int slot = int((gi - g0) % SLOTS);
        uint32_t parity = uint32_t(((gi - g0) / SLOTS) & 1);
        uint32_t b = uint32_t(__cvta_generic_to_shared(&bar[warp][slot]));
        asm volatile("{ .reg .pred p; W%=: mbarrier.try_wait.parity.shared.b64 p, [%0], %1; @!p bra W%=; }" ::"r"(b), "r"(parity) : "memory");
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint4 v = ring[slot * 256 + i * 32 + lane];
            acc ^= v.x + v.y + v.z + v.w;
        }
        __syncwarp();
        if (lane == 0 && gi + SLOTS < g1) issue(gi + SLOTS, slot);
    }
    if (acc == 0x9E3779B9u) *sink = acc;
#else
    __trap();  // no bulk copies below sm_90 (run_pattern_bulk checks the image first)
#endif
}

static void run_pattern_bulk(double bw) {
    int dev = 0, cc = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev));
    cudaFuncAttributes fa{};
    CK(cudaFuncGetAttributes(&fa, pattern_bulk_kernel<1, 4096>));
    if (cc < 9 || fa.binaryVersion < 90 || fa.ptxVersion < 90) {
        std::printf("--pattern-bulk needs sm_90+ code on an sm_90+ device; device sm_%d*, kernel image sm_%d (PTX %d)\n",
                    cc, fa.binaryVersion, fa.ptxVersion);
        return;
    }
    using fn = void (*)(const uint4*, long, long, int, uint32_t*);
    struct kv { const char* name; fn f; int slots; };
    const kv ks[] = {{"ld16 depth 8", nullptr, 1}, {"bulk 1x4096", pattern_bulk_kernel<1, 4096>, 1},
                     {"bulk 2x4096", pattern_bulk_kernel<2, 4096>, 2}, {"bulk 2x1024", pattern_bulk_kernel<2, 1024>, 2},
                     {"bulk 3x4096", pattern_bulk_kernel<3, 4096>, 3}};
    struct nk { long n, k; };
    for (nk s : {nk{4096, 4096}, nk{6144, 4096}, nk{28672, 4096}, nk{4096, 14336}}) {
        pattern_bufs pb(s.n, s.k);
        const cuda::w4a16_sm80_dims& d = pb.d;
        for (int splits : {1, 2, 4, 8}) {
            const long rb = (d.n_tiles + 7) / 8;
            const int cps = int((d.k_chunks + splits - 1) / splits + 7) / 8 * 8;  // whole groups per split
            for (const kv& k : ks) {
                size_t smem = size_t(8) * k.slots * 4096;
                if (k.f) CK(cudaFuncSetAttribute(k.f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
                int ci = 0;
                double us = median_us([&] {
                    for (int b = 0; b < 10; ++b) {
                        const uint4* p = static_cast<const uint4*>(pb.bufs[size_t(ci++) % pb.bufs.size()]);
                        const dim3 grid{unsigned(rb), unsigned(splits), 1u};
                        if (k.f) k.f<<<grid, 256, smem>>>(p, d.k_chunks, d.n_tiles, cps, pb.sink);
                        else pattern_kernel<8, 1><<<grid, 256>>>(p, d.k_chunks, d.n_tiles, cps, pb.sink);
                    }
                }, 10);
                CK(cudaGetLastError());
                double gbs = double(d.codes_bytes) / us / 1e3;
                std::printf("bulk-pattern %5ldx%-5ld splits %d %-13s: %7.2f us %5.1f %%\n", s.n, s.k, splits, k.name, us,
                            100 * gbs / bw);
            }
        }
    }
}

// --one N K M [gemv | v1]: 20 launches of the W4A16 launcher (or the decode kernel, or the small-M
// v1 kernel) on one shape, for a profiler (ncu) to pick from.
static int run_one(long n, long k, long m, bool gemv, bool v1) {
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
    cuda::w4a16_gemv_plan pl = cuda::w4a16_gemv_plan_of(n, k, sms);
    cuda::w4a16_sm80_workspace gws;
    void *gpart, *gcnt;
    CK(cudaMalloc(&gpart, pl.partial_bytes));
    CK(cudaMalloc(&gcnt, pl.counter_count * 4));
    CK(cudaMemset(gcnt, 0, pl.counter_count * 4));
    gws.partial = gpart, gws.partial_bytes = pl.partial_bytes;
    gws.counters = static_cast<int*>(gcnt), gws.counter_count = pl.counter_count;
    for (int i = 0; i < 20; ++i) {
        if (gemv) cuda::matmul_nvfp4_w4a16_gemv_launch(x, m, w, out, gws, sms, 0);
        else if (v1) {
            cuda::w4a16_small_config c;
            c.version = 1;
            cuda::matmul_nvfp4_w4a16_sm80_small_launch(x, m, w, out, ws, sms, 0, c);
        } else cuda::matmul_nvfp4_w4a16_sm80_launch(x, m, w, out, ws, sms, 0);
    }
    CK(cudaDeviceSynchronize());
    return 0;
}

// The small-M kernel configurations --variants compares (the first is the launcher's default).
struct small_variant { const char* name; cuda::w4a16_small_config cfg; };
static std::vector<small_variant> small_variants() {
    std::vector<small_variant> v;
    auto add = [&](const char* name, int version, int cps, int min_len, int early) {
        cuda::w4a16_small_config c;
        c.version = version, c.ctas_per_sm = cps, c.min_len = min_len, c.early_signal = early;
        v.push_back({name, c});
    };
    add("auto (default)", 0, 0, 0, 0);
    add("v2 plan", 2, 0, 0, 0);
    add("v2 plan early", 2, 0, 0, 1);
    add("v2 cps2", 2, 2, 0, 0);
    add("v2 cps2 early", 2, 2, 0, 1);
    add("v2 cps1", 2, 1, 0, 0);
    add("v2 cps2 min8 (v1's grid where k = 4096)", 2, 2, 8, 0);
    add("v1", 1, 0, 0, 0);
    return v;
}

// The W4A16 shapes of Llama-3.1-8B (N × K = out × in) every mode runs.
struct llama_shape { long n, k; const char* what; };
const llama_shape k_llama_shapes[] = {
    {4096, 4096, "o_proj"}, {6144, 4096, "qkv"}, {28672, 4096, "gate+up"}, {4096, 14336, "down"}};

// A weight shape with its copies (rotated so one pass exceeds L2), the W4A16 workspaces and the
// cuBLAS BF16 twin.
struct bench_shape {
    long n, k;
    const char* what;
    cuda::w4a16_sm80_dims d;
    size_t wbytes = 0, bbytes = 0;
    std::vector<cuda::w4a16_sm80_weight> ws;
    std::vector<void*> bufs, bw16;
    cuda::w4a16_sm80_workspace wsp, gws;  // sm80 launcher / decode kernel
    void *x = nullptr, *out = nullptr;
    bench_shape(long n_, long k_, const char* what_, long m_max, int sms, void* ws_cublas) : n(n_), k(k_), what(what_) {
        d = cuda::w4a16_sm80_dims_of(n, k);
        wbytes = d.codes_bytes + d.scales_bytes;
        int copies = copies_for(wbytes);
        for (int c = 0; c < copies; ++c) {
            void *pc = nullptr, *ps = nullptr;
            CK(cudaMalloc(&pc, d.codes_bytes));
            CK(cudaMalloc(&ps, d.scales_bytes));
            fill(pc, d.codes_bytes, 10 + c);
            fill(ps, d.scales_bytes, 20 + c, 0x1F1F1F1Fu, 0x28282828u);  // e4m3 in [2^-2, 2)
            ws.push_back({pc, ps, n, k, 0.01f});
            bufs.push_back(pc), bufs.push_back(ps);
        }
        wsp = cuda::w4a16_sm80_workspace_need(m_max, n, k, sms);
        for (const small_variant& v : small_variants())  // room for every small-M variant's plan
            wsp.partial_bytes = std::max(wsp.partial_bytes, cuda::w4a16_sm80_workspace_need(std::min(m_max, 64L), n, k, sms, v.cfg).partial_bytes);
        void *part, *cnt, *deq;
        CK(cudaMalloc(&part, std::max<size_t>(wsp.partial_bytes, 4)));
        CK(cudaMalloc(&cnt, std::max<size_t>(wsp.counter_count * 4, 4)));
        CK(cudaMemset(cnt, 0, std::max<size_t>(wsp.counter_count * 4, 4)));
        CK(cudaMalloc(&deq, std::max<size_t>(wsp.dequant_bytes, 4)));
        wsp.partial = part, wsp.counters = static_cast<int*>(cnt), wsp.dequant = deq;
        wsp.cublas = ws_cublas, wsp.cublas_bytes = cuda::CUBLASLT_WORKSPACE_BYTES;
        bufs.push_back(part), bufs.push_back(cnt), bufs.push_back(deq);
        // decode kernel: the largest plan of the variants (4 chunks per warp minimum, 3 CTAs/SM)
        cuda::w4a16_gemv_config big;
        big.ctas_per_sm = 3;
        cuda::w4a16_gemv_plan pl = cuda::w4a16_gemv_plan_of(n, k, sms, big);
        CK(cudaMalloc(&part, pl.partial_bytes));
        CK(cudaMalloc(&cnt, pl.counter_count * 4));
        CK(cudaMemset(cnt, 0, pl.counter_count * 4));
        gws.partial = part, gws.partial_bytes = pl.partial_bytes;
        gws.counters = static_cast<int*>(cnt), gws.counter_count = pl.counter_count;
        bufs.push_back(part), bufs.push_back(cnt);
        CK(cudaMalloc(&x, size_t(m_max * k) * 2));
        CK(cudaMalloc(&out, size_t(m_max * n) * 2));
        fill(x, size_t(m_max * k) * 2, 5, 0x3FFF3FFFu, 0x3C003C00u);  // bf16 in ±[2^-7, 2)
        bufs.push_back(x), bufs.push_back(out);
        bbytes = size_t(n * k) * 2;
        int bcopies = copies_for(bbytes);
        for (int c = 0; c < bcopies; ++c) {
            void* p = nullptr;
            CK(cudaMalloc(&p, bbytes));
            fill(p, bbytes, 30 + c, 0x3FFF3FFFu, 0x3C003C00u);
            bw16.push_back(p);
        }
    }
    ~bench_shape() {
        for (void* p : bufs) cudaFree(p);
        for (void* p : bw16) cudaFree(p);
    }
    // 10 launches on consecutive copies: the decode kernel (cfg), the small-M kernel (small) or
    // the sm80 launcher (neither).
    void w4a16_batch(long m, const cuda::w4a16_gemv_config* cfg, int sms, const cuda::w4a16_small_config* small = nullptr) {
        for (int b = 0; b < 10; ++b) {
            const cuda::w4a16_sm80_weight& w = ws[size_t(b) % ws.size()];
            if (cfg) cuda::matmul_nvfp4_w4a16_gemv_launch(x, m, w, out, gws, sms, g_stream, *cfg);
            else if (small) cuda::matmul_nvfp4_w4a16_sm80_small_launch(x, m, w, out, wsp, sms, g_stream, *small);
            else cuda::matmul_nvfp4_w4a16_sm80_launch(x, m, w, out, wsp, sms, g_stream);
        }
    }
    void wgmma_batch(long m, int tokens = 0) {  // the fused sm_90a large-M kernel (0: the launcher's tile)
        for (int b = 0; b < 10; ++b)
            cuda::matmul_nvfp4_w4a16_wgmma_launch(x, m, ws[size_t(b) % ws.size()], out, n, wsp.dequant, wsp.dequant_bytes,
                                                  g_stream, tokens);
    }
    void cublas_batch(long m, void* ws_cublas) {
        for (int b = 0; b < 10; ++b)
            cuda::gemm_bf16_tn_launch(x, bw16[size_t(b) % bw16.size()], out, m, n, k, n, 1.0f, ws_cublas,
                                      cuda::CUBLASLT_WORKSPACE_BYTES, g_stream);
    }
};

// --large: the large-M paths (dequant + cuBLASLt; the fused wgmma kernel where this image has it) at
// M = 1024, 2048 and 4096 beside cuBLAS BF16 (two
// samples each), the dequant alone over the whole weight and a pure-write ceiling (cudaMemset);
// --hot: the small-M launcher at M = 1 and 16 on one weight copy (L2-resident after the first
// launch) beside the rotated copies (streamed from DRAM).
static void run_large(int sms, double bw, void* ws_cublas) {
    std::printf("| shape | M | what | us graph | cuBLAS us graph | cuBLAS/ours |\n|---|---|---|---|---|---|\n");
    for (const llama_shape& sh : k_llama_shapes) {
        bench_shape b(sh.n, sh.k, sh.what, 4096, sms, ws_cublas);
        // the dequant's share: the whole weight in 64-MB passes into the workspace
        const int64_t pass_rows = std::min<int64_t>(b.n, (int64_t(64) << 20) / (b.k * 2) / 256 * 256);
        const double gb = (double(b.wbytes) + double(b.n) * b.k * 2) / 1e9, wgb = double(pass_rows) * b.k * 2 / 1e9;
        double tw = median_graph_us([&] {
            for (int i = 0; i < 10; ++i) CK(cudaMemsetAsync(b.wsp.dequant, i, size_t(pass_rows) * b.k * 2, g_stream));
        }, 10);
        double td = median_graph_us([&] {
            for (int i = 0; i < 10; ++i) {
                const cuda::w4a16_sm80_weight& w = b.ws[size_t(i) % b.ws.size()];
                for (int64_t n0 = 0; n0 < b.n; n0 += pass_rows)
                    cuda::w4a16_sm80_dequant_launch(w, n0, std::min<int64_t>(pass_rows, b.n - n0), b.wsp.dequant, g_stream);
            }
        }, 10);
        std::printf("| %s %ldx%ld | - | write ceiling: cudaMemset of %.0f MB | %.2f | - | %.0f GB/s = %.1f %% of BW |\n", b.what,
                    b.n, b.k, wgb * 1e3, tw, wgb / tw * 1e6, 100.0 * wgb / tw * 1e6 / bw);
        std::printf("| %s %ldx%ld | - | dequant alone (%.0f MB moved) | %.2f | - | %.0f GB/s = %.1f %% of BW |\n", b.what, b.n,
                    b.k, gb * 1e3, td, gb / td * 1e6, 100.0 * gb / td * 1e6 / bw);
        for (long m : {1024L, 2048L, 4096L})
            for (int rep = 0; rep < 2; ++rep) {
                double tc = median_graph_us([&] { b.cublas_batch(m, ws_cublas); }, 10);
                double t = median_graph_us([&] { b.w4a16_batch(m, nullptr, sms); }, 10);
                std::printf("| %s %ldx%ld | %ld | dequant+cuBLASLt (sample %d) | %.2f | %.2f | %.3f |\n", b.what, b.n, b.k, m,
                            rep + 1, t, tc, tc / t);
                if (cuda::w4a16_wgmma_compiled_here())
                    for (int tok : {256, 128}) {
                        double tw2 = median_graph_us([&] { b.wgmma_batch(m, tok); }, 10);
                        std::printf("| %s %ldx%ld | %ld | fused wgmma, %d-token tiles%s (sample %d) | %.2f | %.2f | %.3f |\n", b.what,
                                    b.n, b.k, m, tok, cuda::w4a16_wgmma_tokens(m, b.n, sms) == tok ? " (launcher's)" : "",
                                    rep + 1, tw2, tc, tc / tw2);
                    }
                std::fflush(stdout);
            }
    }
}

static void run_hot(int sms, double bw, void* ws_cublas) {
    std::printf("| shape | M | weights | us graph | GB/s |\n|---|---|---|---|---|\n");
    for (const llama_shape& sh : k_llama_shapes) {
        bench_shape b(sh.n, sh.k, sh.what, 16, sms, ws_cublas);
        for (long m : {1L, 16L}) {
            double tr = median_graph_us([&] { b.w4a16_batch(m, nullptr, sms); }, 10);
            std::vector<cuda::w4a16_sm80_weight> all = b.ws;
            b.ws.resize(1);
            double th = median_graph_us([&] { b.w4a16_batch(m, nullptr, sms); }, 10);
            b.ws = all;
            std::printf("| %s %ldx%ld | %ld | rotated (DRAM) | %.2f | %.0f |\n", b.what, b.n, b.k, m, tr, b.wbytes / tr / 1e3);
            std::printf("| %s %ldx%ld | %ld | one copy (L2) | %.2f | %.0f |\n", b.what, b.n, b.k, m, th, b.wbytes / th / 1e3);
        }
        std::fflush(stdout);
    }
    (void)bw;
}

// --splits: version 1 under every split-K count of each shape (groups per split forced), graph µs at
// m = 1, 8, 16 — what the plan's choice (marked *) is measured against.
static void run_splits(int sms, double bw, void* ws_cublas) {
    std::printf("| shape | groups per split | splits | CTAs | M=1 us | M=8 us | M=16 us |\n|---|---|---|---|---|---|---|\n");
    for (const llama_shape& sh : k_llama_shapes) {
        bench_shape b(sh.n, sh.k, sh.what, 16, sms, ws_cublas);
        const long rb = (b.d.n_tiles + 7) / 8;
        long prev = -1;
        for (long gps = 1; gps <= b.d.k_groups; ++gps) {
            const long splits = (b.d.k_groups + gps - 1) / gps;
            if (splits == prev) continue;
            prev = splits;
            cuda::w4a16_small_config c;
            c.version = 1, c.gps = int(gps);
            cuda::w4a16_sm80_workspace need = cuda::w4a16_sm80_workspace_need(16, b.n, b.k, sms, c);
            void *part = nullptr, *cnt = nullptr;
            CK(cudaMalloc(&part, std::max<size_t>(need.partial_bytes, 4)));
            CK(cudaMalloc(&cnt, std::max<size_t>(need.counter_count * 4, 4)));
            CK(cudaMemset(cnt, 0, std::max<size_t>(need.counter_count * 4, 4)));
            cuda::w4a16_sm80_workspace saved = b.wsp;
            b.wsp.partial = part, b.wsp.partial_bytes = need.partial_bytes;
            b.wsp.counters = static_cast<int*>(cnt), b.wsp.counter_count = need.counter_count;
            double t[3];
            int i = 0;
            for (long m : {1L, 8L, 16L}) t[i++] = median_graph_us([&] { b.w4a16_batch(m, nullptr, sms, &c); }, 10);
            b.wsp = saved;
            CK(cudaFree(part));
            CK(cudaFree(cnt));
            std::printf("| %s %ldx%ld | %ld | %ld | %ld | %.2f | %.2f | %.2f |\n", b.what, b.n, b.k, gps, splits, rb * splits,
                        t[0], t[1], t[2]);
            std::fflush(stdout);
        }
    }
    (void)bw;
}

// --variants: the small-M kernel's configurations (v2 plans, v1) and the decode kernel's default
// at m = 1, 4, 8, 16.
static void run_variants(int sms, double bw, void* ws_cublas) {
    std::printf("| shape | M | variant | us stream | us graph | %% of BW (graph) |\n|---|---|---|---|---|---|\n");
    const cuda::w4a16_gemv_config gemv_default;
    for (const llama_shape& sh : k_llama_shapes) {
        bench_shape b(sh.n, sh.k, sh.what, 16, sms, ws_cublas);
        std::printf("| %s %ldx%ld | - | auto runs v%d | - | - | - |\n", b.what, b.n, b.k,
                    cuda::w4a16_sm80_small_version(b.n, b.k, sms));
        for (long m : {1L, 4L, 8L, 16L}) {
            double io = double(m) * b.k * 2 + double(m) * b.n * 2;
            auto row = [&](const char* name, const cuda::w4a16_gemv_config* cfg, const cuda::w4a16_small_config* sc) {
                double ts = median_us([&] { b.w4a16_batch(m, cfg, sms, sc); }, 10);
                double tg = median_graph_us([&] { b.w4a16_batch(m, cfg, sms, sc); }, 10);
                std::printf("| %s %ldx%ld | %ld | %s | %.2f | %.2f | %.1f %% |\n", b.what, b.n, b.k, m, name, ts, tg,
                            100.0 * (b.wbytes + io) / tg / 1e3 / bw);
                std::fflush(stdout);
            };
            for (const small_variant& v : small_variants())
                if (m == 1 || m == 16 || v.cfg.ctas_per_sm == 0) row(v.name, nullptr, &v.cfg);
            if (b.n % 32 == 0) {  // matmul_silu: the stacked [gate; up] weight, silu in the epilogue
                cuda::w4a16_small_config silu;
                silu.version = 1, silu.silu_n_ff = b.n / 2;
                row("v1 matmul_silu", nullptr, &silu);
            }
            if (cuda::w4a16_gemv_fits(m, b.k)) row("gemv default", &gemv_default, nullptr);
        }
    }
}

// --sweep: the sweep decode kernel (matmul_nvfp4_w4a16_sweep_sm80) at m = 1, 2, 4, 8, 12, 16 under every
// plan that holds all of k in one CTA (T tiles, S warps per tile; where k has more than 8 groups,
// down: the plans of ≤ 14 groups per CTA, k split over CTAs) and fits the device, x staged in
// shared memory or read directly, beside the sm80 launcher (plain and with PDL; the sweep kernel runs with PDL, as in
// decode), on Llama-3.1-8B's and Qwen3-30B-A3B's attention shapes; graph µs. Each sweep output is
// compared with the launcher's (max |diff| / max |ref| over the m rows: f32 sums of the same exact
// products in other orders, so within bf16 rounding, ~4e-3).
// The sweep modes' shapes: Llama-3.1-8B's four and Qwen3-30B-A3B's qkv and o_proj.
static std::vector<llama_shape> sweep_shapes() {
    std::vector<llama_shape> shapes(std::begin(k_llama_shapes), std::end(k_llama_shapes));
    shapes.push_back({5120, 2048, "30B qkv"}), shapes.push_back({2048, 4096, "30B o_proj"});
    return shapes;
}

static int smem_optin() {
    int dev = 0, optin = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return optin;
}

// The sweep kernel's split-k workspace (partials, zeroed counters) for every plan of cfgs up to m_max
// rows on shape b; freed by the caller (cudaFree of .partial and .counters).
static cuda::w4a16_sm80_workspace sweep_workspace(const bench_shape& b,
                                                  const std::vector<cuda::w4a16_sweep_config>& cfgs, long m_max) {
    size_t part = 4, cnt = 4;
    for (const cuda::w4a16_sweep_config& c : cfgs) {
        cuda::w4a16_sweep_plan pl = cuda::w4a16_sweep_plan_of(b.n, b.k, m_max, c);
        part = std::max(part, pl.partial_bytes), cnt = std::max(cnt, pl.counter_count * 4);
    }
    cuda::w4a16_sm80_workspace sws;
    CK(cudaMalloc(&sws.partial, part));
    CK(cudaMalloc(&sws.counters, cnt));
    CK(cudaMemset(sws.counters, 0, cnt));
    sws.partial_bytes = part, sws.counter_count = cnt / 4;
    return sws;
}

static void run_sweep(int sms, double bw, void* ws_cublas, bool tw_only = false) {
    const int optin = smem_optin();
    std::printf("| shape | M | kernel | plan (T G S: CTAs) | us graph | %% of BW | max rel diff |\n"
                "|---|---|---|---|---|---|---|\n");
    for (const llama_shape& sh : sweep_shapes()) {
        if (tw_only && sh.n > cuda::W4A16_SWEEP_WIDE_N_MAX) continue;  // the shapes that run m > 8 on it
        bench_shape b(sh.n, sh.k, sh.what, 16, sms, ws_cublas);
        std::vector<cuda::w4a16_sweep_config> cfgs(1);  // [0]: the default plan
        cfgs[0].pdl = 1;
        const bool split = b.d.k_groups > cuda::W4A16_SWEEP_K_GROUPS_MAX;  // down: only plans that split k
        for (int tw : {1, 2})
            for (int T : {1, 2, 4, 8})
                for (int S : {1, 2, 4, 7, 8})
                    for (int GS : {1, 2, 4}) {
                        if (T % tw != 0 || T / tw * S > 8 || (split ? S * GS > 14 || T > 2 : S * GS != b.d.k_groups))
                            continue;
                        if (tw_only ? tw == 1 || split : tw == 2) continue;  // --sweep-tw: the tw = 2 plans alone
                        cuda::w4a16_sweep_config c;
                        c.T = T, c.G = S * GS, c.S = S, c.tw = tw, c.pdl = 1;
                        if (cuda::w4a16_sweep_plan_of(b.n, b.k, 1, c).smem <= size_t(optin)) cfgs.push_back(c);
                    }
        cuda::w4a16_sm80_workspace sws = sweep_workspace(b, cfgs, 16);
        std::vector<uint16_t> ref, got;
        auto fetch = [&](long m, std::vector<uint16_t>& v) {
            CK(cudaStreamSynchronize(g_stream));
            v.resize(size_t(m * b.n));
            CK(cudaMemcpy(v.data(), b.out, v.size() * 2, cudaMemcpyDeviceToHost));
        };
        auto bf = [](uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f; };
        for (long m : {1L, 2L, 4L, 8L, 12L, 16L}) {
            if (tw_only && (m == 2 || m == 4)) continue;  // --sweep-tw: m = 1 (the default plan) and 8-16
            const double io = double(m) * b.k * 2 + double(m) * b.n * 2;
            for (int pdl : {0, 1}) {
                cuda::w4a16_small_config sc;
                sc.pdl = pdl;
                double tg = median_graph_us([&] { b.w4a16_batch(m, nullptr, sms, &sc); }, 10);
                std::printf("| %s %ldx%ld | %ld | sm80 launcher%s | v%d | %.2f | %.1f %% | - |\n", b.what, b.n, b.k, m,
                            pdl ? " (PDL)" : "", cuda::w4a16_sm80_small_version(b.n, b.k, sms), tg,
                            100.0 * (b.wbytes + io) / tg / 1e3 / bw);
            }
            cuda::matmul_nvfp4_w4a16_sm80_launch(b.x, m, b.ws[0], b.out, b.wsp, sms, g_stream);
            fetch(m, ref);
            for (size_t cj = 1; cj < 2 * cfgs.size(); ++cj) {  // [0]: the default plan with its own x path
                const size_t ci = cj / 2;
                cuda::w4a16_sweep_config c = cfgs[ci];
                c.x_direct = ci == 0 ? -1 : int(cj % 2);
                cuda::w4a16_sweep_plan pl = cuda::w4a16_sweep_plan_of(b.n, b.k, m, c);
                if (!cuda::w4a16_sweep_why_not(pl, m).empty() || pl.smem > size_t(optin)) continue;
                double tg = median_graph_us([&] {
                    for (int i = 0; i < 10; ++i)
                        cuda::matmul_nvfp4_w4a16_sweep_launch(b.x, m, b.ws[size_t(i) % b.ws.size()], b.out, sws,
                                                              g_stream, c);
                }, 10);
                cuda::matmul_nvfp4_w4a16_sweep_launch(b.x, m, b.ws[0], b.out, sws, g_stream, c);
                fetch(m, got);
                double mx = 0, md = 0;
                for (size_t i = 0; i < ref.size(); ++i) {
                    mx = std::max(mx, double(std::fabs(bf(ref[i]))));
                    md = std::max(md, double(std::fabs(bf(ref[i]) - bf(got[i]))));
                }
                std::printf("| %s %ldx%ld | %ld | sweep%s%s | %d %d %d%s: %d | %.2f | %.1f %% | %.2g |\n", b.what, b.n,
                            b.k, m, ci == 0 ? " default" : "", pl.x_direct ? " x direct" : "", pl.T, pl.G, pl.S,
                            pl.tw == 2 ? " tw2" : "", pl.n_tb * pl.n_gr, tg, 100.0 * (b.wbytes + io) / tg / 1e3 / bw,
                            md / std::max(mx, 1e-30));
                std::fflush(stdout);
            }
        }
        CK(cudaFree(sws.partial));
        CK(cudaFree(sws.counters));
    }
}

// --sweep-pattern: every sweep plan at m = 1 (k whole or split over CTAs; 8B and 30B shapes) with x
// staged per CTA, with x read through L1, and as its copies and waits alone (no math: the plan's own
// access-pattern ceiling). Session 19, docs/perf.md.
static void run_sweep_pattern(int sms, double bw, void* ws_cublas) {
    const int optin = smem_optin();
    std::printf("| shape | plan (T G S: CTAs) | x staged us | %% | x direct us | %% | no math us | %% |\n"
                "|---|---|---|---|---|---|---|---|\n");
    for (const llama_shape& sh : sweep_shapes()) {
        bench_shape b(sh.n, sh.k, sh.what, 8, sms, ws_cublas);
        std::vector<cuda::w4a16_sweep_config> cfgs;
        for (int T : {1, 2})
            for (int S : {2, 4, 7, 8})
                for (int GS : {1, 2, 4}) {
                    cuda::w4a16_sweep_config c;
                    c.T = T, c.G = S * GS, c.S = S, c.pdl = 1, c.x_direct = 1;
                    if (T * S > 8 || c.G > b.d.k_groups || b.d.k_groups % c.G != 0) continue;
                    if (cuda::w4a16_sweep_plan_of(b.n, b.k, 1, c).smem <= size_t(optin)) cfgs.push_back(c);
                }
        cuda::w4a16_sm80_workspace sws = sweep_workspace(b, cfgs, 1);
        const double bytes = double(b.wbytes) + double(b.k) * 2 + double(b.n) * 2;
        for (cuda::w4a16_sweep_config c : cfgs) {
            cuda::w4a16_sweep_plan pl = cuda::w4a16_sweep_plan_of(b.n, b.k, 1, c);
            if (!cuda::w4a16_sweep_why_not(pl, 1).empty()) continue;
            double t[3];
            for (int mode = 0; mode < 3; ++mode) {
                c.no_math = mode == 2, c.x_direct = mode != 0;
                if (cuda::w4a16_sweep_plan_of(b.n, b.k, 1, c).smem > size_t(optin)) {
                    t[mode] = 0;
                    continue;
                }
                t[mode] = median_graph_us([&] {
                    for (int i = 0; i < 10; ++i)
                        cuda::matmul_nvfp4_w4a16_sweep_launch(b.x, 1, b.ws[size_t(i) % b.ws.size()], b.out, sws,
                                                              g_stream, c);
                }, 10);
            }
            std::printf("| %s %ldx%ld | %d %d %d: %d", b.what, b.n, b.k, pl.T, pl.G, pl.S, pl.n_tb * pl.n_gr);
            for (double us : t) {
                if (us > 0) std::printf(" | %.2f | %.1f %%", us, 100.0 * bytes / us / 1e3 / bw);
                else std::printf(" | - | -");  // staged x does not fit shared memory
            }
            std::printf(" |\n");
            std::fflush(stdout);
        }
        if (b.n == 28672) {  // gate+up: matmul_silu on the sweep kernel beside the sm80 fused kernel, PDL
            for (long m : {1L, 2L, 4L, 8L}) {
                cuda::w4a16_small_config sc;
                sc.pdl = 1, sc.version = 1, sc.silu_n_ff = b.n / 2;
                cuda::w4a16_sweep_config c;
                c.pdl = 1, c.silu_n_ff = b.n / 2;
                const double ts = median_graph_us([&] { b.w4a16_batch(m, nullptr, sms, &sc); }, 10);
                const double tw = median_graph_us([&] {
                    for (int i = 0; i < 10; ++i)
                        cuda::matmul_nvfp4_w4a16_sweep_launch(b.x, m, b.ws[size_t(i) % b.ws.size()], b.out, sws,
                                                              g_stream, c);
                }, 10);
                std::printf("| %s %ldx%ld matmul_silu m = %ld | sm80 %.2f us | %.1f %% | sweep %.2f us | %.1f %% "
                            "| - | - |\n",
                            b.what, b.n, b.k, m, ts, 100.0 * bytes / ts / 1e3 / bw, tw,
                            100.0 * bytes / tw / 1e3 / bw);
            }
        }
        CK(cudaFree(sws.partial));
        CK(cudaFree(sws.counters));
    }
}

int main(int argc, char** argv) {
    bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    if ((argc == 5 || argc == 6) && std::strcmp(argv[1], "--one") == 0)
        return run_one(atol(argv[2]), atol(argv[3]), atol(argv[4]), argc == 6 && std::strcmp(argv[5], "gemv") == 0,
                       argc == 6 && std::strcmp(argv[5], "v1") == 0);
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
    if (argc > 1 && std::strcmp(argv[1], "--pattern-bulk") == 0) {
        run_pattern_bulk(bw);
        return 0;
    }
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    void* ws_cublas = nullptr;
    CK(cudaMalloc(&ws_cublas, cuda::CUBLASLT_WORKSPACE_BYTES));
    if (argc > 1 && std::strcmp(argv[1], "--variants") == 0) {
        run_variants(sms, bw, ws_cublas);
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--sweep-tw") == 0) {  // m = 1, 8-16: the default plan beside tw = 2 plans
        run_sweep(sms, bw, ws_cublas, true);
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--sweep") == 0) {
        run_sweep(sms, bw, ws_cublas);
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--sweep-pattern") == 0) {
        run_sweep_pattern(sms, bw, ws_cublas);
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--splits") == 0) {
        run_splits(sms, bw, ws_cublas);
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--large") == 0) {
        run_large(sms, bw, ws_cublas);
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--hot") == 0) {
        run_hot(sms, bw, ws_cublas);
        return 0;
    }

    std::vector<long> ms = {1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096};
    if (quick) ms = {1, 8, 16, 1024};
    const long m_max = quick ? 1024 : 4096;
    std::printf("| shape (N x K) | M | kernel | us stream | us graph | GB/s | %% of BW | TFLOP/s | cuBLAS us graph | cuBLAS/ours |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    const cuda::w4a16_gemv_config gemv_default;
    for (const llama_shape& sh : k_llama_shapes) {
        bench_shape b(sh.n, sh.k, sh.what, m_max, sms, ws_cublas);
        for (long m : ms) {
            double tc = median_graph_us([&] { b.cublas_batch(m, ws_cublas); }, 10);
            double io = double(m) * b.k * 2 + double(m) * b.n * 2, flop = 2.0 * m * b.n * b.k;
            // the decode kernel where it takes m, the launcher's choice, and the small-M v1 kernel
            // beside v2 (before / after) where v2 runs
            cuda::w4a16_small_config v1;
            v1.version = 1;
            for (int which = cuda::w4a16_gemv_fits(m, b.k) ? 0 : 1; which < (m <= cuda::W4A16_RUN_M_MAX ? 3 : 2); ++which) {
                const cuda::w4a16_gemv_config* cfg = which == 0 ? &gemv_default : nullptr;
                const cuda::w4a16_small_config* sc = which == 2 ? &v1 : nullptr;
                double ts = median_us([&] { b.w4a16_batch(m, cfg, sms, sc); }, 10);
                double tg = median_graph_us([&] { b.w4a16_batch(m, cfg, sms, sc); }, 10);
                double gbs = (b.wbytes + io) / tg / 1e3;
                const char* kern = cfg ? "gemv" : sc ? "sm80 small-M v1" : m <= cuda::W4A16_RUN_M_MAX ? "sm80 small-M auto"
                                   : m <= cuda::W4A16_SM80_SMALL_M_MAX ? "sm80 small-M v1" : "dequant+cuBLASLt";
                std::printf("| w4a16 %s %ldx%ld | %ld | %s | %.2f | %.2f | %.0f | %.1f %% | %.2f | %.2f | %.2f |\n", b.what,
                            b.n, b.k, m, kern, ts, tg, gbs, 100.0 * gbs / bw, flop / tg / 1e6, tc, tc / tg);
            }
            if (m > cuda::W4A16_SM80_SMALL_M_MAX && cuda::w4a16_wgmma_compiled_here()) {
                double ts = median_us([&] { b.wgmma_batch(m); }, 10), tg = median_graph_us([&] { b.wgmma_batch(m); }, 10);
                double gbs = (b.wbytes + io) / tg / 1e3;
                std::printf("| w4a16 %s %ldx%ld | %ld | fused wgmma | %.2f | %.2f | %.0f | %.1f %% | %.2f | %.2f | %.2f |\n", b.what,
                            b.n, b.k, m, ts, tg, gbs, 100.0 * gbs / bw, flop / tg / 1e6, tc, tc / tg);
            }
            std::printf("| cublas bf16 %s %ldx%ld | %ld | cuBLASLt | - | %.2f | %.0f | %.1f %% | %.2f | - | - |\n", b.what,
                        b.n, b.k, m, tc, (b.bbytes + io) / tc / 1e3, 100.0 * (b.bbytes + io) / tc / 1e3 / bw,
                        flop / tc / 1e6);
            std::fflush(stdout);
        }
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
                    cuda::gemm_bf16_tn_launch(x, w, out, m, n, k, n, 1.0f, ws_cublas, cuda::CUBLASLT_WORKSPACE_BYTES,
                                              g_stream);
            }, batch, 7);
            double io = double(m) * k * 2 + double(m) * n * 2;
            std::printf("| dense bf16 lm_head 128256x4096 | %ld | cuBLASLt | %.2f | - | %.0f | %.1f %% | %.2f | - | - |\n", m,
                        t, (bytes + io) / t / 1e3, 100.0 * (bytes + io) / t / 1e3 / bw, 2.0 * m * n * k / t / 1e6);
            std::fflush(stdout);
        }
        for (void* p : {w, x, out}) CK(cudaFree(p));
    }
    CK(cudaFree(ws_cublas));
    return 0;
}

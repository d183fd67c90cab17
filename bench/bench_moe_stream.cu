// Benchmark (not a test; CUDA builds only): the weight copies of a batch-1 Qwen3-30B-A3B MoE block
// without its math (docs/perf.md, session 21: how fast a fused block kernel can stream the routed
// experts' weights, against the same bytes from one region). n experts (128), each weight its own
// allocation as the model has them; per launch 8 routed experts from 100 sets in turn; each CTA of G
// requests its whole share at once — the fused kernel's split: gate/up tile pairs u = cta + G·i, down
// tile cta + G·i of every expert — by cp.async (16 B per lane) or by bulk copies (sm_90+: one thread,
// one mbarrier), then waits. "contiguous": the same bytes per CTA from one region (rotating copies >
// L2). Prints µs per launch (one CUDA graph of 10 launches — of 100 when n > 128, so a replay routes
// to ~800 experts, as 48 layers of steps do — median of 15) and GB/s.
// Usage: bench_moe_stream [n_experts]
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"
#include "bench_util.cuh"

using namespace tetra;

namespace {

struct moe_src {
    const uint4* codes;
    const uint4* scales;
};
struct moe_stream_dims {
    int kc_gu, kg_gu, tiles_gu, kc_dn, kg_dn, tiles_dn, P, k, gu_units, dn_units, contiguous;
    long share;  // contiguous: bytes per CTA
};

template <bool BULK>
__device__ void moe_copy(uint32_t dst, const uint4* src, int bytes, uint32_t bar) {
    if (!BULK) {
        for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) cuda::w4a16::cp_async16(dst + i * 16, src + i, 16);
        return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}

// One weight tile (16 rows × all k): per group its codes, then its scales; returns the bytes.
template <bool BULK>
__device__ int moe_copy_tile(const moe_src& w, int tile, int n_tiles, int kc, int kg, uint32_t dst, uint32_t bar) {
    for (int grp = 0; grp < kg; ++grp) {
        const int c0 = grp * 8, nc = min(8, kc - c0);
        moe_copy<BULK>(dst + c0 * 512, w.codes + cuda::w4a16::chunk_index(tile, c0, n_tiles) * 32, nc * 512, bar);
    }
    moe_copy<BULK>(dst + kc * 512, w.scales + size_t(tile) * kg * 32, kg * 512, bar);
    return (kc + kg) * 512;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The bytes of the CTA's share (the bulk form's transaction count, set before the copies).
__device__ uint32_t moe_share_bytes(const moe_stream_dims& d) {
    if (d.contiguous) return uint32_t(d.share);
    uint32_t total = 0;
    for (int u = blockIdx.x; u < d.gu_units; u += gridDim.x) total += 2 * (d.kc_gu + d.kg_gu) * 512;
    for (int t = blockIdx.x; t < d.dn_units; t += gridDim.x) total += d.k * (d.kc_dn + d.kg_dn) * 512;
    return total;
}
#endif

// The CTA's share into shared memory.
template <bool BULK>
__device__ void moe_copy_share(const moe_src* gu, const moe_src* dn, const int* ids, const moe_stream_dims& d,
                                   const uint4* region, uint32_t base, uint32_t bar) {
    const int G = gridDim.x, cta = blockIdx.x;
    if (d.contiguous) {
        const uint4* src = region + size_t(cta) * size_t(d.share / 16);
        for (long o = 0; o < d.share; o += 4096)
            moe_copy<BULK>(base + uint32_t(o), src + o / 16, int(min(4096L, d.share - o)), bar);
        return;
    }
    uint32_t off = 0;
    for (int u = cta; u < d.gu_units; u += G) {
        const moe_src& w = gu[ids[u / d.P]];
        off += moe_copy_tile<BULK>(w, u % d.P, d.tiles_gu, d.kc_gu, d.kg_gu, base + off, bar);
        off += moe_copy_tile<BULK>(w, u % d.P + d.P, d.tiles_gu, d.kc_gu, d.kg_gu, base + off, bar);
    }
    for (int t = cta; t < d.dn_units; t += G)
        for (int s = 0; s < d.k; ++s)
            off += moe_copy_tile<BULK>(dn[ids[s]], t, d.tiles_dn, d.kc_dn, d.kg_dn, base + off, bar);
}

template <bool BULK>
__global__ void moe_stream_kernel(const moe_src* gu, const moe_src* dn, const int* ids, moe_stream_dims d,
                                  const uint4* region, uint32_t* sink) {
    extern __shared__ __align__(128) uint4 sm[];
    __shared__ __align__(8) uint64_t mbar;
    const uint32_t base = uint32_t(__cvta_generic_to_shared(sm)), bar = uint32_t(__cvta_generic_to_shared(&mbar));
    if (!BULK) {
        moe_copy_share<false>(gu, dn, ids, d, region, base, bar);
        cuda::w4a16::cp_async_wait_all();
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (threadIdx.x == 0) {  // one thread sets the barrier's bytes, then issues every bulk copy
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(moe_share_bytes(d))
                         : "memory");
            moe_copy_share<true>(gu, dn, ids, d, region, base, bar);
        }
        __syncthreads();  // the barrier's init before anyone waits on it
        asm volatile("{ .reg .pred p; W%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0; @!p bra W%=; }"
                     ::"r"(bar) : "memory");
#endif
    }
    __syncthreads();
    if (threadIdx.x == 0 && sm[0].x == 0x9E3779B9u) *sink = sm[1].x;
}

}  // namespace

int main(int argc, char** argv) {
    int dev = 0, sms = 0, optin = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    int cc = 0;
    CK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev));
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    const int E = argc > 1 ? std::max(8, atoi(argv[1])) : 128, K = 8, H = 2048, F = 768, SETS = 100;
    const int L = E > 128 ? 100 : 10;  // launches per graph: 800 routed experts per replay when there are many
    const cuda::w4a16_sm80_dims gd = cuda::w4a16_sm80_dims_of(2 * F, H), dd = cuda::w4a16_sm80_dims_of(H, F);
    std::vector<moe_src> hg(E), hd(E);
    std::vector<void*> owned;
    auto buf = [&](size_t bytes) {
        void* p = nullptr;
        CK(cudaMalloc(&p, bytes));
        fill(p, bytes, uint32_t(owned.size()));
        owned.push_back(p);
        return static_cast<const uint4*>(p);
    };
    for (int e = 0; e < E; ++e) {
        hg[size_t(e)] = {buf(gd.codes_bytes), buf(gd.scales_bytes)};
        hd[size_t(e)] = {buf(dd.codes_bytes), buf(dd.scales_bytes)};
    }
    std::vector<int> hid;
    uint32_t x = 12345;
    for (int s = 0; s < SETS; ++s)
        for (int i = 0; i < K; ++i) {
            int e;
            do { x = x * 1664525u + 1013904223u, e = int(x >> 8) % E; } while (std::count(hid.end() - i, hid.end(), e));
            hid.push_back(e);
        }
    moe_src *tg = nullptr, *td = nullptr;
    int* ids = nullptr;
    uint32_t* sink = nullptr;
    CK(cudaMalloc(&tg, E * sizeof(moe_src))); CK(cudaMalloc(&td, E * sizeof(moe_src)));
    CK(cudaMalloc(&ids, hid.size() * 4)); CK(cudaMalloc(&sink, 4));
    CK(cudaMemcpy(tg, hg.data(), E * sizeof(moe_src), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(td, hd.data(), E * sizeof(moe_src), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ids, hid.data(), hid.size() * 4, cudaMemcpyHostToDevice));
    const long unit = 2L * (gd.k_chunks + gd.k_groups) * 512, dtile = long(K) * (dd.k_chunks + dd.k_groups) * 512;
    const long gu_units = long(K) * F / 16, dn_units = H / 16, total = gu_units * unit + dn_units * dtile;
    const int regions = int((size_t(200) << 20) / size_t(total) + 1);  // > L2 in all
    const uint4* region = buf(size_t(total) * size_t(regions) + (size_t(2) << 20));
    std::printf("moe-pattern (%d SMs): 8 of %d experts, gate/up %ldx%d + down %dx%d: %.1f MB per launch\n", sms, E,
                long(2 * F), H, H, F, total / 1e6);
    for (int per_sm : {1, 2})
        for (int mode = 0; mode < 3; ++mode)  // routed gate/up + down, routed gate/up only, contiguous
            for (bool bulk : {false, true}) {
                if (bulk && cc < 9) continue;
                const int G = sms * per_sm;
                moe_stream_dims d{int(gd.k_chunks), int(gd.k_groups), int(gd.n_tiles),
                                  int(dd.k_chunks), int(dd.k_groups), int(dd.n_tiles),
                                  F / 16, K, int(gu_units), mode == 1 ? 0 : int(dn_units), mode == 2, 0};
                const long bytes = mode == 1 ? gu_units * unit : total;
                d.share = (bytes / G + 4095) / 4096 * 4096;
                const long most =
                    mode == 2 ? d.share : (gu_units + G - 1) / G * unit + (d.dn_units + G - 1) / G * dtile;
                auto kern = bulk ? moe_stream_kernel<true> : moe_stream_kernel<false>;
                if (most > optin / per_sm - 1024) continue;  // per_sm CTAs must fit one SM
                CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(most)));
                int li = 0;
                const double us = median_graph_us([&] {
                    for (int b = 0; b < L; ++b, ++li) {
                        const uint4* r = region + size_t(li % regions) * size_t(total / 16);
                        kern<<<G, 256, size_t(most), g_stream>>>(tg, td, ids + (li % SETS) * K, d, r, sink);
                    }
                }, L);
                CK(cudaGetLastError());
                std::printf("moe-pattern %d CTA/SM %-22s %-8s: %7.2f us %6.0f GB/s\n", per_sm,
                            mode == 0 ? "routed gate/up + down" : mode == 1 ? "routed gate/up" : "contiguous",
                            bulk ? "bulk" : "cp.async", us, double(bytes) / us / 1e3);
            }
    for (void* p : owned) cudaFree(p);
    cudaFree(tg), cudaFree(td), cudaFree(ids), cudaFree(sink);
    return 0;
}

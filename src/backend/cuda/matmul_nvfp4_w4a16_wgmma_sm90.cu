// matmul_nvfp4_w4a16_wgmma_sm90: the W4A16 NVFP4 matmul for large M (prefill) on sm_90a, fused:
// the weight is dequantized in registers and fed to wgmma as its register-sourced A operand (the
// "RS" form, as CUTLASS's Hopper mixed-input GEMM and vLLM's Machete do); the activations are the
// shared-memory B operand, loaded by TMA. No bf16 copy of the weight is written or read (the
// dequant + cuBLASLt path, matmul_nvfp4_w4a16_large_sm80.cu, moves 2.56 B per weight first).
//
// It reads the packed layout of every W4A16 kernel (w4a16_layout.h) unchanged: a lane's word j of
// a chunk is exactly its A registers for one m16n8k16 MMA, and a wgmma m64nNk16's A fragment is
// four warps' m16n8k16 A fragments (warp w: rows 16w..16w+15). That word's MMA k-slots map to the
// chunk's k as slot 2t+e ↔ k 16t+4j+e and slot 8+2t+e ↔ k 16t+4j+2+e (t = lane % 4), i.e. slots
// of one k16 step come from four 16-k scale blocks. So B must hold x in that order: a pre-pass
// (w4a16_permute_x_kernel) writes x_perm, element 16j + s of each 64-k chunk = x[k(j, s)] (rows
// padded to a multiple of 64 with zeros), and the kernel copies x_perm tiles with TMA under the
// 128-B swizzle its descriptors name. Measured alternatives (docs/perf.md, session 15): 4-B
// cp.async into the permuted tile (the LSU queue saturates) and a permute in shared memory
// (shared-memory bandwidth) both ran at ~0.6 of cuBLAS. Products e2m1 · e4m3 are exact in bf16
// (kernels.md §3.3); sums are f32 in the tensor core's order; scale_global · 2^8 is applied in
// the f32 epilogue. Deterministic (no split-K), each output row independent of the others.
//
// CTA: 2 warpgroups × 64 weight rows = 128 rows (8 tiles) × TOK tokens (256: one CTA per SM; 128:
// two, where that spreads the grid more evenly: w4a16_wgmma_tokens); per 64-k chunk each
// warpgroup issues 4 wgmma m64nTOKk16. Stages of a 5-deep ring hold one chunk's x tile (TMA, one
// mbarrier per stage) and the CTA's 8 code chunks (4 KB, cp.async); one barrier per chunk frees
// the stage of chunk c-1. A warpgroup decodes chunk c+1 k16 step by k16 step with 3 of its
// wgmmas queued, so the tensor cores do not wait for the decode.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/moe_expert_table_sm80.h"
#include "backend/cuda/moe_items.cuh"

namespace tetra {
namespace cuda {

namespace {

using namespace w4a16;

constexpr int WG = 2, THREADS = WG * 128, TILES = WG * 4, STAGES = 5;
constexpr int A_BYTES = TILES * 512;
// Per token tile (TOK = 256: one CTA per SM; 128: two): x tile + code chunks per stage.
template <int TOK> struct wg_tile {
    static constexpr int B_BYTES = TOK * CHUNK_K * 2, STAGE_BYTES = B_BYTES + A_BYTES;
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024;  // + alignment of the ring to 1024 B
    static constexpr int CTAS_PER_SM = TOK == 256 ? 1 : 2;
    static_assert(STAGE_BYTES % 1024 == 0, "stages must keep the 128-B swizzle atoms 1024-B aligned");
};

struct wg_params {
    const uint4* codes;
    const uint4* scales;
    __nv_bfloat16* out;      // [m, ld_out]
    int m, n, ld_out, n_tiles, k_chunks, k_groups;
    float alpha;             // scale_global · 2^8
    int n_ff;                // SILU: n = 2·n_ff stacked [gate; up] rows; out [m, n_ff] = silu(gate) · up
    // GROUPED (moe_matmul): x rows grouped by expert (expert_offsets [ne + 1]); CTA x takes work item x
    // (find_item: a pass of ≤ TOK rows of one expert), whose weight and alpha come from the table.
    const int32_t* offsets;
    const moe_expert_ptrs* table;
    int ne;
};

// x_perm[r, 64c + 16j + 8h + 2t + e] = x[r, 64c + 16t + 4j + 2h + e] (0 past k): one thread per
// 16-B unit u = 2j + h of a chunk row, i.e. the pairs at 16t + 4j + 2h for t = 0..3.
__global__ void __launch_bounds__(256) w4a16_permute_x_kernel(const __nv_bfloat16* x, __nv_bfloat16* xp, int m,
                                                              int k, int k64) {
    const int64_t unit = int64_t(blockIdx.x) * 256 + threadIdx.x, units_per_row = k64 / 8;
    if (unit >= int64_t(m) * units_per_row) return;
    const int64_t r = unit / units_per_row;
    const int uc = int(unit % units_per_row), c = uc >> 3, u = uc & 7, j = u >> 1, h = u & 1;
    const uint32_t* row = reinterpret_cast<const uint32_t*>(x + r * k);
    uint32_t v[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const int kk = 64 * c + 16 * t + 4 * j + 2 * h;
        v[t] = kk < k ? __ldg(row + kk / 2) : 0u;
    }
    *reinterpret_cast<uint4*>(xp + r * k64 + 8 * int64_t(uc)) = make_uint4(v[0], v[1], v[2], v[3]);
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TETRA_WGMMA_OK 1
#else
#define TETRA_WGMMA_OK 0
#endif

#if TETRA_WGMMA_OK
// The [256 rows][64 k] box at (k0, row0) of the tensor map into shared memory, completing on bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int k0, int row0, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
        "l"(map), "r"(k0), "r"(row0), "r"(bar)
        : "memory");
}

// Shared-memory matrix descriptor (sm_90 GMMA): K-major, 128-B swizzle, 8-row groups 1024 B apart.
__device__ __forceinline__ uint64_t b_desc(uint32_t addr) {
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// d[128] += A (registers a, 64 × 16) · B (descriptor, 16 × 256); n8 block j of d = d[4j..4j+3] =
// (row g, col 8j+2t), (g, 8j+2t+1), (g+8, 8j+2t), (g+8, 8j+2t+1) of the warp's 16 rows.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}
template <int N> __device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc) {
    if constexpr (N == 256) wgmma_m64n256k16(d, a, desc);
    else wgmma_m64n128k16(d, a, desc);
}

// 8 bf16 (v) to dst = out[tok, f .. f+7]: one 16-byte store when `vec` (16-byte aligned rows) and
// all 8 lie below n, else the elements below n one by one.
__device__ __forceinline__ void store8(__nv_bfloat16* dst, const uint4& v, int f, int n, bool vec) {
    if (vec && f + 8 <= n) {
        *reinterpret_cast<uint4*>(dst) = v;
        return;
    }
    uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
#pragma unroll
    for (int q = 0; q < 8; ++q)
        if (f + q < n) d16[q] = uint16_t(word_of(v, q >> 1) >> (16 * (q & 1)));
}

// Keeps values in registers at this point (the asm may read them): the accumulators around the
// asynchronous wgmma, and the A registers of an in-flight wgmma until its wait.
__device__ __forceinline__ void pin(float& v) { asm volatile("" : "+f"(v)::"memory"); }
__device__ __forceinline__ void pin(uint32_t& v) { asm volatile("" : "+r"(v)::"memory"); }
#endif

// SILU (matmul_silu): CTA y takes gate tiles 4y..4y+3 (warpgroup 0) and the matching up tiles
// (warpgroup 1); the epilogue applies silu_times to the two bf16-rounded halves, as the two-step
// path (this kernel's plain form, then silu_mul_gate_up) does: the same bits.
template <int TOK, bool SILU, bool GROUPED = false>
__global__ void __launch_bounds__(THREADS, wg_tile<TOK>::CTAS_PER_SM) w4a16_wgmma_kernel(const __grid_constant__ CUtensorMap xmap,
                                                                                     wg_params p) {
#if TETRA_WGMMA_OK
    constexpr int AHEAD = STAGES - 2;  // chunks in flight beyond the next one
    constexpr int B_BYTES = wg_tile<TOK>::B_BYTES, STAGE_BYTES = wg_tile<TOK>::STAGE_BYTES, NACC = TOK / 2;
    extern __shared__ uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES];  // stage s holds its chunk's x tile
    uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    const uint32_t ring_s = smem_u32(base), full_s = smem_u32(full);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tile0 = blockIdx.y * TILES;
    // The CTA's token rows [tok0, tok_end) and weight: the whole matmul's, or its work item's expert.
    int tok0 = blockIdx.x * TOK, tok_end = p.m;
    const uint4* codes = p.codes;
    const uint4* scales = p.scales;
    float alpha = p.alpha;
    if constexpr (GROUPED) {
        int e = 0, nr = 0;
        if (!find_item(p.offsets, p.ne, TOK, blockIdx.x, lane, e, tok0, nr)) return;  // uniform over the CTA
        tok_end = tok0 + nr;
        const moe_expert_ptrs w = p.table[e];
        codes = static_cast<const uint4*>(w.a), scales = static_cast<const uint4*>(w.b), alpha = w.alpha;
    }
    // this warp's 16 weight rows (warpgroup warp / 4, rows 16·(warp % 4))
    const int ff_tiles = p.n_ff / 16, ff_tile = 4 * blockIdx.y + (warp & 3);
    const int tile = SILU ? (warp < 4 ? ff_tile : ff_tiles + ff_tile) : tile0 + warp;
    const bool tile_ok = SILU ? ff_tile < ff_tiles : tile < p.n_tiles;
    const bool leader = threadIdx.x == 0;
    if (leader) {
        for (int s = 0; s < STAGES; ++s) mbar_init(full_s + 8 * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(&xmap) : "memory");
    }
    __syncthreads();

    const uint32_t a_dst = uint32_t(B_BYTES + warp * 512 + lane * 16);
    // The warp's code chunk c: chunks of a group are 512 B apart, groups group_stride_u4 uint4.
    const char* a_src = reinterpret_cast<const char*>(codes) + (size_t(tile) * GROUP_CHUNKS * 32 + lane) * 16;
    const size_t a_group_jump = group_stride_u4(p.n_tiles) * 16 - GROUP_CHUNKS * 512;
    auto load_chunk = [&](int c, int st) {  // chunks are loaded in order
        const uint32_t sa = ring_s + uint32_t(st * STAGE_BYTES);
        if (leader) {
            mbar_expect_tx(full_s + 8 * st, B_BYTES);
            tma_load_2d(sa, &xmap, c * CHUNK_K, tok0, full_s + 8 * st);
        }
        cp_async16(sa + a_dst, tile_ok ? a_src : reinterpret_cast<const char*>(codes), tile_ok ? 16 : 0);
        a_src += (c + 1) % GROUP_CHUNKS == 0 ? a_group_jump + 512 : 512;
    };

    // Scales: the lane's 16 B of the warp's tile for one 512-k group (two e4m3 per chunk).
    auto load_scales = [&](int grp) -> uint4 {
        if (!tile_ok || grp >= p.k_groups) return make_uint4(0, 0, 0, 0);
        return __ldg(scales + (size_t(tile) * p.k_groups + grp) * 32 + lane);
    };
    // The scales of the chunks still to decode in the current group, two e4m3 (rows g, g+8) per
    // chunk, oldest in the low half of sc.x: a chunk takes the low 16 bits and shifts the queue.
    uint4 sc = make_uint4(0, 0, 0, 0), sc_next = load_scales(0);
    uint4 q;  // the lane's 16 B of codes of the chunk to decode next (written by this lane's cp.async)
    auto read_codes = [&](int c, int st) {
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
                     : "r"(ring_s + uint32_t(st * STAGE_BYTES) + a_dst));
        if (c % GROUP_CHUNKS == 0) sc = sc_next, sc_next = load_scales(c / GROUP_CHUNKS + 1);
    };
    auto next_scales = [&](uint32_t& s0, uint32_t& s1) {
        scales_to_bf16x2(sc.x, s0, s1);
        sc.x = __funnelshift_r(sc.x, sc.y, 16), sc.y = __funnelshift_r(sc.y, sc.z, 16), sc.z = __funnelshift_r(sc.z, sc.w, 16);
        sc.w >>= 16;
    };

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;

    const int kc = p.k_chunks;
#pragma unroll 1
    for (int c = 0; c <= AHEAD; ++c) {
        if (c < kc) load_chunk(c, c);
        cp_async_commit();
    }
    cp_async_wait<AHEAD>();  // this lane's codes of chunk 0
    read_codes(0, 0);
    mbar_wait(full_s, 0);
    int st_use = 0, st_load = AHEAD + 1;  // ring stages of chunk c and of chunk c + 1 + AHEAD

    // A registers of the four k16 steps of a chunk: slot j is rewritten only after the wgmma that
    // read it (step j of the previous chunk) is complete: each step is its own commit group and
    // waits until at most 3 are pending.
    uint32_t a[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) a[j][i] = 0;
#pragma unroll 1
    for (int c = 0; c < kc; ++c) {
        uint32_t s0, s1;
        next_scales(s0, s1);
        const uint64_t desc = b_desc(ring_s + uint32_t(st_use * STAGE_BYTES));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            wgmma_wait<3>();
#pragma unroll
            for (int i = 0; i < 4; ++i) pin(a[j][i]);  // the old values were read until here
            a_regs(q, j, s0, s1, a[j]);
#pragma unroll
            for (int i = 0; i < NACC; ++i) pin(acc[i]);
            wgmma_fence();
            wgmma_rs<TOK>(acc, a[j], desc + uint64_t(2 * j));  // + 32 B per k16
            wgmma_commit();
        }
        // Every warpgroup finished chunk c-1's wgmmas (each waited for them before its last step
        // of chunk c): after the barrier chunk c+1+AHEAD may overwrite that stage.
        cp_async_wait<AHEAD - 1>();  // this lane's codes of chunk c+1
        __syncthreads();
        if (c + 1 + AHEAD < kc) load_chunk(c + 1 + AHEAD, st_load);
        cp_async_commit();
        st_use = st_use + 1 == STAGES ? 0 : st_use + 1;
        st_load = st_load + 1 == STAGES ? 0 : st_load + 1;
        if (c + 1 < kc) {
            read_codes(c + 1, st_use);
            mbar_wait(full_s + 8 * st_use, uint32_t(((c + 1) / STAGES) & 1));
        }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) pin(a[j][i]);
#pragma unroll
    for (int i = 0; i < NACC; ++i) pin(acc[i]);

    // Epilogue: the CTA's [TOK tokens][128 rows] tile as bf16 through shared memory (the ring is free
    // once every warp is past its last wgmma wait: every copy was consumed), then whole 16-B pieces
    // of output rows. Token rows are padded by 16 B, so the 2-byte writes of a warp's four t-lanes
    // land 8 banks apart.
    constexpr int OROW = TILES * 16 * 2 + 16;
    static_assert(TOK * OROW <= STAGES * STAGE_BYTES, "the output tile must fit the ring");
    __syncthreads();
    {
        const int g = lane >> 2, t = lane & 3;
        uint8_t* orow = base + (2 * t) * OROW + (warp * 16 + g) * 2;
#pragma unroll
        for (int j = 0; j < TOK / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                *reinterpret_cast<__nv_bfloat16*>(orow + (8 * j + (e & 1)) * OROW + 16 * (e >> 1)) =
                    __float2bfloat16_rn(acc[4 * j + e] * alpha);
    }
    __syncthreads();
    const bool vec = p.ld_out % 8 == 0 && (reinterpret_cast<uintptr_t>(p.out) & 15) == 0;
    if constexpr (SILU) {  // out features 64y … 64y+63: gate in tile columns 0..63, up in 64..127
        const int f_cta = 64 * blockIdx.y;
#pragma unroll 2
        for (int piece = threadIdx.x; piece < TOK * 8; piece += THREADS) {
            const int r = piece / 8, f = f_cta + 8 * (piece % 8), tok = tok0 + r;
            if (tok >= tok_end || f >= p.n_ff) continue;
            const uint4 gv = *reinterpret_cast<const uint4*>(base + r * OROW + (f - f_cta) * 2);
            const uint4 uv = *reinterpret_cast<const uint4*>(base + r * OROW + (64 + f - f_cta) * 2);
            uint4 o;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const uint32_t gw = word_of(gv, q), uw = word_of(uv, q);
                const __nv_bfloat16 lo = silu_times(__ushort_as_bfloat16(uint16_t(gw)), __ushort_as_bfloat16(uint16_t(uw)));
                const __nv_bfloat16 hi = silu_times(__ushort_as_bfloat16(uint16_t(gw >> 16)), __ushort_as_bfloat16(uint16_t(uw >> 16)));
                const uint32_t w = uint32_t(__bfloat16_as_ushort(lo)) | (uint32_t(__bfloat16_as_ushort(hi)) << 16);
                if (q == 0) o.x = w; else if (q == 1) o.y = w; else if (q == 2) o.z = w; else o.w = w;
            }
            store8(p.out + size_t(tok) * p.ld_out + f, o, f, p.n_ff, vec);
        }
        return;
    }
    const int f_cta = tile0 * 16;
#pragma unroll 4
    for (int piece = threadIdx.x; piece < TOK * TILES * 2; piece += THREADS) {
        const int r = piece / (TILES * 2), f = f_cta + 8 * (piece % (TILES * 2)), tok = tok0 + r;
        if (tok >= tok_end || f >= p.n) continue;
        const uint4 v = *reinterpret_cast<const uint4*>(base + r * OROW + (f - f_cta) * 2);
        store8(p.out + size_t(tok) * p.ld_out + f, v, f, p.n, vec);
    }
#else
    __trap();  // not an sm_90a image: the registry never selects this kernel there (FEAT_WGMMA)
#endif
}

__global__ void w4a16_wgmma_probe_kernel(int* ok) { *ok = TETRA_WGMMA_OK; }

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_fn() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        TETRA_CHECK(f && q == cudaDriverEntryPointSuccess, "matmul_nvfp4_w4a16_wgmma: the driver has no cuTensorMapEncodeTiled");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

}  // namespace

bool w4a16_wgmma_compiled_here() {  // the image the driver loaded for the current device, asked once
    static int cache[64];                // per device: 0 not asked, 1 yes, 2 no
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
    int& cached = cache[dev];
    if (cached == 0) {
        int* d = nullptr;
        int h = 0;
        if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return false;
        w4a16_wgmma_probe_kernel<<<1, 1>>>(d);
        const bool ran = cudaGetLastError() == cudaSuccess && cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
        cudaFree(d);
        cached = ran && h == 1 ? 1 : 2;
    }
    return cached == 1;
}

// The token tile of one pass over m rows: 256 where its grid loads the SMs evenly (the mean CTAs
// per SM ≥ 0.9 of the busiest SM's), else 128 if that is more even. Measured on an H100 (docs/perf.md,
// session 15): 256-token tiles are faster wherever both are even (gate+up at m = 1024: 0.92–0.96 of
// cuBLAS against 0.82–0.84); qkv of Llama-3.1-8B at m = 1024 has 192 CTAs of 256 tokens on 132 SMs
// (0.73) and 384 of 128 (0.97): 128-token tiles 0.68–0.73 against 0.61–0.64.
int w4a16_wgmma_tokens(int64_t m, int64_t n, int sm_count) {
    auto balance = [&](int64_t tok) {
        const double per_sm = double((m + tok - 1) / tok * ((n + TILES * 16 - 1) / (TILES * 16))) / std::max(sm_count, 1);
        return per_sm / std::ceil(per_sm);
    };
    return balance(256) >= 0.9 || balance(256) >= balance(128) ? 256 : 128;
}

size_t w4a16_wgmma_workspace_bytes(int64_t m, int64_t k) { return size_t(m) * size_t((k + 63) / 64 * 64) * 2; }

size_t w4a16_wgmma_workspace_rows(int64_t k, size_t ws_bytes) { return ws_bytes / w4a16_wgmma_workspace_bytes(1, k); }

namespace {

template <int TOK, bool SILU, bool GROUPED = false> void set_smem_attr() {
    CUDA_CHECK(cudaFuncSetAttribute(w4a16_wgmma_kernel<TOK, SILU, GROUPED>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    wg_tile<TOK>::SMEM_BYTES));
}

// x_perm of `rows` rows of x (k) into ws, and its tensor map (boxes of 64 k × tok rows).
CUtensorMap permute_and_map(const __nv_bfloat16* x, int64_t rows, int64_t k, void* ws, int tok, cudaStream_t s) {
    const int64_t k64 = (k + 63) / 64 * 64;
    __nv_bfloat16* xp = static_cast<__nv_bfloat16*>(ws);
    const int64_t units = rows * (k64 / 8);
    w4a16_permute_x_kernel<<<unsigned((units + 255) / 256), 256, 0, s>>>(x, xp, int(rows), int(k), int(k64));
    CUDA_CHECK(cudaGetLastError());
    CUtensorMap map;
    const cuuint64_t dims[2] = {cuuint64_t(k64), cuuint64_t(rows)}, strides[1] = {cuuint64_t(k64 * 2)};
    const cuuint32_t box[2] = {CHUNK_K, cuuint32_t(tok)}, estr[2] = {1, 1};
    const CUresult r = encode_tiled_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, xp, dims, strides, box, estr,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    TETRA_CHECK(r == CUDA_SUCCESS, "matmul_nvfp4_w4a16_wgmma: cuTensorMapEncodeTiled failed (%d) for x_perm [%lld, %lld]",
                int(r), (long long)rows, (long long)k64);
    return map;
}

// n_ff > 0: matmul_silu (out [m, n_ff], ld_out = n_ff).
void wgmma_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out, int64_t ld_out, int64_t n_ff, void* ws,
                  size_t ws_bytes, cudaStream_t s, int tokens_override) {
    TETRA_CHECK(m > 0 && w.n > 0 && w.k > 0 && w.k % 16 == 0 && ld_out >= (n_ff > 0 ? n_ff : w.n) && w.k < INT32_MAX / 2,
                "matmul_nvfp4_w4a16_wgmma: x [%lld, %lld], weight [%lld, %lld], ld_out %lld", (long long)m,
                (long long)w.k, (long long)w.n, (long long)w.k, (long long)ld_out);
    const int64_t k64 = (w.k + 63) / 64 * 64;
    const int64_t rows_fit = int64_t(w4a16_wgmma_workspace_rows(w.k, ws_bytes));
    TETRA_CHECK(ws && rows_fit >= 1, "matmul_nvfp4_w4a16_wgmma: workspace of %zu bytes holds no permuted x row of %lld bytes",
                ws_bytes, (long long)(k64 * 2));
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(w.n, w.k);
    wg_params p{};
    p.codes = static_cast<const uint4*>(w.codes), p.scales = static_cast<const uint4*>(w.scales);
    p.n = int(w.n), p.ld_out = int(ld_out);
    p.n_tiles = int(d.n_tiles), p.k_chunks = int(d.k_chunks), p.k_groups = int(d.k_groups);
    p.alpha = w.scale_global * 256.0f;
    p.n_ff = int(n_ff);
    static std::once_flag attr_once;  // the attribute is per function; every device the same
    std::call_once(attr_once, [] {
        set_smem_attr<256, false>(), set_smem_attr<128, false>(), set_smem_attr<256, true>(), set_smem_attr<128, true>();
    });
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // In slices of the rows the workspace holds (one slice for every shape the engine runs).
    const int64_t slice = rows_fit >= m ? m : std::max<int64_t>(256, rows_fit / 256 * 256);
    TETRA_CHECK(slice <= rows_fit, "matmul_nvfp4_w4a16_wgmma: workspace of %zu bytes holds %lld permuted rows, fewer than 256",
                ws_bytes, (long long)rows_fit);
    const int tok = tokens_override > 0 ? tokens_override : w4a16_wgmma_tokens(slice, w.n, sms);
    for (int64_t r0 = 0; r0 < m; r0 += slice) {
        const int64_t rows = std::min(slice, m - r0);
        const __nv_bfloat16* xs = static_cast<const __nv_bfloat16*>(x) + r0 * w.k;
        const CUtensorMap map = permute_and_map(xs, rows, w.k, ws, tok, s);
        p.m = int(rows);
        p.out = static_cast<__nv_bfloat16*>(out) + r0 * ld_out;
        const int64_t groups = n_ff > 0 ? (n_ff + 63) / 64 : (d.n_tiles + TILES - 1) / TILES;
        const dim3 grid(unsigned((rows + tok - 1) / tok), unsigned(groups));
        if (n_ff > 0) {
            if (tok == 256) w4a16_wgmma_kernel<256, true><<<grid, THREADS, wg_tile<256>::SMEM_BYTES, s>>>(map, p);
            else w4a16_wgmma_kernel<128, true><<<grid, THREADS, wg_tile<128>::SMEM_BYTES, s>>>(map, p);
        } else {
            if (tok == 256) w4a16_wgmma_kernel<256, false><<<grid, THREADS, wg_tile<256>::SMEM_BYTES, s>>>(map, p);
            else w4a16_wgmma_kernel<128, false><<<grid, THREADS, wg_tile<128>::SMEM_BYTES, s>>>(map, p);
        }
        CUDA_CHECK(cudaGetLastError());
    }
}

}  // namespace

void moe_matmul_nvfp4_w4a16_wgmma_launch(const void* x, int64_t n_rows, const int32_t* offsets,
                                         const moe_expert_ptrs* table, int64_t n_expert, int64_t n, int64_t k, void* out,
                                         int64_t n_ff, void* ws, size_t ws_bytes, cudaStream_t s) {
    constexpr int TOK = W4A16_MOE_WGMMA_TOKENS;
    TETRA_CHECK(n_rows > 0 && n > 0 && k > 0 && k % 16 == 0 && k < INT32_MAX / 2 && n_rows < INT32_MAX / 2,
                "moe_matmul_nvfp4_w4a16_wgmma: x [%lld, %lld], weight [%lld, %lld]", (long long)n_rows, (long long)k,
                (long long)n, (long long)k);
    TETRA_CHECK(ws && int64_t(w4a16_wgmma_workspace_rows(k, ws_bytes)) >= n_rows,
                "moe_matmul_nvfp4_w4a16_wgmma: workspace of %zu bytes holds fewer than %lld permuted rows", ws_bytes,
                (long long)n_rows);
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(n, k);
    wg_params p{};
    p.n = int(n), p.ld_out = int(n_ff > 0 ? n_ff : n), p.m = int(n_rows);
    p.n_tiles = int(d.n_tiles), p.k_chunks = int(d.k_chunks), p.k_groups = int(d.k_groups);
    p.n_ff = int(n_ff), p.offsets = offsets, p.table = table, p.ne = int(n_expert);
    p.out = static_cast<__nv_bfloat16*>(out);
    static std::once_flag attr_once;
    std::call_once(attr_once, [] { set_smem_attr<TOK, false, true>(), set_smem_attr<TOK, true, true>(); });
    const CUtensorMap map = permute_and_map(static_cast<const __nv_bfloat16*>(x), n_rows, k, ws, TOK, s);
    const int64_t groups = n_ff > 0 ? (n_ff + 63) / 64 : (d.n_tiles + TILES - 1) / TILES;
    const dim3 grid(unsigned(moe_items_bound(n_rows, n_expert, TOK)), unsigned(groups));
    if (n_ff > 0) w4a16_wgmma_kernel<TOK, true, true><<<grid, THREADS, wg_tile<TOK>::SMEM_BYTES, s>>>(map, p);
    else w4a16_wgmma_kernel<TOK, false, true><<<grid, THREADS, wg_tile<TOK>::SMEM_BYTES, s>>>(map, p);
    CUDA_CHECK(cudaGetLastError());
}

void matmul_nvfp4_w4a16_wgmma_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out, int64_t ld_out,
                                     void* ws, size_t ws_bytes, cudaStream_t s, int tokens_override) {
    wgmma_launch(x, m, w, out, ld_out, 0, ws, ws_bytes, s, tokens_override);
}

void matmul_silu_nvfp4_w4a16_wgmma_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, int64_t n_ff, void* out,
                                          void* ws, size_t ws_bytes, cudaStream_t s, int tokens_override) {
    TETRA_CHECK(n_ff > 0 && n_ff % 16 == 0 && w.n == 2 * n_ff,
                "matmul_silu_nvfp4_w4a16_wgmma: weight of %lld rows is not a stacked [gate; up] of n_ff = %lld (a multiple of 16)",
                (long long)w.n, (long long)n_ff);
    wgmma_launch(x, m, w, out, n_ff, n_ff, ws, ws_bytes, s, tokens_override);
}

}  // namespace cuda
}  // namespace tetra

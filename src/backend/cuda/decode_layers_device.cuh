// Device side of decode_layers_sm90.cu: the persistent kernel's parameters, its schedule of weight
// units, and its phases (the norms, the matmul units, the attention items). See that file's header.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/norm_vec.cuh"

namespace tetra {
namespace cuda {
namespace dl {

using namespace w4a16;

// 16 consumer warps: the matmul units are latency-bound per warp (8 warps: 250 µs for three 8B
// layers, 16: 230; docs/perf.md, session 25), so more warps drain the ring faster.
constexpr int CONSUMER_WARPS = 16, CONSUMERS = CONSUMER_WARPS * 32, THREADS = CONSUMERS + 32;
constexpr int MAX_KV = 256;  // kv heads: the counter buffer has a fixed size (it never moves under a graph)
constexpr int UNIT_U4 = GROUP_CHUNKS * 32 + 32;  // one (tile, 512-k group): 8 chunks of codes, then its scales
constexpr int UNIT_BYTES = UNIT_U4 * 16;        // 4608
constexpr int MAX_G = 8;                        // q heads per kv head
constexpr int MAX_P = 256;                      // kv positions of one attention item
enum phase : int { QKV = 0, O = 1, GU = 2, DOWN = 3, N_PHASES = 4 };
// Counters (u32, zero between launches: the last CTA to leave resets them): phase completions,
// then one merge ticket per kv head, then the exit count.
enum counter : int { C_QKV = 0, C_ATTN = 1, C_O = 2, C_GU = 3, C_DOWN = 4, C_TICKET = 5 };

struct weight {
    const uint4* codes;   // the packed layout of w4a16_layout.h
    const uint4* scales;
    float alpha;          // scale_global · 2^8 (decode_word's codes are value · 2^-126, scales · 2^118)
    int n_tiles, k_groups;
};
struct layer {
    weight w[N_PHASES];  // qkv, o, gate_up (stacked), down
    const void* attn_norm;
    const void* ffn_norm;
    const void* q_norm;  // nullptr: none
    const void* k_norm;
    __nv_bfloat16* k_cache;
    __nv_bfloat16* v_cache;
};

constexpr int MAX_LAYERS = 128;  // the layer table travels in the kernel's parameters (≤ 32 KB since CUDA 12.1)

struct params {
    layer layers[MAX_LAYERS];
    int n_layer, n_embd, n_head, n_kv, n_ff, n_qkv;
    int norm_t;  // dtype of the norm weights (load_any)
    float eps, scale;
    const int32_t* positions;
    const int32_t* seq_lens;
    const int32_t* block_table;  // row 0
    const int32_t* slot_mapping;
    int block_size;
    int64_t n_slots;
    const float* inv_freq;
    __nv_bfloat16* residual;  // in/out [n_embd]
    __nv_bfloat16* proj;      // in/out [n_embd]: the down output
    __nv_bfloat16* res_b;     // the residual after the attention add (ping-pong with residual)
    __nv_bfloat16* qkv;       // [n_qkv]
    __nv_bfloat16* attn;      // [n_head · hd]
    __nv_bfloat16* proj_o;    // [n_embd]
    __nv_bfloat16* act;       // [n_ff]
    float* partial;           // [n_head][max_splits][hd + 2]: o, then m, l
    unsigned* counters;
    int first_plain;
    int ring;        // weight slots of UNIT_BYTES
    int x_u4;        // uint4 of the x region (also the attention scratch)
    int red_floats;  // floats of the group-sum region
    int tiles[N_PHASES], kg[N_PHASES], tiles_layer;
    int max_splits;  // per kv head; partial is sized for it
};

// ---- small PTX helpers (sm_90: bulk copies into mbarrier-completed slots) ---------------------------
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TETRA_DL_OK 1
#else
#define TETRA_DL_OK 0
#endif

#if TETRA_DL_OK
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t pol) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(pol)
        : "memory");
}
#endif
// The consumer warps' own barrier (the producer warp never joins it).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS) : "memory"); }
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Consumer thread 0 spins until counter c reaches target, then the consumers go on: the acquire and
// the named barrier order every consumer's later reads after the writes the count stands for (those
// reads go through L2: .cg loads, never L1, which is not coherent within a launch).
__device__ __forceinline__ void wait_count(const params& p, int c, unsigned target) {
    if (threadIdx.x == 0)
        while (int(ld_acquire(p.counters + c) - target) < 0) {
        }
    consumers_sync();
}
// After the consumers' writes: one arrival on counter c.
__device__ __forceinline__ void arrive(const params& p, int c) {
    consumers_sync();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(p.counters + c, 1u);
    }
}

// ---- the schedule: which tiles of a phase a CTA owns ------------------------------------------------
// Tile j of phase ph of layer il belongs to CTA (j + off) mod grid, off = the tiles handed out before
// it in the step (so the CTAs with one more tile rotate). GU's work tiles are (gate tile j, up tile
// j + n_ff/16) pairs. A CTA's units of a phase: its tiles in order, each tile's groups in order.
struct share {
    int j0, count, per_tile;  // first tile, tiles, units per work tile
};
__device__ __forceinline__ share share_of(const params& p, int il, int ph) {
    int off = 0;
    for (int q = 0; q < ph; ++q) off += p.tiles[q];
    const int grid = gridDim.x;
    off = int((int64_t(il) * p.tiles_layer + off) % grid);
    const int j0 = ((int(blockIdx.x) - off) % grid + grid) % grid, t = p.tiles[ph];
    share s;
    s.j0 = j0;
    s.count = j0 < t ? (t - 1 - j0) / grid + 1 : 0;
    s.per_tile = p.kg[ph] * (ph == GU ? 2 : 1);
    return s;
}
// Unit u of a share → the weight tile, the group and the local tile (red index) it feeds.
__device__ __forceinline__ void unit_of(const params& p, int ph, const share& s, int u, int& tile, int& grp, int& lt) {
    const int q = u / s.per_tile, r = u % s.per_tile, kg = p.kg[ph];
    const int sub = r / kg, j = s.j0 + q * int(gridDim.x);
    grp = r % kg;
    tile = ph == GU ? j + sub * (p.n_ff / 16) : j;
    lt = ph == GU ? 2 * q + sub : q;
}

}  // namespace dl
}  // namespace cuda
}  // namespace tetra

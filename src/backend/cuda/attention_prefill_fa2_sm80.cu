// attention_prefill_fa2_sm80: paged causal attention on mma.sync for any batch (prefill chunks over
// cached prefixes, decode rows beside them), bf16/f16, head_dim 64 or 128, GQA — FlashAttention-2
// with the keys staged in shared memory. A CTA is 4 warps of 16 query rows each (tokens × heads of
// one kv head: prefill_rows_params), 64 rows that share every K/V tile: blocks of 64 keys (32 where
// an SM's shared memory holds fewer than three such CTAs: attention_prefill_fa2_k32_sm80) are copied
// by cp.async into a swizzled two-stage ring (the next block lands while the warps compute on this
// one; one barrier per block) and read by ldmatrix, K as the B operand of S = Q·Kᵀ and V, transposed
// by ldmatrix.trans, as the B operand of O += P·V (P is the S accumulator, re-used as the A
// operand). Q stays in registers in the A layout. Each row masks its own keys (causal: ≤ its
// position; the sliding window), except in blocks that lie inside every row's range of the warp; the
// CTA copies only keys in the union of its rows' ranges, zeros elsewhere, so cache slots no
// sequence owns are never read. CTAs run heaviest first. A NaN or Inf in a V row of the CTA's range
// reaches the rows that mask that key through the MMA's 0 · NaN (as in the kernels before it: NaN
// spreads in the cache's garbage case, it is never dropped; the oracle leaves such rows finite).
//
// Why: it replaced attention_prefill_mma_sm80 (session 27), whose warps each loaded their own K/V
// rows through L1 in the decode kernel's lane layout (16 rows of work per 16 keys loaded), half of a
// prefill at 8192 tokens. Here a K/V byte comes from L2 once per 64 rows and from shared memory once
// per 16 rows, in the conflict-free ldmatrix pattern: prefill 1.2× (2048 tokens) to 1.5× (8192)
// faster on an H100 (docs/perf.md, session 28).
//
// Numerics as the other mma attention kernels (attention_mma.cuh): Q·K in f32 from T inputs (exact
// products), the scale and expf, online_softmax (blocks of 64 keys), P·V as
// T(p)·V + T(p − T(p))·V (16 significant bits of p), NaN handling included. The sum orders differ
// from the other kernels (NMSE-level differences, tested against the CPU oracle). P as one T value
// (FlashAttention's rounding, a third fewer MMAs) measured only 5 % faster at 8192 tokens (docs/perf.md,
// session 28): the precision stays.
#include <climits>
#include <type_traits>

#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"

namespace tetra {
namespace cuda {

namespace {

using namespace attn_mma;
using w4a16::cp_async16;
using w4a16::cp_async_commit;
using w4a16::cp_async_wait;
using w4a16::smem_u32;

constexpr int kWarps = 4, kThreads = kWarps * 32;
// Stages in the ring; keys per stage (KEYS) are the kernel's template parameter: 64 where three CTAs
// of 64-key stages fit an SM's shared memory (H100: 3 × 64 KB at head_dim 128), else 32 (A100's
// 164 KB, the 100 KB of sm_86 / 89 / 120 / 121: one CTA of 64-key stages per SM there). Measured on
// an H100 (8-layer Llama-3.1-8B prefill, docs/perf.md session 28): 32-key stages 1.4 % slower at
// 8192 tokens, equal at 2048; 3 stages of 64 or 32 keys within ±1 % of 2 stages of 64.
constexpr int kStages = 2;

// The query rows: a warp owns 16 rows — tpw tokens × hp query heads of one kv head (hp = min(group,
// 16), tpw = 16 / hp) — and a CTA `warps` warps of consecutive tokens of one (sequence, kv head,
// head split).
struct prefill_rows_params : attn_base {
    int hp;   // query heads per warp (rows g, g + 8: head = row % hp)
    int tpw;  // tokens per warp (row / hp)
};

// Row ρ (0..15) of warp w of query tile `tile`: its token and query head, and its key range [lo, hi]
// (causal, sliding window; hi = −1: not a row of this launch).
struct row_of {
    int tok = -1, head = 0, lo = 0, hi = -1;
};

__device__ __forceinline__ row_of make_row(const prefill_rows_params& p, int warps, int tok0, int tok1, int tile,
                                           int warp, int rho, int kvh, int hsplit) {
    row_of r;
    const int tl = rho / p.hp, hl = rho % p.hp;
    const int tok = tok0 + (tile * warps + warp) * p.tpw + tl, hg = hsplit * p.hp + hl;
    if (tl >= p.tpw || tok >= tok1 || hg >= p.group) return r;
    r.tok = tok, r.head = kvh * p.group + hg;
    r.hi = p.positions[tok];
    r.lo = p.window > 0 ? max(0, r.hi - p.window + 1) : 0;
    return r;
}

// Host: hp, tpw and head_splits of a prefill launch (p's attn_base filled).
inline void prefill_rows_plan(prefill_rows_params& p) {
    p.hp = p.group < 16 ? p.group : 16;
    p.tpw = 16 / p.hp;
    p.head_splits = (p.group + p.hp - 1) / p.hp;
}

// One stage: the K tile, then the V tile, [KEYS][D] each (2-byte T).
template <int D, int KEYS> constexpr int tile_bytes() { return KEYS * D * 2; }
template <int D, int KEYS> constexpr int smem_bytes() { return kStages * 2 * tile_bytes<D, KEYS>(); }

// Byte offset of 16-byte chunk c of key row r in a tile: chunk c ^ (r % 8), so that the 8 row
// addresses of an ldmatrix phase (one chunk of 8 consecutive rows) hit 8 different bank groups.
template <int D>
__device__ __forceinline__ uint32_t tile_off(int r, int c) {
    return uint32_t(r * (D * 2) + ((c ^ (r & 7)) << 4));
}

__device__ __forceinline__ void ldsm4(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm4_t(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Keys [j0, j0 + KEYS) of the CTA's (sequence, kv head) into stage buffer `st` (K tile, V tile);
// keys outside [lo, hi] become zeros and are not read. Not committed: the caller commits one group
// per stage (empty ones too, so that cp_async_wait<kStages − 2> counts stages).
template <class T, int D, int KEYS>
__device__ __forceinline__ void load_stage(const T* kc, const T* vc, const int32_t* bt, int block_size, int n_head_kv,
                                           int kvh, int j0, int lo, int hi, uint32_t st) {
    constexpr int CPR = D / 8, ROWS = kThreads / CPR;  // 16-byte chunks per row; rows per pass
    const int c = threadIdx.x % CPR;
#pragma unroll
    for (int i = 0; i < KEYS / ROWS; ++i) {
        const int r = int(threadIdx.x) / CPR + i * ROWS, key = j0 + r;
        const bool ok = key >= lo && key <= hi;
        const int64_t off =
            ok ? (paged_slot(bt, block_size, key) * n_head_kv + kvh) * D + c * 8 : 0;
        cp_async16(st + tile_off<D>(r, c), kc + off, ok ? 16 : 0);
        cp_async16(st + tile_bytes<D, KEYS>() + tile_off<D>(r, c), vc + off, ok ? 16 : 0);
    }
}

// One stage of KEYS keys from j0 (tiles at kt, vt) for this warp's rows g (r = 0) and g + 8 (r = 1):
// S = Q·Kᵀ (KEYS / 8 n8 tiles), the rows' online softmax with their own key ranges, O = O·alpha + P·V.
template <class T, int D, int KEYS, bool MASK>
__device__ __forceinline__ void fa2_stage(const uint32_t (&q)[D / 16][4], uint32_t kt, uint32_t vt, int j0,
                                          const int (&lo)[2], const int (&hi)[2], float scale, int lane, float (&m)[2],
                                          float (&l)[2], float (&o)[D / 8][4]) {
    constexpr int NT = KEYS / 8;  // n8 tiles of scores
    const int t = lane & 3;
    float sc[NT][4];
    // ldmatrix.x4 of K: matrices (keys 0-7, chunk 2ks), (0-7, 2ks+1), (8-15, 2ks), (8-15, 2ks+1): the
    // b0, b1 of two n8 tiles (lane (g, t) gets key g, dims 2t, 2t+1 of each 8×8 block).
    const int krow = (lane & 7) + ((lane >> 4) << 3), kch = (lane >> 3) & 1;
#pragma unroll
    for (int n2 = 0; n2 < NT / 2; ++n2) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[2 * n2][e] = sc[2 * n2 + 1][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t b[4];
            ldsm4(kt + tile_off<D>(16 * n2 + krow, 2 * ks + kch), b);
            mma16816<T>(sc[2 * n2], q[ks][0], q[ks][1], q[ks][2], q[ks][3], b[0], b[1]);
            mma16816<T>(sc[2 * n2 + 1], q[ks][0], q[ks][1], q[ks][2], q[ks][3], b[2], b[3]);
        }
    }
    float pw[NT][4], alpha[2];
    online_softmax<NT, 2, MASK>(sc, j0, lo, hi, scale, t, m, l, pw, alpha);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] *= alpha[0], o[j][1] *= alpha[0], o[j][2] *= alpha[1], o[j][3] *= alpha[1];
    // ldmatrix.x4.trans of V: matrices (keys 0-7, chunk c), (8-15, c), (0-7, c+1), (8-15, c+1): the
    // b0, b1 of dim tiles c and c + 1 (lane (g, t) gets keys 2t, 2t+1 (+8) at dim g).
    const int vrow = (lane & 7) + (((lane >> 3) & 1) << 3), vch = lane >> 4;
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) {
        uint32_t a[4], rl[4];  // P's A registers for keys 16kk .. 16kk+15: T(p) and T(p − T(p))
        split2<T>(pw[2 * kk][0], pw[2 * kk][1], a[0], rl[0]);
        split2<T>(pw[2 * kk][2], pw[2 * kk][3], a[1], rl[1]);
        split2<T>(pw[2 * kk + 1][0], pw[2 * kk + 1][1], a[2], rl[2]);
        split2<T>(pw[2 * kk + 1][2], pw[2 * kk + 1][3], a[3], rl[3]);
#pragma unroll
        for (int d2 = 0; d2 < D / 16; ++d2) {
            uint32_t b[4];
            ldsm4_t(vt + tile_off<D>(16 * kk + vrow, 2 * d2 + vch), b);
            mma16816<T>(o[2 * d2], rl[0], rl[1], rl[2], rl[3], b[0], b[1]);
            mma16816<T>(o[2 * d2], a[0], a[1], a[2], a[3], b[0], b[1]);
            mma16816<T>(o[2 * d2 + 1], rl[0], rl[1], rl[2], rl[3], b[2], b[3]);
            mma16816<T>(o[2 * d2 + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
        }
    }
}

// grid: (query tiles of kWarps · tpw tokens, n_seqs, n_head_kv · head_splits); block: kWarps warps;
// dynamic shared memory: smem_bytes<D, KEYS>(). Three CTAs per SM (≤ 168 registers: a few bytes
// spill at head_dim 128): 8192-token prefill of an 8-layer Llama-3.1-8B 6.6 % faster than two (219
// registers, no spills) on an H100 (docs/perf.md, session 28).
template <class T, int D, int KEYS>
__global__ void __launch_bounds__(kThreads, 3) attention_prefill_fa2_kernel(prefill_rows_params p) {
    extern __shared__ __align__(128) uint8_t fa_smem[];
    __shared__ int s_lo, s_hi;
    pdl_wait();  // q and this chunk's K/V rows come from the kernel before
    pdl_trigger();
    const int tile = gridDim.x - 1 - blockIdx.x;  // heaviest first: later tokens see more keys
    const int s = blockIdx.y, kvh = blockIdx.z / p.head_splits, hsplit = blockIdx.z % p.head_splits;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tok0 = p.cu_seqlens_q[s], tok1 = p.cu_seqlens_q[s + 1];
    if (tok0 + tile * kWarps * p.tpw >= tok1) return;  // past the sequence's query rows (the whole CTA)
    const row_of rw[2] = {make_row(p, kWarps, tok0, tok1, tile, warp, g, kvh, hsplit),
                          make_row(p, kWarps, tok0, tok1, tile, warp, g + 8, kvh, hsplit)};
    const int lo[2] = {rw[0].lo, rw[1].lo}, hi[2] = {rw[0].hi, rw[1].hi};
    // The warp's key range and the CTA's: unions of the rows' ranges (consecutive tokens: no gaps).
    int lo_w = INT_MAX, hi_w = -1;
#pragma unroll
    for (int r = 0; r < 2; ++r)
        if (rw[r].hi >= rw[r].lo) lo_w = min(lo_w, rw[r].lo), hi_w = max(hi_w, rw[r].hi);
    lo_w = __reduce_min_sync(0xffffffffu, lo_w);
    hi_w = __reduce_max_sync(0xffffffffu, hi_w);
    if (threadIdx.x == 0) s_lo = INT_MAX, s_hi = -1;
    __syncthreads();
    if (lane == 0 && hi_w >= 0) atomicMin(&s_lo, lo_w), atomicMax(&s_hi, hi_w);
    __syncthreads();
    const int lo_c = s_lo, hi_c = s_hi;
    if (hi_c < 0) return;  // the whole CTA

    const T* kc = static_cast<const T*>(p.k_cache);
    const T* vc = static_cast<const T*>(p.v_cache);
    const int32_t* bt = p.block_tables + int64_t(s) * p.max_blocks;
    const uint32_t base = smem_u32(fa_smem);
    const int n_stages = (hi_c - lo_c) / KEYS + 1;
    auto stage_addr = [&](int i) { return base + uint32_t(i % kStages) * 2 * tile_bytes<D, KEYS>(); };
    // The ring's first kStages − 1 stages (one commit group each, empty past the last stage).
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
        if (i < n_stages)
            load_stage<T, D, KEYS>(kc, vc, bt, p.block_size, p.n_head_kv, kvh, lo_c + i * KEYS, lo_c, hi_c,
                                   stage_addr(i));
        cp_async_commit();
    }

    // Q in the A layout: q[ks] = rows g / g + 8 at dims 16ks + 2t, 2t+1 (words 0, 1) and + 8 (words 2, 3).
    uint32_t q[D / 16][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const uint32_t* src = rw[r].tok >= 0 ? reinterpret_cast<const uint32_t*>(static_cast<const T*>(p.q) +
                                                   (int64_t(rw[r].tok) * p.n_head + rw[r].head) * D + 2 * t)
                                             : nullptr;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            q[ks][r] = src ? __ldg(src + 8 * ks) : 0u;
            q[ks][2 + r] = src ? __ldg(src + 8 * ks + 4) : 0u;
        }
    }
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    // Stages inside every live row's key range skip the masks (warp-uniform).
    int lo_max = 0, hi_min = INT_MAX;
#pragma unroll
    for (int r = 0; r < 2; ++r)
        if (rw[r].tok >= 0) lo_max = max(lo_max, rw[r].lo), hi_min = min(hi_min, rw[r].hi);
    lo_max = __reduce_max_sync(0xffffffffu, lo_max);
    hi_min = __reduce_min_sync(0xffffffffu, hi_min);

    for (int i = 0; i < n_stages; ++i) {
        const int j0 = lo_c + i * KEYS;
        // Stage i has landed (the kStages − 2 newer groups may still be in flight); after the barrier
        // every warp is also done with stage i − 1, whose buffer the load below reuses: one barrier
        // per stage.
        cp_async_wait<kStages - 2>();
        __syncthreads();
        if (i + kStages - 1 < n_stages)
            load_stage<T, D, KEYS>(kc, vc, bt, p.block_size, p.n_head_kv, kvh, j0 + (kStages - 1) * KEYS, lo_c, hi_c,
                                   stage_addr(i + kStages - 1));
        cp_async_commit();
        const uint32_t kt = stage_addr(i), vt = kt + tile_bytes<D, KEYS>();
        if (j0 > hi_w || j0 + KEYS - 1 < lo_w) continue;  // warp-uniform: no row of the warp sees the stage
        if (j0 >= lo_max && j0 + KEYS - 1 <= hi_min)
            fa2_stage<T, D, KEYS, false>(q, kt, vt, j0, lo, hi, p.scale, lane, m, l, o);
        else
            fa2_stage<T, D, KEYS, true>(q, kt, vt, j0, lo, hi, p.scale, lane, m, l, o);
    }

    // The quad's partial denominators, then the rows out: lane (g, t) holds dims 8j + 2t, 2t+1.
    finish_rows<2>(l);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (rw[r].tok < 0) continue;
        const float inv = row_inv(l[r]);
        uint32_t* dst = reinterpret_cast<uint32_t*>(static_cast<T*>(p.out) +
                                                    (int64_t(rw[r].tok) * p.n_head + rw[r].head) * D + 2 * t);
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            dst[4 * j] = pack2<T>(row_value(o[j][2 * r], l[r], inv), row_value(o[j][2 * r + 1], l[r], inv));
        }
    }
}

template <class T, int D, int KEYS>
void fa2_launch(backend& be, const attention_args& a) {
    prefill_rows_params p{};
    attn_fill_base(a, p);
    prefill_rows_plan(p);
    auto kern = attention_prefill_fa2_kernel<T, D, KEYS>;
    static bool attr_set = false;  // per instance; the attribute is per function, for every device
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D, KEYS>()));
        attr_set = true;
    }
    const int tokens_per_cta = kWarps * p.tpw;
    dim3 grid(unsigned((a.meta.max_seqlen_q + tokens_per_cta - 1) / tokens_per_cta), unsigned(a.meta.n_seqs),
              unsigned(p.n_head_kv * p.head_splits));
    launch_pdl(be, kern, grid, dim3(kThreads), size_t(smem_bytes<D, KEYS>()), p);
}

template <int KEYS>
void attention_prefill_fa2_launch(backend& be, const attention_args& a) {
    if (a.q.dim(0) == 0 || a.meta.max_seqlen_q == 0) return;
    using bf16 = __nv_bfloat16;
    const bool d64 = a.q.dim(2) == 64;
    if (a.act == dtype::BF16) d64 ? fa2_launch<bf16, 64, KEYS>(be, a) : fa2_launch<bf16, 128, KEYS>(be, a);
    else d64 ? fa2_launch<__half, 64, KEYS>(be, a) : fa2_launch<__half, 128, KEYS>(be, a);
}

template <int KEYS>
std::string attention_prefill_fa2_accepts(const attention_args& a) {
    std::string why = attn_accepts_common(a);
    if (!why.empty()) return why;
    const int64_t d = a.q.dim(2);
    if (d != 64 && d != 128) return strfmt("prefill fa2 kernel: head_dim %lld (needs 64 or 128)", (long long)d);
    for (auto x : {std::make_pair(&a.q, "q"), {&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"}, {&a.out, "out"}})
        if (reinterpret_cast<uintptr_t>(x.first->data) % 16 != 0)
            return strfmt("prefill fa2 kernel: %s is not 16-byte aligned", x.second);
    if (KEYS == 64) {  // three CTAs per SM, each with 1 KB the hardware reserves
        const int64_t need = 3 * (int64_t(d == 64 ? smem_bytes<64, 64>() : smem_bytes<128, 64>()) + 1024);
        const int64_t have = smem_per_sm_here();
        if (have < need)
            return strfmt("prefill fa2 kernel, 64-key stages: %lld B of shared memory per SM hold fewer than 3 CTAs "
                          "(%lld B): the 32-key form takes it", (long long)have, (long long)need);
    }
    return "";
}

}  // namespace

// sm_80: mma.sync m16n8k16, ldmatrix and cp.async with bf16/f16 operands. Priorities 15 (64-key
// stages, where three CTAs fit an SM) and 14 (32-key stages, everywhere): above attention_prefill_sm80
// (10, the CUDA-core kernel that also takes f32 and any head_dim), below the decode kernels (20–40),
// which take only batches of one query row per sequence.
void register_attention_prefill_fa2(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_prefill_fa2_sm80",
                                      cuda_req(80, {dtype::BF16, dtype::F16}), 15, attention_prefill_fa2_accepts<64>,
                                      attention_prefill_fa2_launch<64>));
    r.add(make_kernel<attention_args>("attention", "attention_prefill_fa2_k32_sm80",
                                      cuda_req(80, {dtype::BF16, dtype::F16}), 14, attention_prefill_fa2_accepts<32>,
                                      attention_prefill_fa2_launch<32>));
}

}  // namespace cuda
}  // namespace tetra

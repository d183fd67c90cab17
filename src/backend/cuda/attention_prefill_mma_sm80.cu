// attention_prefill_mma_sm80: paged causal attention on mma.sync for any batch (prefill chunks over
// cached prefixes, and decode rows beside them), bf16/f16, head_dim 64 or 128, GQA. FlashAttention-2
// in the decode mma kernel's lane layout (attention_mma.cuh): a warp owns 16 query rows — tpw tokens
// × hp query heads of one kv head (hp = min(group, 16), tpw = 16 / hp) — as the A rows of
// m16n8k16 MMAs, and walks the keys in blocks of 16 (two n8 tiles): S = Q·Kᵀ, an f32 online
// softmax per row on the accumulators, O += P·V with P as the A operand. A CTA is 4 warps of
// consecutive tokens of one (sequence, kv head, head split), so the 4 warps read the same K/V rows
// (the later ones from L1). Each row masks its own keys (causal: ≤ its position; the sliding
// window); a warp loads only keys in the union of its rows' ranges, so cache slots no sequence owns
// are never read. CTAs run heaviest first (the last query tiles have the most keys).
//
// Why: attention_prefill_sm80 computes on CUDA cores with one 2-byte load per element, and at a
// 2048-token prompt it was most of the prefill (docs/perf.md, session 27).
//
// Numerics as attention_decode_mma_sm80: Q·K in f32 from T inputs (exact products), scale and expf
// as the other kernels, P·V as T(p)·V + T(p − T(p))·V (16 significant bits of p). A live NaN score
// makes its row NaN (as the oracle, whose sum of exps is NaN then), also where every live score of
// the row is NaN. A NaN in a V row that one row of the warp masks (a later key) reaches that row
// through the MMA's 0 · NaN, as in attention_prefill_sm80: NaN spreads in the cache's garbage case,
// it is never dropped.
#include <type_traits>

#include "backend/cuda/attention_mma.cuh"

namespace tetra {
namespace cuda {

namespace {

using namespace attn_mma;

constexpr int kWarps = 4;  // warps per CTA: consecutive tokens of one (sequence, kv head, head split)

struct prefill_mma_params : attn_base {
    int hp;   // query heads per warp (rows g, g + 8: head = row % hp)
    int tpw;  // tokens per warp (row / hp)
};

// Row ρ (0..15) of warp w of query tile `tile` → its token and query head, and its key range
// [lo, hi] (hi = −1: not a row of this launch).
struct row_of {
    int tok = -1, head = 0, lo = 0, hi = -1;
};

__device__ __forceinline__ row_of make_row(const prefill_mma_params& p, int tok0, int tok1, int tile, int warp, int rho,
                                           int kvh, int hsplit) {
    row_of r;
    const int tl = rho / p.hp, hl = rho % p.hp;
    const int tok = tok0 + (tile * kWarps + warp) * p.tpw + tl, hg = hsplit * p.hp + hl;
    if (tl >= p.tpw || tok >= tok1 || hg >= p.group) return r;
    r.tok = tok, r.head = kvh * p.group + hg;
    r.hi = p.positions[tok];
    r.lo = p.window > 0 ? max(0, r.hi - p.window + 1) : 0;
    return r;
}

// One block of 16 keys from j0 for this lane's rows g (r = 0) and g + 8 (r = 1), each with its own
// key range: S = Q·Kᵀ, then softmax_pv (attention_mma.cuh). The next block's K (jn ≥ 0) is requested
// after S, its V after P·V, so both loads overlap this block's math.
template <class T, int D>
__device__ __forceinline__ void prefill_step(const uint32_t (&q)[2][D / 8], mma_block<D>& blk, int j0,
                                             const int (&lo)[2], const int (&hi)[2], float scale, int t,
                                             float (&m)[2], float (&l)[2], float (&o)[D / 8][4],
                                             const mma_ctx<T, D>& c, int jn) {
    float sc[2][4];
    qk_block<T, D, 2>(q, blk, sc);
    if (jn >= 0) c.load_k(jn, -1, blk);
    softmax_pv<T, D, 2>(sc, blk, j0, lo, hi, scale, t, m, l, o);
    if (jn >= 0) c.load_v(jn, -1, blk);
}

// grid: (query tiles of kWarps · tpw tokens, n_seqs, n_head_kv · head_splits); block: kWarps warps.
template <class T, int D>
__global__ void __launch_bounds__(kWarps * 32) attention_prefill_mma_kernel(prefill_mma_params p) {
    pdl_wait();  // q and this chunk's K/V rows come from the kernel before
    pdl_trigger();
    const int tile = gridDim.x - 1 - blockIdx.x;  // heaviest first: later tokens see more keys
    const int s = blockIdx.y, kvh = blockIdx.z / p.head_splits, hsplit = blockIdx.z % p.head_splits;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tok0 = p.cu_seqlens_q[s], tok1 = p.cu_seqlens_q[s + 1];
    if (tok0 + (tile * kWarps + warp) * p.tpw >= tok1) return;  // past the sequence's query rows
    const row_of rw[2] = {make_row(p, tok0, tok1, tile, warp, g, kvh, hsplit),
                          make_row(p, tok0, tok1, tile, warp, g + 8, kvh, hsplit)};
    const int lo[2] = {rw[0].lo, rw[1].lo}, hi[2] = {rw[0].hi, rw[1].hi};
    // The warp's key range: the union of its rows' ranges (consecutive tokens: no gaps).
    int lo_all = 0x7fffffff, hi_all = -1;
#pragma unroll
    for (int r = 0; r < 2; ++r)
        if (rw[r].hi >= rw[r].lo) lo_all = min(lo_all, rw[r].lo), hi_all = max(hi_all, rw[r].hi);
    lo_all = __reduce_min_sync(0xffffffffu, lo_all);
    hi_all = __reduce_max_sync(0xffffffffu, hi_all);
    if (hi_all < 0) return;

    uint32_t q[2][D / 8];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int w = 0; w < D / 8; ++w) q[r][w] = 0;
        if (rw[r].tok >= 0)
            ld16<D / 32>(static_cast<const T*>(p.q) + (int64_t(rw[r].tok) * p.n_head + rw[r].head) * D + (D / 4) * t,
                         q[r]);
    }
    const mma_ctx<T, D> c{static_cast<const T*>(p.k_cache), static_cast<const T*>(p.v_cache),
                          p.block_tables + int64_t(s) * p.max_blocks, p.block_size, p.n_head_kv, kvh, lo_all, hi_all,
                          g, t};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    mma_block<D> blk;
    int j0 = lo_all / 16 * 16;
    c.load(j0, -1, blk);
    for (; j0 <= hi_all; j0 += 16)
        prefill_step<T, D>(q, blk, j0, lo, hi, p.scale, t, m, l, o, c, j0 + 16 <= hi_all ? j0 + 16 : -1);

    // The quad's partial denominators, then the rows out (D/4 contiguous dims per lane).
    finish_rows<2>(l);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (rw[r].tok < 0) continue;
        float v[D / 4];
        row_values<D>(o, l[r], r, v);
        store_row<T, D>(static_cast<T*>(p.out) + (int64_t(rw[r].tok) * p.n_head + rw[r].head) * D + (D / 4) * t, v);
    }
}

template <class T, int D>
void prefill_mma_launch(backend& be, const attention_args& a) {
    prefill_mma_params p{};
    attn_fill_base(a, p);
    p.hp = p.group < 16 ? p.group : 16;
    p.tpw = 16 / p.hp;
    p.head_splits = (p.group + p.hp - 1) / p.hp;
    const int tokens_per_cta = kWarps * p.tpw;
    dim3 grid(unsigned((a.meta.max_seqlen_q + tokens_per_cta - 1) / tokens_per_cta), unsigned(a.meta.n_seqs),
              unsigned(p.n_head_kv * p.head_splits));
    launch_pdl(be, attention_prefill_mma_kernel<T, D>, grid, dim3(kWarps * 32), 0, p);
}

void attention_prefill_mma_launch(backend& be, const attention_args& a) {
    if (a.q.dim(0) == 0 || a.meta.max_seqlen_q == 0) return;
    using bf16 = __nv_bfloat16;
    const bool d64 = a.q.dim(2) == 64;
    if (a.act == dtype::BF16) d64 ? prefill_mma_launch<bf16, 64>(be, a) : prefill_mma_launch<bf16, 128>(be, a);
    else d64 ? prefill_mma_launch<__half, 64>(be, a) : prefill_mma_launch<__half, 128>(be, a);
}

std::string attention_prefill_mma_accepts(const attention_args& a) {
    std::string why = attn_accepts_common(a);
    if (!why.empty()) return why;
    const int64_t d = a.q.dim(2);
    if (d != 64 && d != 128) return strfmt("prefill mma kernel: head_dim %lld (needs 64 or 128)", (long long)d);
    for (auto x : {std::make_pair(&a.q, "q"), {&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"}, {&a.out, "out"}})
        if (reinterpret_cast<uintptr_t>(x.first->data) % 16 != 0)
            return strfmt("prefill mma kernel: %s is not 16-byte aligned", x.second);
    return "";
}

}  // namespace

// sm_80: mma.sync m16n8k16 with bf16/f16 operands. Priority 15: above attention_prefill_sm80 (10, the
// CUDA-core kernel that also takes f32 and any head_dim), below the decode kernels (20–40), which take
// only batches of one query row per sequence.
void register_attention_prefill_mma(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_prefill_mma_sm80",
                                      cuda_req(80, {dtype::BF16, dtype::F16}), 15, attention_prefill_mma_accepts,
                                      attention_prefill_mma_launch));
}

}  // namespace cuda
}  // namespace tetra

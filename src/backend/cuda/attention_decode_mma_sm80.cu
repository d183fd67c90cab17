// attention_decode_mma_sm80: split-KV paged decode attention on mma.sync (bf16/f16, head_dim 64 or
// 128), one warp per (key split, kv head · head split, sequence). A warp takes up to 8 query heads
// of the GQA group (16 for groups > 8) as the A rows of m16n8k16 MMAs and a block of 16 keys as
// two n8 tiles: S = Q·Kᵀ (head_dim/16 k-steps), an f32 online softmax on the accumulators (rows:
// a quad of lanes), then O += P·V with P as the A operand (the accumulator layout of S is the A
// layout of P, as in FlashAttention-2) and V as B. The dims of a lane are permuted so that every
// K, V and q load is 16 contiguous bytes and P·V needs only byte permutes (below). The splits go
// through attention_decode_v2's merge kernel (same partials).
//
// Why (docs/perf.md, session 16): at batch 1 the split + merge decode attention cost ~10 µs per
// layer, and ncu showed attention_decode_v2's 4-warp CTAs living ~12.5 k cycles while each warp
// issued ~2.3 k dependent instructions at 5.5 cycles each (one warp per scheduler): the subgroup
// shuffles, the 8-way subgroup merge in shared memory and integer address math, for 16 keys. Here a
// split of 16 keys is 48 MMAs (head_dim 128) and a few dozen other instructions per warp, and the K/V rows of
// earlier positions are loaded before the PDL wait (cuda_device.cuh's rule allows it).
//
// Numerics: Q·K in f32 from bf16/f16 inputs (exact products), f32 online softmax with expf as the
// other kernels; P·V keeps the weights' f32 precision: each p goes in as two T values, T(p) and
// T(p − T(p)) (16 significant bits together), one MMA each into the f32 accumulators. NaN scores
// propagate through the sums (a live NaN key makes its rows NaN, as the oracle); keys outside
// [lo, hi] are never loaded (zeros) and get weight 0.
//
// Layout (lane = 4g + t, g = lane / 4, t = lane % 4; D = head_dim):
//   S tile j (keys 8j .. 8j+7 of the block): B column n = key 8j + n; k-step s covers q/K dims
//     (D/4)·t + 4s + {0,1} (b0) and + {2,3} (b1): lane (g, t) loads key 8j+g's dims
//     [(D/4)t, (D/4)(t+1)) — D/2 contiguous bytes — and q rows g, g+8 at the same dims.
//   P·V tile j (j < D/8): B row k = key k of the block (the S accumulator's key order), column n =
//     dim (D/8)·n + j: lane (g, t) loads keys 2t, 2t+1, 2t+8, 2t+9 at dims [(D/8)g, (D/8)(g+1)) —
//     D/4 contiguous bytes each — and builds b0/b1 of tile j with one byte permute each.
//   O tile j: lane (g, t) holds rows g, g+8 at dims (D/4)t + j and (D/4)t + D/8 + j, i.e. the
//     D/4 contiguous dims [(D/4)t, (D/4)(t+1)) over all tiles: 16-byte stores.
#include <type_traits>

#include "backend/cuda/attention_decode_v2.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/norm_vec.cuh"

namespace tetra {
namespace cuda {

namespace {

using namespace attn_mma;

// One block of 16 keys (from j0; keys outside [lo, hi] masked) into this lane's online-softmax
// state: S = Q·Kᵀ, then softmax_pv (attention_mma.cuh) with the split's key range for every row.
template <class T, int D, int R>
__device__ __forceinline__ void mma_step(const uint32_t (&q)[R][D / 8], const mma_block<D>& blk, int j0, int lo, int hi,
                                         float scale, int t, float (&m)[R], float (&l)[R], float (&o)[D / 8][4]) {
    float sc[2][4];
    qk_block<T, D, R>(q, blk, sc);
    int los[R], his[R];
#pragma unroll
    for (int r = 0; r < R; ++r) los[r] = lo, his[r] = hi;
    softmax_pv<T, D, R>(sc, blk, j0, los, his, scale, t, m, l, o);
}

// This lane's rows out: the final rows in T (one split) or the split's partials (o, lse) for the
// merge kernel. l: the rows' full denominators.
template <class T, int D, int R>
__device__ __forceinline__ void mma_store(const dv2_params& p, int tq, int head0, int nh, int split, int g, int t,
                                          const float (&m)[R], const float (&l)[R], const float (&o)[D / 8][4]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int h = g + 8 * r;
        if (h >= nh) continue;
        float v[D / 4];
        row_values<D>(o, l[r], r, v);
        const int64_t row = int64_t(tq) * p.n_head + head0 + h;
        if (p.n_splits == 1) {
            T* dst = static_cast<T*>(p.out) + row * D + (D / 4) * t;
            store_row<T, D>(dst, v);
        } else {
            float4* dst = reinterpret_cast<float4*>(p.part_o + (row * p.n_splits + split) * D + (D / 4) * t);
#pragma unroll
            for (int i = 0; i < D / 16; ++i) dst[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
            if (t == 0)
                p.part_lse[row * p.n_splits + split] =
                    l[r] != l[r] ? l[r] : l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
        }
    }
}

// One warp's split: keys [lo, hi] of row tq (sequence s) for query heads head0 .. head0 + nh − 1
// of kv head kvh; R = 1 (rows g: ≤ 8 heads) or 2 (rows g and g + 8: ≤ 16 heads). Writes the final
// rows (one split) or the split's partials for the merge kernel.
template <class T, int D, int R>
__global__ void __launch_bounds__(32) attention_decode_mma_kernel(dv2_params p) {
    const int split = blockIdx.x, kvh = blockIdx.y / p.head_splits, hsplit = blockIdx.y % p.head_splits;
    const int s = blockIdx.z, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    // Before pdl_wait(): the step's metadata and the K/V rows of earlier positions only.
    const int tq = p.cu_seqlens_q[s];
    const bool has_row = p.cu_seqlens_q[s + 1] > tq;
    const int pos = has_row ? p.positions[tq] : 0;
    int lo = 0, hi = -1;
    if (has_row) dv2_split_range(p, pos, split, lo, hi);
    const mma_ctx<T, D> c{static_cast<const T*>(p.k_cache), static_cast<const T*>(p.v_cache),
                          p.block_tables + int64_t(s) * p.max_blocks, p.block_size, p.n_head_kv, kvh, lo, hi, g, t};
    // Blocks of 16 keys from the split's start (a multiple of 16), the first one that reaches lo.
    const int base = split * p.split_len;
    int j0 = base + max(0, lo - base) / 16 * 16;
    mma_block<D> blk;
    if (lo <= hi) {
        // the rest of the split into L2 (the loop loads block by block)
        constexpr int LINE = 128 / int(sizeof(T)), LINES = (D + LINE - 1) / LINE;
        for (int i = lane; i < (hi - j0 - 15) * LINES; i += 32) {
            const int j = j0 + 16 + i / LINES;
            const int64_t off = c.row_off(-1, j0, j) + (i % LINES) * LINE;
            asm volatile("prefetch.global.L2 [%0];" ::"l"(c.kc + off));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(c.vc + off));
        }
        c.load(j0, pos, blk);  // the row at pos is stored by the kernel before: after the wait
    }
    pdl_wait();
    pdl_trigger();
    if (!has_row) return;                   // no query row in this sequence
    if (lo > hi && p.n_splits > 1) return;  // a split past the row's keys: the merge skips it
    const int nh = min(R * 8, p.group - hsplit * R * 8), head0 = kvh * p.group + hsplit * R * 8;
    uint32_t q[R][D / 8];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int w = 0; w < D / 8; ++w) q[r][w] = 0;
        const int h = g + 8 * r;
        if (h < nh) {
            const T* src = static_cast<const T*>(p.q) + (int64_t(tq) * p.n_head + head0 + h) * D + (D / 4) * t;
            ld16<D / 32>(src, q[r]);
        }
    }
    if (lo <= hi && pos >= j0 && pos < j0 + 16) c.patch(j0, pos, blk);

    float m[R], l[R], o[D / 8][4];
#pragma unroll
    for (int r = 0; r < R; ++r) m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    for (; j0 <= hi; j0 += 16) {
        mma_step<T, D, R>(q, blk, j0, lo, hi, p.scale, t, m, l, o);
        if (j0 + 16 <= hi) c.load(j0 + 16, -1, blk);
    }
    // The quad's partial denominators, then the rows out.
    finish_rows<R>(l);
    mma_store<T, D, R>(p, tq, head0, nh, split, g, t, m, l, o);
}

// The plan: dv2_plan_splits' splits (16-key steps, ~2 CTAs per SM), one warp per split, and
// attention_decode_v2's merge kernel when there is more than one. (One CTA per group with the
// splits merged in shared memory was measured slower and was removed: docs/perf.md, session 16.)
template <class T, int D, int R>
void mma_launch(backend& be, const attention_args& a, dv2_params p, int64_t n_tokens) {
    p.head_splits = (p.group + 8 * R - 1) / (8 * R);
    dv2_plan_splits(be, a, p, n_tokens, 16);
    dim3 grid(unsigned(p.n_splits), unsigned(p.n_head_kv * p.head_splits), unsigned(a.meta.n_seqs));
    launch_pdl(be, attention_decode_mma_kernel<T, D, R>, grid, dim3(32), 0, p);
    dv2_launch_merge<T>(be, p, n_tokens);
}

template <class T>
void mma_dispatch(backend& be, const attention_args& a, int64_t n_tokens) {
    dv2_params p{};
    attn_fill_base(a, p);
    const bool r2 = p.group > 8;
    if (p.head_dim == 64) r2 ? mma_launch<T, 64, 2>(be, a, p, n_tokens) : mma_launch<T, 64, 1>(be, a, p, n_tokens);
    else r2 ? mma_launch<T, 128, 2>(be, a, p, n_tokens) : mma_launch<T, 128, 1>(be, a, p, n_tokens);
}

void attention_decode_mma_launch(backend& be, const attention_args& a) {
    const int64_t n_tokens = a.q.dim(0);
    if (n_tokens == 0) return;
    if (a.act == dtype::BF16) mma_dispatch<__nv_bfloat16>(be, a, n_tokens);
    else mma_dispatch<__half>(be, a, n_tokens);
}

std::string attention_decode_mma_accepts(const attention_args& a) {
    std::string why = dv2_accepts_common(a);
    if (!why.empty()) return why;
    const int64_t d = a.q.dim(2);
    if (d != 64 && d != 128) return strfmt("decode mma kernel: head_dim %lld (needs 64 or 128)", (long long)d);
    if (reinterpret_cast<uintptr_t>(a.out.data) % 16 != 0) return "decode mma kernel: out is not 16-byte aligned";
    return "";
}

}  // namespace

// sm_80: mma.sync m16n8k16 with bf16/f16 operands. Priority 35: above attention_decode_v2_sm80
// (30), below the cluster kernel (40, decode batches of ≥ 64 groups on sm_90).
void register_attention_decode_mma(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_decode_mma_sm80", cuda_req(80, {dtype::BF16, dtype::F16}),
                                      35, attention_decode_mma_accepts, attention_decode_mma_launch));
}

}  // namespace cuda
}  // namespace tetra

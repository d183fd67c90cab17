// decode_layers_persistent_sm90: every decoder layer of a batch-1 decode step in one persistent
// kernel (backend::decode_layers; ops.h decode_layers_args). One CTA per SM, launched cooperatively
// (all resident). Why: op by op, each of a layer's ~9 dependent kernels costs 1–4 µs of latency
// beyond its bytes, and a matmul can prefetch only its own weight share, only once its kernel has
// launched (docs/perf.md, sessions 16–24). Here the weights never wait on activations:
//   - the producer warp streams the CTA's whole weight schedule for the step — every layer's qkv,
//     o, gate/up and down units (a 16-row tile × one 512-k group: 4 KB of codes + 512 B of scales,
//     w4a16_layout.h) — by bulk copies into a ring of shared-memory slots (mbarrier per slot, full
//     and empty), running as far ahead as the ring allows, across layer boundaries;
//   - the 16 consumer warps follow the layer's dependency chain: the norm (each CTA computes the whole
//     normed row itself from the residual and the last projection: no extra grid barrier), its units
//     of the matmul (the sweep kernel's arithmetic: chunk_mma_n8 per chunk, two accumulators by chunk
//     parity, f32 group sums in shared memory added in group order, so a row's bits depend only on k),
//     the attention items between qkv and o (rope and q/k norm as qkv_rope_store, the new k/v from
//     shared memory, split-KV with a last-split merge), then o, the second norm, gate/up + silu, down.
// Dependencies between phases are counters in global memory (release: fence + atomic add by one
// thread after the CTA's writes; acquire: one thread spins, then a named barrier; data produced in
// the launch is read with .cg loads). Each phase waits only on the previous phase, so no CTA is ever
// more than one phase ahead of another, and the buffers each phase writes are free by then (the
// residual ping-pongs between `residual` and `res_b`). The last CTA to leave zeroes the counters.
// Deterministic: fixed schedule, fixed summation orders, no floating-point atomics.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/decode_layers_device.cuh"
#include "backend/cuda/matmul_launch.h"

namespace tetra {
namespace cuda {

namespace {

using namespace dl;
using bf16 = __nv_bfloat16;

// The device code below needs sm_90 (bulk copies, mbarrier tx counts); other images get an empty
// kernel that the registry never selects (FEAT_TMA).
#if TETRA_DL_OK
// ---- consumers: the norms --------------------------------------------------------------------------
__device__ __forceinline__ float consumers_sum(float v, float* part) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    consumers_sync();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < CONSUMER_WARPS; ++w) t += part[w];
    consumers_sync();
    return t;
}

// xs = rms_norm(res_in (+ addend, rounded as add_rms_norm stores it)) · w as bf16, zeros to kg·512;
// this CTA's slice of the new residual → res_out (nullptr: not stored).
__device__ void norm_to_x(const params& p, const bf16* res_in, const bf16* addend, const void* w, bf16* res_out,
                          uint4* xs, int kg, float* part) {
    const int vecs = p.n_embd / 8, tid = threadIdx.x;
    constexpr int MAX_V = 4;  // vectors per thread held in registers (n_embd ≤ 8192)
    uint4 rq[MAX_V], aq[MAX_V], wq[MAX_V];
    const bool wbf = p.norm_t == int(dtype::BF16);
#pragma unroll
    for (int j = 0; j < MAX_V; ++j) {  // every load of the row at once: one round trip
        const int v = tid + j * CONSUMERS;
        if (v < vecs) {
            rq[j] = __ldcg(reinterpret_cast<const uint4*>(res_in) + v);
            if (addend) aq[j] = __ldcg(reinterpret_cast<const uint4*>(addend) + v);
            if (wbf) wq[j] = __ldg(reinterpret_cast<const uint4*>(w) + v);
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < MAX_V; ++j) {
        const int v = tid + j * CONSUMERS;
        if (v >= vecs) continue;
        float r[8];
        unpack8<bf16>(rq[j], r);
        if (addend) {
            float a8[8];
            unpack8<bf16>(aq[j], a8);
#pragma unroll
            for (int i = 0; i < 8; ++i) r[i] = r[i] + a8[i];
            rq[j] = pack8<bf16>(r);
            unpack8<bf16>(rq[j], r);
        }
        ss += sum_sq8(r);
    }
    const float rs = rms_scale(consumers_sum(ss, part), p.n_embd, p.eps);
    const int per = (vecs + int(gridDim.x) - 1) / int(gridDim.x), v0 = int(blockIdx.x) * per;
#pragma unroll
    for (int j = 0; j < MAX_V; ++j) {
        const int v = tid + j * CONSUMERS;
        if (v >= vecs) continue;
        if (res_out && v >= v0 && v < v0 + per) reinterpret_cast<uint4*>(res_out)[v] = rq[j];
        float r[8], w8[8], o8[8];
        unpack8<bf16>(rq[j], r);
        if (wbf) unpack8<bf16>(wq[j], w8);
        else
#pragma unroll
            for (int i = 0; i < 8; ++i) w8[i] = load_any(w, dtype(p.norm_t), int64_t(v) * 8 + i);
        scale8(r, w8, rs, o8);
        xs[v] = pack8<bf16>(o8);
    }
    for (int v = vecs + tid; v < kg * (GROUP_K / 8); v += CONSUMERS) xs[v] = make_uint4(0, 0, 0, 0);
    consumers_sync();
}

// xs = src[0 .. n) (written in this launch: .cg), zeros to kg·512.
__device__ void stage_x(const bf16* src, int n, uint4* xs, int kg) {
    for (int v = threadIdx.x; v < kg * (GROUP_K / 8); v += CONSUMERS)
        xs[v] = v < n / 8 ? __ldcg(reinterpret_cast<const uint4*>(src) + v) : make_uint4(0, 0, 0, 0);
    consumers_sync();
}

// ---- consumers: a phase's matmul units --------------------------------------------------------------
struct ring_view {
    const uint4* slots;
    uint32_t full, empty;  // shared addresses of the barrier arrays
    int n;
};

__device__ void matmul_units(const params& p, int il, int ph, const ring_view& rv, uint32_t& base, const uint4* xs,
                             float* red) {
    const share s = share_of(p, il, ph);
    const int units = s.count * s.per_tile, kg = p.kg[ph];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int u = warp; u < units; u += CONSUMER_WARPS) {
        int tile, grp, lt;
        unit_of(p, ph, s, u, tile, grp, lt);
        const uint32_t i = base + uint32_t(u), slot = i % uint32_t(rv.n);
        mbar_wait(rv.full + 8 * slot, (i / uint32_t(rv.n)) & 1u);
        const uint4* q = rv.slots + size_t(slot) * UNIT_U4 + lane;
        const uint4 sc = q[GROUP_CHUNKS * 32];
        const uint4* xr = xs + grp * (GROUP_K / 8) + 2 * t;
        float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int c = 0; c < GROUP_CHUNKS; c += 2) {
            const uint32_t two = word_of(sc, c >> 1);
            uint32_t s0, s1;
            scales_to_bf16x2(two, s0, s1);
            chunk_mma_n8(q[32 * c], s0, s1, xr[c * 8], xr[c * 8 + 1], acc[0]);
            scales_to_bf16x2(two >> 16, s0, s1);
            chunk_mma_n8(q[32 * (c + 1)], s0, s1, xr[(c + 1) * 8], xr[(c + 1) * 8 + 1], acc[1]);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(rv.empty + 8 * slot);
        if (t == 0) {
            float* r = red + (lt * kg + grp) * 16;
            r[g] = acc[0][0] + acc[1][0];
            r[g + 8] = acc[0][2] + acc[1][2];
        }
    }
    base += uint32_t(units);
    consumers_sync();
    // the rows: group sums in group order (the sweep kernel's tile_sum), · alpha, rounded to bf16
    const float alpha = p.layers[il].w[ph].alpha;
    bf16* out = ph == QKV ? p.qkv : ph == O ? p.proj_o : ph == GU ? p.act : p.proj;
    const int n_out = ph == QKV ? p.n_qkv : ph == GU ? p.n_ff : p.n_embd;
    for (int v = threadIdx.x; v < s.count * 16; v += CONSUMERS) {
        const int q = v >> 4, r = v & 15, n = (s.j0 + q * int(gridDim.x)) * 16 + r;
        if (ph == GU) {
            float sg = 0.0f, su = 0.0f;
            for (int grp = 0; grp < kg; ++grp) sg += red[((2 * q) * kg + grp) * 16 + r];
            for (int grp = 0; grp < kg; ++grp) su += red[((2 * q + 1) * kg + grp) * 16 + r];
            out[n] = silu_times(__float2bfloat16_rn(sg * alpha), __float2bfloat16_rn(su * alpha));
        } else if (n < n_out) {
            float sum = 0.0f;
            for (int grp = 0; grp < kg; ++grp) sum += red[(q * kg + grp) * 16 + r];
            out[n] = __float2bfloat16_rn(sum * alpha);
        }
    }
}

// ---- consumers: the attention items of a layer ---------------------------------------------------------
// Split-KV: S splits of P positions per kv head (P ≥ 64, at most MAX_P, S·n_kv about the grid).
__device__ __forceinline__ void split_plan(const params& p, int len, int& P, int& S) {
    const int cap = max(1, int(gridDim.x) / p.n_kv);
    P = max(64, (len + cap - 1) / cap);
    P = min(MAX_P, (P + 31) / 32 * 32);
    S = (len + P - 1) / P;
}
__device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The cache row of position p0 + j of an item: from `rows` (the CTA's first item, looked up once per
// launch) or the block table; -1 for the current position.
__device__ __forceinline__ int64_t row_at(const params& p, const int* rows, int p0, int j, int pos) {
    if (rows) return rows[j];
    const int pp = p0 + j;
    return pp == pos ? -1 : int64_t(p.block_table[pp / p.block_size]) * p.block_size + pp % p.block_size;
}

// This lane's VD values of the rows of positions p0 + j0 + 16b (b < VB, those < np: warp j0's share,
// as the warps take every 16th position) of kv head hk of a cache, all requested before any is used;
// the current position's from `cur` (shared memory).
template <int HD, int VD, int VB>
__device__ __forceinline__ void load_rows(const params& p, const bf16* cache, const int* rows, int p0, int j0, int np,
                                          int pos, int hk, const float* cur, float (&out)[VB][VD]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int b = 0; b < VB; ++b) {
        const int j = j0 + b * CONSUMER_WARPS;
        if (j >= np) break;
        const int64_t row = row_at(p, rows, p0, j, pos);
        if (row < 0) {
#pragma unroll
            for (int i = 0; i < VD; ++i) out[b][i] = cur[lane * VD + i];
        } else {
            const bf16* r = cache + (row * p.n_kv + hk) * HD + lane * VD;
            if constexpr (VD == 4) {
                const uint2 u = __ldcg(reinterpret_cast<const uint2*>(r));
                out[b][0] = __uint_as_float(u.x << 16), out[b][1] = __uint_as_float(u.x & 0xFFFF0000u);
                out[b][2] = __uint_as_float(u.y << 16), out[b][3] = __uint_as_float(u.y & 0xFFFF0000u);
            } else {
                const uint32_t u = __ldcg(reinterpret_cast<const unsigned int*>(r));
                out[b][0] = __uint_as_float(u << 16), out[b][1] = __uint_as_float(u & 0xFFFF0000u);
            }
        }
    }
}

// qv [G + 2][HD] = the G q heads of kv head hk, its k and its v, f32: q and k through the q/k norm
// (when given) and rope, each rounded to bf16 as qkv_rope_store stores them.
template <int HD>
__device__ void load_heads(const params& p, const layer& L, int hk, const float* cs, float* qv) {
    const int G = p.n_head / p.n_kv, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    for (int e = tid; e < (G + 2) * HD; e += CONSUMERS) {
        const int hh = e / HD, d = e % HD;
        const int src = hh < G ? hk * G + hh : hh == G ? p.n_head + hk : p.n_head + p.n_kv + hk;
        qv[e] = __bfloat162float(__ldcg(p.qkv + size_t(src) * HD + d));
    }
    consumers_sync();
    for (int hh = warp; hh < G + 1; hh += CONSUMER_WARPS) {
        float* x = qv + hh * HD;
        const void* nw = hh < G ? L.q_norm : L.k_norm;
        if (nw) {
            float ss = 0.0f;
            for (int d = lane; d < HD; d += 32) ss += x[d] * x[d];
            const float rs = rms_scale(warp_sum(ss), HD, p.eps);
            __syncwarp();
            for (int d = lane; d < HD; d += 32) x[d] = bf16_round(load_any(nw, dtype(p.norm_t), d) * (x[d] * rs));
            __syncwarp();
        }
        for (int d = lane; d < HD / 2; d += 32) {
            const float x1 = x[d], x2 = x[d + HD / 2], c = cs[d], sn = cs[HD / 2 + d];
            x[d] = bf16_round(rope_first(x1, x2, c, sn));
            x[d + HD / 2] = bf16_round(rope_second(x1, x2, c, sn));
        }
        __syncwarp();
    }
    consumers_sync();
}

// One item (kv head hk, split s): its G q heads and the new k (q/k norm, rope, rounded as
// qkv_rope_store stores them) and v, the scores of positions [p0, p1) (the current position's k/v
// from shared memory), softmax, P·V; the output (S = 1) or the split's partial (o, m, l).
template <int HD>
__device__ void attention_item(const params& p, const layer& L, int hk, int s, int S, int P, int len, int pos,
                               const float* cs, float* sm, const int* rows) {
    const int G = p.n_head / p.n_kv, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int p0 = s * P, p1 = min(len, p0 + P), np = p1 - p0;
    float* qv = sm;                          // [G + 2][HD]: q heads, k, v
    float* sc = qv + (G + 2) * HD;           // [G][MAX_P]
    float* ored = sc + G * MAX_P;            // [CONSUMER_WARPS][G][HD]
    float* ml = ored + CONSUMER_WARPS * G * HD;  // [2][G]
    load_heads<HD>(p, L, hk, cs, qv);
    const int64_t slot = p.slot_mapping[0];
    if (pos >= p0 && pos < p1 && slot >= 0 && slot < p.n_slots)
        for (int d = tid; d < HD; d += CONSUMERS) {
            L.k_cache[(slot * p.n_kv + hk) * HD + d] = __float2bfloat16_rn(qv[G * HD + d]);
            L.v_cache[(slot * p.n_kv + hk) * HD + d] = __float2bfloat16_rn(qv[(G + 1) * HD + d]);
        }
    // scores: warp w takes positions w, w + 16, …, lane the dims [VD·lane, VD·lane + VD) (a compact
    // loop: this code runs once per layer, its instructions are not in the cache)
    constexpr int VD = HD / 32, VB = 8;  // VB: positions per warp whose loads are in flight together
    float qr[MAX_G][VD];
#pragma unroll
    for (int hh = 0; hh < MAX_G; ++hh)
#pragma unroll
        for (int i = 0; i < VD; ++i) qr[hh][i] = hh < G ? qv[hh * HD + lane * VD + i] : 0.0f;
#pragma unroll 1
    for (int j0 = warp; j0 < np; j0 += VB * CONSUMER_WARPS) {
        float k[VB][VD];
        load_rows<HD, VD, VB>(p, L.k_cache, rows, p0, j0, np, pos, hk, qv + G * HD, k);
#pragma unroll 1
        for (int b = 0; b < VB; ++b) {
            const int j = j0 + b * CONSUMER_WARPS;
            if (j >= np) break;
#pragma unroll 1
            for (int hh = 0; hh < G; ++hh) {
                float d = 0.0f;
#pragma unroll
                for (int i = 0; i < VD; ++i) d = fmaf(qr[hh][i], k[b][i], d);
                d = warp_sum(d);
                if (lane == 0) sc[hh * MAX_P + j] = d * p.scale;
            }
        }
    }
    consumers_sync();
    if (warp < G) {  // softmax of head `warp` over the split
        float m = -INFINITY;
        for (int j = lane; j < np; j += 32) m = fmaxf(m, sc[warp * MAX_P + j]);
        m = warp_max(m);
        float l = 0.0f;
        for (int j = lane; j < np; j += 32) {
            const float e = expf(sc[warp * MAX_P + j] - m);
            sc[warp * MAX_P + j] = e;
            l += e;
        }
        l = warp_sum(l);
        if (lane == 0) ml[warp] = m, ml[G + warp] = l;
    }
    consumers_sync();
    // P·V: warp w takes positions w, w + 16, …; lane the dims [VD·lane, VD·lane + VD)
    float o[MAX_G][VD];
#pragma unroll
    for (int hh = 0; hh < MAX_G; ++hh)
#pragma unroll
        for (int i = 0; i < VD; ++i) o[hh][i] = 0.0f;
#pragma unroll 1
    for (int j0 = warp; j0 < np; j0 += VB * CONSUMER_WARPS) {
        float v[VB][VD];
        load_rows<HD, VD, VB>(p, L.v_cache, rows, p0, j0, np, pos, hk, qv + (G + 1) * HD, v);
#pragma unroll 1
        for (int b = 0; b < VB; ++b) {
            const int j = j0 + b * CONSUMER_WARPS;
            if (j >= np) break;
#pragma unroll
            for (int hh = 0; hh < MAX_G; ++hh) {
                if (hh >= G) break;
                const float pj = sc[hh * MAX_P + j];
#pragma unroll
                for (int i = 0; i < VD; ++i) o[hh][i] = fmaf(pj, v[b][i], o[hh][i]);
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < MAX_G; ++hh) {
        if (hh >= G) break;
#pragma unroll
        for (int i = 0; i < VD; ++i) ored[(warp * G + hh) * HD + lane * VD + i] = o[hh][i];
    }
    consumers_sync();
    for (int e = tid; e < G * HD; e += CONSUMERS) {
        const int hh = e / HD, d = e % HD;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < CONSUMER_WARPS; ++w) sum += ored[(w * G + hh) * HD + d];
        const int h = hk * G + hh;
        if (S == 1) {
            p.attn[size_t(h) * HD + d] = __float2bfloat16_rn(sum / ml[G + hh]);
        } else {
            float* part = p.partial + (size_t(h) * p.max_splits + s) * (HD + 2);
            part[d] = sum;
            if (d == 0) part[HD] = ml[hh], part[HD + 1] = ml[G + hh];
        }
    }
}

// The merge of kv head hk's S splits (the last split to finish runs it): the attention rows of its G heads.
template <int HD>
__device__ void attention_merge(const params& p, int hk, int S) {
    const int G = p.n_head / p.n_kv;
    for (int e = threadIdx.x; e < G * HD; e += CONSUMERS) {
        const int h = hk * G + e / HD, d = e % HD;
        const float* part = p.partial + size_t(h) * p.max_splits * (HD + 2);
        float m = -INFINITY;
        for (int s = 0; s < S; ++s) m = fmaxf(m, __ldcg(part + s * (HD + 2) + HD));
        float o = 0.0f, l = 0.0f;
        for (int s = 0; s < S; ++s) {
            const float f = expf(__ldcg(part + s * (HD + 2) + HD) - m);
            o = fmaf(__ldcg(part + s * (HD + 2) + d), f, o);
            l = fmaf(__ldcg(part + s * (HD + 2) + HD + 1), f, l);
        }
        p.attn[size_t(h) * HD + d] = __float2bfloat16_rn(o / l);
    }
}

struct step_plan {
    int pos, len, P, S;
};

template <int HD>
__device__ void attention_layer(const params& p, int il, const step_plan& sp, const float* cs, float* sm, int* flag,
                                const int* rows) {
    const layer& L = p.layers[il];
    const int S = sp.S;
    for (int item = blockIdx.x; item < p.n_kv * S; item += gridDim.x) {
        const int hk = item / S, s = item % S;
        attention_item<HD>(p, L, hk, s, S, sp.P, sp.len, sp.pos, cs, sm, item == int(blockIdx.x) ? rows : nullptr);
        if (S == 1) {
            arrive(p, C_ATTN);
            continue;
        }
        consumers_sync();
        if (threadIdx.x == 0) {
            __threadfence();
            *flag = atomicAdd(p.counters + C_TICKET + hk, 1u) == unsigned(S - 1);
        }
        consumers_sync();
        if (*flag) {
            __threadfence();
            attention_merge<HD>(p, hk, S);
            if (threadIdx.x == 0) p.counters[C_TICKET + hk] = 0;  // the next layer's tickets start at zero
            arrive(p, C_ATTN);
        }
        consumers_sync();
    }
}

#endif  // TETRA_DL_OK

// ---- the kernel -------------------------------------------------------------------------------------------
template <int HD>
__global__ void __launch_bounds__(THREADS, 1) decode_layers_kernel(const __grid_constant__ params p) {
#if TETRA_DL_OK
    extern __shared__ __align__(16) uint4 smem[];
    __shared__ float part[CONSUMER_WARPS];
    __shared__ int flag;
    const int R = p.ring;
    const uint32_t bars = smem_u32(smem);  // full[R], empty[R]
    const int bar_u4 = (2 * R * 8 + 15) / 16;
    uint4* ring = smem + bar_u4;
    uint4* xs = ring + size_t(R) * UNIT_U4;
    float* red = reinterpret_cast<float*>(xs + p.x_u4);
    float* cs = red + p.red_floats;  // cos, sin of the step's position: [HD]
    if (threadIdx.x == 0) {
        for (int i = 0; i < R; ++i) mbar_init(bars + 8 * i, 1), mbar_init(bars + 8 * (R + i), 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    rope_table(cs, float(p.positions[0]), p.inv_freq, HD / 2);
    // The step's split plan and the cache rows of this CTA's first attention item: the same in every
    // layer, so the block-table lookups leave the layers' critical path.
    __shared__ int rows[MAX_P];
    step_plan sp;
    sp.pos = p.positions[0], sp.len = p.seq_lens[0];
    if (sp.pos < 0 || sp.len != sp.pos + 1) __trap();  // not a decode token at the end of its sequence
    split_plan(p, sp.len, sp.P, sp.S);
    if (int(blockIdx.x) < p.n_kv * sp.S) {
        const int p0 = (int(blockIdx.x) % sp.S) * sp.P, np = min(sp.len, p0 + sp.P) - p0;
        for (int j = threadIdx.x; j < np; j += blockDim.x) rows[j] = int(row_at(p, nullptr, p0, j, sp.pos));
    }
    __syncthreads();

    if (threadIdx.x >= CONSUMERS) {  // the producer warp: each lane issues every 32nd unit of the step
        // (one thread alone is latency-bound at ~2 units per µs: half the bandwidth an SM needs). A lane
        // waits for the slot's previous unit to be consumed; with at most R lanes per batch that unit is
        // in an earlier batch, already issued, so the parity wait cannot pass on an older phase.
        const int lane = threadIdx.x & 31, lanes = min(32, R);
        const uint64_t pol = weight_policy();  // L2 evict_first
        uint32_t ibase = 0;
        for (int il = 0; il < p.n_layer; ++il)
            for (int ph = 0; ph < N_PHASES; ++ph) {
                const weight w = p.layers[il].w[ph];
                const share s = share_of(p, il, ph);
                const int units = s.count * s.per_tile;
                for (int u0 = 0; u0 < units; u0 += lanes) {
                    const int u = u0 + lane;
                    if (lane < lanes && u < units) {
                        int tile, grp, lt;
                        unit_of(p, ph, s, u, tile, grp, lt);
                        const uint32_t i = ibase + uint32_t(u), slot = i % uint32_t(R);
                        if (i >= uint32_t(R)) mbar_wait(bars + 8 * (R + slot), ((i / uint32_t(R)) - 1u) & 1u);
                        const uint32_t full = bars + 8 * slot, dst = smem_u32(ring + size_t(slot) * UNIT_U4);
                        mbar_expect_tx(full, UNIT_BYTES);
                        bulk_copy(dst, w.codes + chunk_index(tile, int64_t(grp) * GROUP_CHUNKS, w.n_tiles) * 32,
                                  GROUP_CHUNKS * 32 * 16, full, pol);
                        bulk_copy(dst + GROUP_CHUNKS * 32 * 16, w.scales + (size_t(tile) * w.k_groups + grp) * 32,
                                  32 * 16, full, pol);
                    }
                    __syncwarp();
                }
                ibase += uint32_t(units);
            }
        return;
    }

    const ring_view rv{ring, bars, bars + 8 * uint32_t(R), R};
    const unsigned grid = gridDim.x;
    uint32_t base = 0;
    for (int il = 0; il < p.n_layer; ++il) {
        const layer& L = p.layers[il];
        if (il > 0) wait_count(p, C_DOWN, unsigned(il) * grid);
        const bool plain = il == 0 && p.first_plain;
        norm_to_x(p, p.residual, plain ? nullptr : p.proj, L.attn_norm, p.res_b, xs, p.kg[QKV], part);
        matmul_units(p, il, QKV, rv, base, xs, red);
        arrive(p, C_QKV);
        wait_count(p, C_QKV, unsigned(il + 1) * grid);
        attention_layer<HD>(p, il, sp, cs, reinterpret_cast<float*>(xs), &flag, rows);
        wait_count(p, C_ATTN, unsigned(il + 1) * unsigned(p.n_kv));
        stage_x(p.attn, p.n_head * HD, xs, p.kg[O]);
        matmul_units(p, il, O, rv, base, xs, red);
        arrive(p, C_O);
        wait_count(p, C_O, unsigned(il + 1) * grid);
        norm_to_x(p, p.res_b, p.proj_o, L.ffn_norm, p.residual, xs, p.kg[GU], part);
        matmul_units(p, il, GU, rv, base, xs, red);
        arrive(p, C_GU);
        wait_count(p, C_GU, unsigned(il + 1) * grid);
        stage_x(p.act, p.n_ff, xs, p.kg[DOWN]);
        matmul_units(p, il, DOWN, rv, base, xs, red);
        arrive(p, C_DOWN);
    }
    consumers_sync();
    if (threadIdx.x == 0) {  // the last CTA out leaves every counter zero for the next launch
        __threadfence();
        const int n_counters = C_TICKET + p.n_kv + 1;
        if (atomicAdd(p.counters + n_counters - 1, 1u) == grid - 1)
            for (int c = 0; c < n_counters; ++c) p.counters[c] = 0;
    }
#endif
}

// ---- host ---------------------------------------------------------------------------------------------------
constexpr int64_t SMEM_RESERVE = 2048;  // static __shared__ (part, flag, rows) and slack

int kg_of(int64_t k) { return int((k + GROUP_K - 1) / GROUP_K); }

// The launch geometry of a call: shared-memory regions and the ring's slots.
struct plan {
    int grid = 0, ring = 0, x_u4 = 0, red_floats = 0, max_splits = 0;
    int tiles[N_PHASES] = {}, kg[N_PHASES] = {};
    int64_t smem = 0;
};

plan plan_of(const decode_layers_args& a, const device_info& dev) {
    plan pl;
    pl.grid = dev.sm_count;
    const int64_t hd = a.head_dim, G = a.n_head / a.n_head_kv;
    pl.tiles[QKV] = int(((a.n_head + 2 * a.n_head_kv) * hd + 15) / 16), pl.kg[QKV] = kg_of(a.n_embd);
    pl.tiles[O] = int((a.n_embd + 15) / 16), pl.kg[O] = kg_of(a.n_head * hd);
    pl.tiles[GU] = int(a.n_ff / 16), pl.kg[GU] = kg_of(a.n_embd);
    pl.tiles[DOWN] = int((a.n_embd + 15) / 16), pl.kg[DOWN] = kg_of(a.n_ff);
    int64_t x_u4 = 0, red = 0;
    for (int ph = 0; ph < N_PHASES; ++ph) {
        x_u4 = std::max<int64_t>(x_u4, int64_t(pl.kg[ph]) * (GROUP_K / 8));
        const int64_t per_cta = (pl.tiles[ph] + pl.grid - 1) / std::max(1, pl.grid);
        red = std::max<int64_t>(red, per_cta * (ph == GU ? 2 : 1) * pl.kg[ph] * 16);
    }
    const int64_t attn_floats = (G + 2) * hd + G * MAX_P + CONSUMER_WARPS * G * hd + 2 * G;
    pl.x_u4 = int(std::max<int64_t>(x_u4, (attn_floats + 3) / 4));
    pl.red_floats = int((red + 3) / 4 * 4);
    const int64_t fixed = int64_t(pl.x_u4) * 16 + int64_t(pl.red_floats) * 4 + hd * 4;
    const int64_t avail = dev.smem_per_block - SMEM_RESERVE - fixed;
    // A multiple of the consumer warps: consumer warp w takes a phase's units w, w + 16, …, so the unit
    // a slot held before (R earlier) was this warp's own or a finished phase's, and the full barrier's
    // parity wait cannot pass on the phase before it.
    pl.ring = avail > 0 ? int(avail / (UNIT_BYTES + 16)) / CONSUMER_WARPS * CONSUMER_WARPS : 0;
    pl.smem = (2 * int64_t(pl.ring) * 8 + 15) / 16 * 16 + int64_t(pl.ring) * UNIT_BYTES + fixed;
    // splits per kv head: at most grid / n_kv while P < MAX_P, then as many as the longest context needs
    const int64_t max_ctx = a.meta.block_tables.rank() == 2 ? a.meta.block_tables.dim(1) * a.meta.block_size : 0;
    pl.max_splits = int(std::max<int64_t>(std::max<int64_t>(1, pl.grid / a.n_head_kv), (max_ctx + MAX_P - 1) / MAX_P));
    return pl;
}

bool aligned16(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; }

std::string decode_layers_accepts(const decode_layers_args& a) {
    if (a.act != dtype::BF16) return "needs bf16 activations";
    if (!a.all_w4a16) return "not every linear runs W4A16 (the kernel is W4A16 only)";
    if (a.n_head_kv > MAX_KV) return strfmt("%lld kv heads (at most %d)", (long long)a.n_head_kv, MAX_KV);
    if (a.head_dim != 64 && a.head_dim != 128) return strfmt("head_dim %lld (64 or 128)", (long long)a.head_dim);
    if (a.n_head / a.n_head_kv > MAX_G)
        return strfmt("%lld q heads per kv head (at most %d)", (long long)(a.n_head / a.n_head_kv), MAX_G);
    if (2 * a.inv_freq.numel() != a.head_dim) return "partial rotary";
    if (a.n_embd % 16 != 0 || a.n_ff % 16 != 0) return "n_embd and n_ff must be multiples of 16";
    if (a.n_embd > 8192) return strfmt("n_embd %lld (at most 8192)", (long long)a.n_embd);
    if (int64_t(a.layers.size()) > MAX_LAYERS) return strfmt("%zu layers (at most %d)", a.layers.size(), MAX_LAYERS);
    if (a.meta.n_seqs != 1 || a.q.dim(0) != 1) return "not one decode token of one sequence";
    if (a.meta.block_tables.rank() != 2 || a.meta.block_size < 1) return "no block table";
    if (a.align < 16) return "tensors not 16-byte aligned";
    int dev = 0, sms = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    device_info di;
    di.sm_count = sms, di.smem_per_block = optin;
    const plan pl = plan_of(a, di);
    if (pl.ring < CONSUMER_WARPS)
        return strfmt("%d weight slots fit beside the activations in %d B of shared memory (at least %d)", pl.ring,
                      optin, CONSUMER_WARPS);
    for (const decode_layer_ref& L : a.layers) {
        for (const linear_weight* w : {L.qkv, L.o, L.gate_up, L.down}) {
            const std::string why = w4a16_sm80_weight_why_not(*w);
            if (!why.empty()) return why;
        }
        if (L.k_cache.type != dtype::BF16) return "bf16 KV caches only";
        if (!aligned16(L.k_cache.data) || !aligned16(L.v_cache.data)) return "KV caches not 16-byte aligned";
        for (const tensor* t : {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm}) {
            if (!t->empty() && t->type != a.layers[0].attn_norm.type) return "the norm weights differ in dtype";
            if (!t->empty() && !aligned16(t->data)) return "norm weights not 16-byte aligned";
        }
        if (L.q_norm.empty() != a.layers[0].q_norm.empty() || L.k_norm.empty() != a.layers[0].k_norm.empty())
            return "q/k norms on some layers only";
    }
    return "";
}

template <int HD> void launch_hd(backend& be, const decode_layers_args& a) {
    const device_info& dev = be.device();
    const plan pl = plan_of(a, dev);
    auto kern = decode_layers_kernel<HD>;
    static std::mutex mu;
    {
        std::lock_guard<std::mutex> lock(mu);
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(pl.smem)));
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, THREADS, size_t(pl.smem)));
        TETRA_CHECK(per_sm >= 1, "decode_layers_persistent_sm90: no CTA of %lld B fits an SM", (long long)pl.smem);
    }
    static_assert(sizeof(params) <= 32000, "the layer table must fit the kernel parameters");
    auto* p = new params();  // ~23 KB: not on the stack
    std::unique_ptr<params> own(p);
    const int64_t hd = a.head_dim;
    p->n_layer = int(a.layers.size()), p->n_embd = int(a.n_embd), p->n_head = int(a.n_head), p->n_kv = int(a.n_head_kv);
    p->n_ff = int(a.n_ff), p->n_qkv = int((a.n_head + 2 * a.n_head_kv) * hd);
    p->norm_t = int(a.layers[0].attn_norm.type), p->eps = a.eps, p->scale = a.scale;
    p->positions = a.meta.positions.ptr<const int32_t>(), p->seq_lens = a.meta.seq_lens_kv.ptr<const int32_t>();
    p->block_table = a.meta.block_tables.ptr<const int32_t>();
    p->slot_mapping = a.meta.slot_mapping.ptr<const int32_t>();
    p->block_size = a.meta.block_size;
    p->n_slots = a.layers[0].k_cache.dim(0) * a.layers[0].k_cache.dim(1);
    p->inv_freq = a.inv_freq.ptr<const float>();
    p->residual = a.residual.ptr<bf16>(), p->proj = a.proj.ptr<bf16>();
    for (int ph = 0; ph < N_PHASES; ++ph) p->tiles[ph] = pl.tiles[ph], p->kg[ph] = pl.kg[ph];
    p->tiles_layer = pl.tiles[QKV] + pl.tiles[O] + pl.tiles[GU] + pl.tiles[DOWN];
    p->max_splits = pl.max_splits, p->ring = pl.ring, p->x_u4 = pl.x_u4, p->red_floats = pl.red_floats;
    p->first_plain = a.first_plain ? 1 : 0;
    // scratch: res_b, qkv, attn, proj_o, act (bf16, 256-B aligned pieces), then the partials
    const size_t sizes[5] = {size_t(a.n_embd), size_t(p->n_qkv), size_t(a.n_head * hd), size_t(a.n_embd),
                             size_t(a.n_ff)};
    size_t off[6] = {0};
    for (int i = 0; i < 5; ++i) off[i + 1] = off[i] + (sizes[i] * 2 + 255) / 256 * 256;
    const size_t part_bytes = size_t(a.n_head) * pl.max_splits * (hd + 2) * 4;
    char* base = static_cast<char*>(scratch(be, off[5] + part_bytes));
    p->res_b = reinterpret_cast<bf16*>(base + off[0]), p->qkv = reinterpret_cast<bf16*>(base + off[1]);
    p->attn = reinterpret_cast<bf16*>(base + off[2]), p->proj_o = reinterpret_cast<bf16*>(base + off[3]);
    p->act = reinterpret_cast<bf16*>(base + off[4]), p->partial = reinterpret_cast<float*>(base + off[5]);
    cudaStream_t s = stream_of(be);
    p->counters = static_cast<unsigned*>(zeroed_buffer(s, size_t(C_TICKET + MAX_KV + 1) * sizeof(unsigned), 1));
    for (size_t il = 0; il < a.layers.size(); ++il) {
        const decode_layer_ref& L = a.layers[il];
        layer& d = p->layers[il];
        const linear_weight* ws[N_PHASES] = {L.qkv, L.o, L.gate_up, L.down};
        for (int ph = 0; ph < N_PHASES; ++ph) {
            const w4a16_sm80_dims dims = w4a16_sm80_dims_of(ws[ph]->n_out, ws[ph]->n_in);
            d.w[ph].codes = static_cast<const uint4*>(ws[ph]->codes.data);
            d.w[ph].scales = static_cast<const uint4*>(ws[ph]->scales.data);
            d.w[ph].alpha = ws[ph]->scale_global * 256.0f;
            d.w[ph].n_tiles = int(dims.n_tiles), d.w[ph].k_groups = int(dims.k_groups);
        }
        d.attn_norm = L.attn_norm.data, d.ffn_norm = L.ffn_norm.data;
        d.q_norm = L.q_norm.empty() ? nullptr : L.q_norm.data, d.k_norm = L.k_norm.empty() ? nullptr : L.k_norm.data;
        d.k_cache = L.k_cache.ptr<bf16>(), d.v_cache = L.v_cache.ptr<bf16>();
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(pl.grid)), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = size_t(pl.smem);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, *p));
}

void decode_layers_launch(backend& be, const decode_layers_args& a) {
    if (a.head_dim == 64) launch_hd<64>(be, a);
    else launch_hd<128>(be, a);
}

}  // namespace

void register_decode_layers(kernel_registry& r) {
    kernel_req req = cuda_req(90, {dtype::BF16}, FEAT_TMA);
    req.align = 16;
    // Priority -1, below the composition: on an H100 the step op by op is faster today (8-layer
    // Llama-3.1-8B batch 1: 0.891 vs 1.015 ms; docs/perf.md, session 25), so the kernel runs only
    // when TETRA_KERNEL=decode_layers:decode_layers_persistent_sm90 forces it.
    r.add(make_kernel<decode_layers_args>("decode_layers", "decode_layers_persistent_sm90", req, -1,
                                          decode_layers_accepts, decode_layers_launch));
    // any shape: the op's sequence of ops on this backend's kernels
    r.add(make_kernel<decode_layers_args>("decode_layers", "decode_layers_composed_cuda", cuda_req(80, {}), 0, nullptr,
                                          decode_layers_composed));
}

}  // namespace cuda
}  // namespace tetra

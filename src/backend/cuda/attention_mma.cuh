// The mma.sync building blocks of the paged attention kernels on tensor cores (bf16/f16, head_dim
// 64 or 128): attention_decode_mma_sm80 (split-KV decode, one warp per split) and
// attention_prefill_fa2_sm80 (prefill chunks and mixed batches, K/V tiles in shared memory). T
// pairs in registers, the split of an f32 weight into two T values, the online softmax of a row
// (both kernels), and the decode kernel's 16-byte K/V row loads through the block table in its lane
// layout (attention_decode_mma_sm80.cu's header: lane (g, t) holds key 8j+g's dims [(D/4)t,
// (D/4)(t+1)) of an S tile and keys 2t, 2t+1, 2t+8, 2t+9 at dims [(D/8)g, (D/8)(g+1)) of a P·V
// tile).
#pragma once
#include <type_traits>

#include "backend/cuda/attention_device.cuh"
#include "backend/cuda/norm_vec.cuh"

namespace tetra {
namespace cuda {
namespace attn_mma {

// Two floats as one register of T (bf16 or f16) pairs, lo in the low half (round to nearest even).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    if constexpr (std::is_same<T, __half>::value) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    } else {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
}

// p (f32) as two T pairs whose sum is p to 16 significant bits: hi = T(p), lo = T(p − hi) (p − hi is
// exact in f32). P·V as hi·V + lo·V keeps the weights' f32 precision through the T-only MMA.
template <class T>
__device__ __forceinline__ void split2(float p0, float p1, uint32_t& hi, uint32_t& lo) {
    hi = pack2<T>(p0, p1);
    float h0, h1;
    if constexpr (std::is_same<T, __half>::value) {
        const __half2 h = *reinterpret_cast<const __half2*>(&hi);
        h0 = __low2float(h), h1 = __high2float(h);
    } else {
        h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
    }
    lo = pack2<T>(p0 - h0, p1 - h1);
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// n 16-byte loads (read-only path) into words w[4n].
template <int N>
__device__ __forceinline__ void ld16(const void* src, uint32_t* w) {
    const uint4* s = static_cast<const uint4*>(src);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        uint4 v = __ldg(s + i);
        w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
}

// One block of 16 keys of this lane: K words of keys 8j + g (j = 0, 1), V words of keys 2t, 2t+1,
// 2t+8, 2t+9 (in that order), zeros for keys that are not live.
template <int D>
struct mma_block {
    uint32_t k[2][D / 8];
    uint32_t v[4][D / 16];
};

// The paged K/V rows of one (sequence, kv head) for this lane. Fields by value (a pointer to the
// kernel parameter would make the compiler copy it to local memory).
template <class T, int D>
struct mma_ctx {
    const T* kc;
    const T* vc;
    const int32_t* bt;
    int block_size, n_head_kv, kvh, lo, hi, g, t;

    // Element offset of key j's row (the paged slot); slot0: key j0's slot when a block of 16 keys
    // from j0 (a multiple of 16) lies in one page (block_size a multiple of 16), else −1.
    __device__ __forceinline__ int64_t slot_of(int j) const { return paged_slot(bt, block_size, j); }
    __device__ __forceinline__ int64_t slot0_of(int j0) const { return block_size % 16 == 0 ? slot_of(j0) : -1; }
    __device__ __forceinline__ int64_t row_off(int64_t slot0, int j0, int j) const {
        const int64_t slot = slot0 >= 0 ? slot0 + (j - j0) : slot_of(j);
        return (slot * n_head_kv + kvh) * int64_t(D);
    }
    // Loads block j0's keys except `skip` (−1: none) into b: K and V rows, the block's page slot
    // looked up once. Keys outside [lo, hi] are zeros.
    __device__ __forceinline__ void load(int j0, int skip, mma_block<D>& b) const {
        const int64_t slot0 = slot0_of(j0);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int key = j0 + 8 * j + g;
#pragma unroll
            for (int w = 0; w < D / 8; ++w) b.k[j][w] = 0;
            if (key >= lo && key <= hi && key != skip) ld16<D / 32>(kc + row_off(slot0, j0, key) + (D / 4) * t, b.k[j]);
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int key = j0 + 2 * t + (r & 1) + 8 * (r >> 1);
#pragma unroll
            for (int w = 0; w < D / 16; ++w) b.v[r][w] = 0;
            if (key >= lo && key <= hi && key != skip) ld16<D / 64>(vc + row_off(slot0, j0, key) + (D / 8) * g, b.v[r]);
        }
    }
    // Loads only key `key` (live) of block j0 into the lanes that hold it.
    __device__ __forceinline__ void patch(int j0, int key, mma_block<D>& b) const {
        const int64_t off = row_off(-1, j0, key);
#pragma unroll
        for (int j = 0; j < 2; ++j)
            if (j0 + 8 * j + g == key) ld16<D / 32>(kc + off + (D / 4) * t, b.k[j]);
#pragma unroll
        for (int r = 0; r < 4; ++r)
            if (j0 + 2 * t + (r & 1) + 8 * (r >> 1) == key) ld16<D / 64>(vc + off + (D / 8) * g, b.v[r]);
    }
};

// S = Q·Kᵀ of one block of 16 keys (two n8 tiles j): rows g (q[0]) and g + 8 (q[R − 1], zeros for
// R = 1), head_dim / 16 k-steps in the shared lane layout.
template <class T, int D, int R>
__device__ __forceinline__ void qk_block(const uint32_t (&q)[R][D / 8], const mma_block<D>& blk, float (&sc)[2][4]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < D / 16; ++k)
            mma16816<T>(sc[j], q[0][2 * k], R > 1 ? q[R - 1][2 * k] : 0u, q[0][2 * k + 1],
                        R > 1 ? q[R - 1][2 * k + 1] : 0u, blk.k[j][2 * k], blk.k[j][2 * k + 1]);
    }
}

// The scores sc of NT n8 tiles (keys j0 + 8j + 2t + e for accumulator elements 2r + e) into this
// lane's online-softmax state, row r (g, g + 8) seeing keys [lo[r], hi[r]]: the rows' running max m
// and denominator l (this lane's part: the quad's sum is taken by finish_rows), the weights pw (the
// layout of sc) and each row's factor alpha for its O. A live NaN score makes the row NaN, as the
// oracle's sum of exps: the max skips it, its weight is NaN — also while the max is still −inf (every
// live score so far NaN), where the other weights are 0 — and a NaN l or o stays NaN (NaN · alpha,
// alpha · NaN). MASK = false: every key of the tiles is in every row's range (the caller checked).
template <int NT, int R, bool MASK = true>
__device__ __forceinline__ void online_softmax(float (&sc)[NT][4], int j0, const int (&lo)[R], const int (&hi)[R],
                                               float scale, int t, float (&m)[R], float (&l)[R], float (&pw)[NT][4],
                                               float (&alpha)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = j0 + 8 * j + 2 * t + e;
                float v = !MASK || (key >= lo[r] && key <= hi[r]) ? sc[j][2 * r + e] * scale : -INFINITY;
                sc[j][2 * r + e] = v;
                mx = fmaxf(mx, v);  // a NaN score is skipped here; its weight below is NaN
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx);
        alpha[r] = 1.0f;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float v = sc[j][2 * r + e];
                const float w = m_new != -INFINITY ? expf(v - m_new) : v != v ? v : 0.0f;  // −inf → 0
                pw[j][2 * r + e] = w;
                sum += w;
            }
        if (m_new != -INFINITY) alpha[r] = expf(m[r] - m_new);  // m = −inf → 0 (l, o are 0 then)
        l[r] = l[r] * alpha[r] + sum;
        m[r] = m_new;
    }
}

// The block's scores sc (from qk_block) into this lane's online-softmax state (online_softmax), and
// O = O·alpha + P·V with P as T(p) + T(p − T(p)).
template <class T, int D, int R>
__device__ __forceinline__ void softmax_pv(float (&sc)[2][4], const mma_block<D>& blk, int j0, const int (&lo)[R],
                                           const int (&hi)[R], float scale, int t, float (&m)[R], float (&l)[R],
                                           float (&o)[D / 8][4]) {
    float pw[2][4];
    float alpha[R];
    online_softmax<2, R>(sc, j0, lo, hi, scale, t, m, l, pw, alpha);
    if (R == 1) pw[0][2] = pw[0][3] = pw[1][2] = pw[1][3] = 0.0f;
    uint32_t a[4], r[4];  // P's A registers: T(p) and T(p − T(p))
    split2<T>(pw[0][0], pw[0][1], a[0], r[0]);
    split2<T>(pw[0][2], pw[0][3], a[1], r[1]);
    split2<T>(pw[1][0], pw[1][1], a[2], r[2]);
    split2<T>(pw[1][2], pw[1][3], a[3], r[3]);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
        o[j][0] *= alpha[0], o[j][1] *= alpha[0];
        o[j][2] *= alpha[R - 1], o[j][3] *= alpha[R - 1];
        const uint32_t sel = (j & 1) ? 0x7632u : 0x5410u;
        const uint32_t b0 = prmt(blk.v[0][j / 2], blk.v[1][j / 2], sel);
        const uint32_t b1 = prmt(blk.v[2][j / 2], blk.v[3][j / 2], sel);
        mma16816<T>(o[j], r[0], r[1], r[2], r[3], b0, b1);
        mma16816<T>(o[j], a[0], a[1], a[2], a[3], b0, b1);
    }
}

// After the last block: the quad's partial denominators summed (a NaN in any lane's part makes the
// row's l NaN).
template <int R>
__device__ __forceinline__ void finish_rows(float (&l)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
}

// A finished row's value from its accumulator and denominator l (inv = row_inv(l)): a NaN l makes
// the row NaN, l = 0 (no live key) a zero row.
__device__ __forceinline__ float row_inv(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }
__device__ __forceinline__ float row_value(float acc, float l, float inv) { return l != l ? l : acc * inv; }

// Row r (g, g + 8) of this lane's O as D/4 output values (dims [(D/4)t, (D/4)(t+1)) of the lane
// layout), normalized by the row's full denominator l; a NaN l (a live NaN score, or a NaN V row
// with weight > 0) makes the whole row NaN, l = 0 (no live key) a zero row.
template <int D>
__device__ __forceinline__ void row_values(const float (&o)[D / 8][4], float l, int r, float (&v)[D / 4]) {
    const float inv = row_inv(l);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
        v[j] = row_value(o[j][2 * r], l, inv);
        v[D / 8 + j] = row_value(o[j][2 * r + 1], l, inv);
    }
}

// Those D/4 values to dst (the row's output at dim (D/4)t) as T, in 16-byte stores.
template <class T, int D>
__device__ __forceinline__ void store_row(T* dst, const float (&v)[D / 4]) {
#pragma unroll
    for (int i = 0; i < D / 32; ++i)
        reinterpret_cast<uint4*>(dst)[i] = pack8<T>(*reinterpret_cast<const float(*)[8]>(v + 8 * i));
}

}  // namespace attn_mma
}  // namespace cuda
}  // namespace tetra

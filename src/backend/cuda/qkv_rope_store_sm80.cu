// qkv_rope_store_sm80: the attention input stage of a decode/prefill step in one kernel (instead of
// get_rows ×3, rms_norm ×2, rope and kv_store): per (token, head) of the fused projection row, one
// 16-B vector (8 elements) per lane, gp = head_dim/8 lanes per head. q/k heads: per-head rms_norm
// when weights are given — norm_vec.cuh's helpers (sum_sq8, group_sum, rms_scale, scale8), so the
// result equals the unfused rms_norm_sm80 bit for bit — rounded to the activation dtype as the
// unfused op stores it, then rope with the partner lane's half exchanged by a shuffle (rope_table,
// rope_first, rope_second of cuda_device.cuh, as rope_sm80); q to q_out, k and v to the paged caches
// (negative slots: padding, not stored).
// Shapes it takes: 16-bit activations, cache dtype = activation dtype, head_dim/8 a power of two
// ≤ 32 (head_dim 16…256), full rotary (n_rot = head_dim). Others: the unfused ops.
#include "backend/cuda/norm_vec.cuh"

namespace tetra {
namespace cuda {

namespace {

constexpr int THREADS = 256;

// grid (tokens, head blocks of THREADS/gp heads); dynamic smem: 2·half floats (cos, sin).
template <class T>
__global__ void __launch_bounds__(THREADS) qkv_rope_store_kernel(const T* qkv, const void* q_norm, const void* k_norm,
                                                                 dtype wt, float eps, const int32_t* positions,
                                                                 const float* inv_freq, T* q_out, T* k_cache,
                                                                 T* v_cache, const int32_t* slot_mapping, int nh,
                                                                 int nkv, int hd, int gp, int64_t n_slots) {
    extern __shared__ float cs[];
    const int64_t t = blockIdx.x;
    const int half = hd / 2;
    const int heads = nh + 2 * nkv;
    const int h = blockIdx.y * (THREADS / gp) + int(threadIdx.x) / gp, j = int(threadIdx.x) % gp;
    const bool on = h < heads;  // whole head groups: uniform over each group of gp lanes
    const bool is_q = h < nh, is_k = !is_q && h < nh + nkv;
    const void* w = is_q ? q_norm : is_k ? k_norm : nullptr;
    const bool norm = on && w != nullptr;
    // Before pdl_wait() (cuda_device.cuh's rule: the step's metadata, inv_freq and the q/k norm
    // weights are not written by its kernels): the cos/sin table, computed while the qkv matmul
    // ends, and this lane's norm weights.
    float wv[8] = {};
    if (norm)
#pragma unroll
        for (int i = 0; i < 8; ++i) wv[i] = load_any(w, wt, int64_t(j) * 8 + i);
    rope_table(cs, float(positions[t]), inv_freq, half);
    pdl_wait();
    pdl_trigger();
    __syncthreads();
    float v[8] = {};
    if (on) unpack8<T>(reinterpret_cast<const uint4*>(qkv + (t * heads + h) * hd)[j], v);
    // Norm (when this head has weights): every lane of the warp takes part in the shuffles.
    const float ss = group_sum(sum_sq8(v), gp);
    if (norm) {
        float o8[8];
        scale8(v, wv, rms_scale(ss, hd, eps), o8);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = to_f32(from_f32<T>(o8[i]));  // stored rounded, as rms_norm does
    }
    // Rope on q and k: lane j < gp/2 holds x1 = elements [8j, 8j+8), lane j ^ gp/2 the matching x2.
    float pv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) pv[i] = __shfl_xor_sync(0xffffffffu, v[i], gp / 2);
    if (!on) return;
    const int64_t slot = slot_mapping[t];
    const bool store = slot >= 0 && slot < n_slots;
    if (is_q || is_k) {
        const bool first = j < gp / 2;
        const int i0 = (first ? j : j - gp / 2) * 8;
        float o8[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float c = cs[i0 + i], s = cs[half + i0 + i];
            // first half: own = x1, partner = x2; second half: own = x2, partner = x1
            o8[i] = first ? rope_first(v[i], pv[i], c, s) : rope_second(pv[i], v[i], c, s);
        }
        const uint4 packed = pack8<T>(o8);
        if (is_q) reinterpret_cast<uint4*>(q_out + (t * nh + h) * hd)[j] = packed;
        else if (store) reinterpret_cast<uint4*>(k_cache + (slot * nkv + (h - nh)) * hd)[j] = packed;
    } else if (store) {
        reinterpret_cast<uint4*>(v_cache + (slot * nkv + (h - nh - nkv)) * hd)[j] =
            reinterpret_cast<const uint4*>(qkv + (t * heads + h) * hd)[j];
    }
}

std::string qkv_rope_store_accepts(const qkv_rope_store_args& a) {
    if (a.act == dtype::F32) return "f32 activations (the vector path takes 16-bit rows)";
    if (a.k_cache.type != a.act)
        return strfmt("cache dtype %s differs from the activation dtype %s", dtype_name(a.k_cache.type), dtype_name(a.act));
    const int64_t hd = a.qkv.dim(2), gp = hd / 8;
    if (hd % 8 != 0 || gp < 2 || gp > 32 || (gp & (gp - 1)) != 0)
        return strfmt("head_dim %lld: needs head_dim/8 a power of two in [2, 32]", (long long)hd);
    if (2 * a.inv_freq.dim(0) != hd)
        return strfmt("partial rotary (n_rot %lld < head_dim %lld)", (long long)(2 * a.inv_freq.dim(0)), (long long)hd);
    if (a.align < 16) return "tensors not 16-byte aligned";
    if (a.qkv.dim(0) > 0x7fffffffLL) return "too many tokens for the grid";
    return "";
}

void qkv_rope_store_launch(backend& be, const qkv_rope_store_args& a) {
    const int64_t n = a.qkv.dim(0);
    if (n == 0) return;
    const int hd = int(a.qkv.dim(2)), gp = hd / 8, nh = int(a.q_out.dim(1)), nkv = int(a.k_cache.dim(2));
    const int heads = nh + 2 * nkv, per_block = THREADS / gp;
    const dtype wt = !a.q_norm.empty() ? a.q_norm.type : !a.k_norm.empty() ? a.k_norm.type : dtype::F32;
    TETRA_CHECK(a.q_norm.empty() || a.k_norm.empty() || a.q_norm.type == a.k_norm.type,
                "qkv_rope_store_sm80: q_norm (%s) and k_norm (%s) must share a dtype", dtype_name(a.q_norm.type),
                dtype_name(a.k_norm.type));
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (sizeof(T) == 2) {
            dim3 grid(unsigned(n), unsigned((heads + per_block - 1) / per_block));
            launch_pdl(be, qkv_rope_store_kernel<T>, grid, dim3(THREADS), size_t(hd) * sizeof(float),
                a.qkv.ptr<const T>(), a.q_norm.data, a.k_norm.data, wt, a.eps, a.positions.ptr<const int32_t>(),
                a.inv_freq.ptr<const float>(), a.q_out.ptr<T>(), a.k_cache.ptr<T>(), a.v_cache.ptr<T>(),
                a.slot_mapping.ptr<const int32_t>(), nh, nkv, hd, gp, a.k_cache.dim(0) * a.k_cache.dim(1));
        }
    });
}

}  // namespace

void register_qkv_rope_store(kernel_registry& r) {
    r.add(make_kernel<qkv_rope_store_args>("qkv_rope_store", "qkv_rope_store_sm80", cuda_req(80, {dtype::BF16, dtype::F16}),
                                           10, qkv_rope_store_accepts, qkv_rope_store_launch));
}

}  // namespace cuda
}  // namespace tetra

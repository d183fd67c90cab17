// moe_combine_sm80: out[t] = Σ_s w[t, s] · y[dest[t, s]] in ascending slot order, then
// + sigmoid(g[t]) · shared[t], all in f32 with the CPU oracle's operation order and no contraction
// (__fmul_rn/__fadd_rn: moe_combine_cpu is compiled without FMA), sigmoid's exp rounded from a
// double exp (≈ glibc expf). Grid (token, 256-column blocks), one column per thread; the token's
// dest rows and weights are staged in shared memory first so the k loads of y are independent (one
// round trip instead of k dependent ones per column). No atomics, a token's row never depends on the
// other tokens. Equal to the CPU bit for bit on the same inputs.
// With the next add_rms_norm folded in (moe_combine_norm; decode steps of the MoE layers): one CTA per
// token, thread j on columns 8j .. 8j+7 — the combine as above per column, then norm_vec_kernel's ADD
// path on the row (same thread ↔ vector map, block size and block_sum: add_rms_norm's bits), so the
// norm kernel after each MoE layer is gone (docs/perf.md, session 20). Where add_rms_norm would not
// take norm_vec (alignment, n % 8, n > 8192, n ≤ 256), the plain kernel and then add_rms_norm.
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/norm_vec.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int THREADS = 256;

// y: [n_rows, n] T; dest: i32 [n_tokens, k]; w: f32 [n_tokens, k]; out: [n_tokens, n] T;
// shared: [n_tokens, n] T or null; gate: [n_tokens] T or null. Dynamic smem: k · (4 + 4) bytes.
template <class T>
__global__ void __launch_bounds__(THREADS) moe_combine_kernel(const T* y, const int32_t* dest, const float* w, T* out,
                                                              const T* shared, const T* gate, int n, int k) {
    extern __shared__ int32_t s_dest[];
    pdl_wait();
    pdl_trigger();
    float* s_w = reinterpret_cast<float*>(s_dest + k);
    const int64_t t = blockIdx.x;
    for (int s = threadIdx.x; s < k; s += THREADS) s_dest[s] = dest[t * k + s], s_w[s] = w[t * k + s];
    float g = 1.0f;
    if (gate) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, float(exp(double(-to_f32(gate[t]))))));
    __syncthreads();
    const int j = blockIdx.y * THREADS + threadIdx.x;
    if (j >= n) return;
    float acc = 0.0f;
#pragma unroll 8
    for (int s = 0; s < k; ++s) acc = __fadd_rn(acc, __fmul_rn(s_w[s], to_f32(y[int64_t(s_dest[s]) * n + j])));
    if (shared) acc = __fadd_rn(acc, __fmul_rn(g, to_f32(shared[t * n + j])));
    out[t * n + j] = from_f32<T>(acc);
}

// One CTA per token (blockDim: n / 8 rounded up to warps, as norm_vec_kernel); out, residual, h as
// in the plain kernel and add_rms_norm. Dynamic smem: k · (4 + 4) bytes.
template <class T>
__global__ void __launch_bounds__(1024) moe_combine_norm_kernel(const T* y, const int32_t* dest, const float* w, T* out,
                                                                const T* shared, const T* gate, T* res, const void* nw,
                                                                dtype nwt, T* h, int n, int k, float eps) {
    extern __shared__ int32_t s_dest[];
    float* s_w = reinterpret_cast<float*>(s_dest + k);
    const int64_t t = blockIdx.x;
    const int j = threadIdx.x;
    const bool on = j < n / 8;
    float wv[8] = {};
    if (on)
#pragma unroll
        for (int i = 0; i < 8; ++i) wv[i] = load_any(nw, nwt, int64_t(j) * 8 + i);
    pdl_wait();
    for (int s = threadIdx.x; s < k; s += blockDim.x) s_dest[s] = dest[t * k + s], s_w[s] = w[t * k + s];
    float g = 1.0f;
    if (gate) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, float(exp(double(-to_f32(gate[t]))))));
    __syncthreads();
    uint4 rq = make_uint4(0, 0, 0, 0), sq = make_uint4(0, 0, 0, 0);
    uint4* rp = reinterpret_cast<uint4*>(res + t * n) + j;
    if (on) {
        rq = *rp;
        if (shared) sq = reinterpret_cast<const uint4*>(shared + t * n)[j];
    }
    float acc[8] = {};
    for (int s0 = 0; s0 < k; s0 += 8) {  // up to 8 rows of y in flight, then summed in slot order
        uint4 yq[8];
#pragma unroll
        for (int u = 0; u < 8; ++u)
            yq[u] = on && s0 + u < k ? reinterpret_cast<const uint4*>(y + int64_t(s_dest[s0 + u]) * n)[j]
                                     : make_uint4(0, 0, 0, 0);
        if (s0 == 0) pdl_trigger();  // this token's loads are requested ahead of the next kernel's
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            if (s0 + u >= k) break;
            float yv[8];
            unpack8<T>(yq[u], yv);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(s_w[s0 + u], yv[i]));
        }
    }
    if (k == 0) pdl_trigger();
    float v[8] = {};
    if (on) {
        if (shared) {
            float sv[8];
            unpack8<T>(sq, sv);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(g, sv[i]));
        }
        const uint4 oq = pack8<T>(acc);
        reinterpret_cast<uint4*>(out + t * n)[j] = oq;
        // norm_vec_kernel<T, true> from here: residual + x (rounded, stored), the norm of the sum
        unpack8<T>(oq, v);
        float r8[8];
        unpack8<T>(rq, r8);
#pragma unroll
        for (int i = 0; i < 8; ++i) r8[i] = r8[i] + v[i];
        const uint4 sum = pack8<T>(r8);
        *rp = sum;
        unpack8<T>(sum, v);
    }
    const float r = rms_scale(block_sum(sum_sq8(v)), n, eps);
    if (!on) return;
    float o8[8];
    scale8(v, wv, r, o8);
    reinterpret_cast<uint4*>(h + t * n)[j] = pack8<T>(o8);
}

// Whether the folded norm runs in moe_combine_norm_kernel: where add_rms_norm runs norm_vec_kernel's
// one-row-per-block form on these rows (and y and shared are 16-B aligned for its vector loads).
bool norm_fits(const moe_combine_args& a, size_t elem) {
    return norm_vec_row_per_block(a.n) &&
           norm_vec_takes(elem, a.n, a.n_tokens, {a.y.data, a.out.data, a.shared.data, a.norm.residual.data,
                                                  a.norm.h.data});
}

}  // namespace

static void moe_combine_launch(backend& be, const moe_combine_args& a) {
    if (a.n_tokens == 0) return;
    bool fused = false;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* shared = a.shared.empty() ? nullptr : a.shared.ptr<const T>();
        const T* gate = a.shared_gate.empty() ? nullptr : a.shared_gate.ptr<const T>();
        if (a.norm.residual.data && norm_fits(a, sizeof(T))) {
            fused = true;
            const unsigned threads = unsigned((a.n / 8 + 31) / 32 * 32);
            launch_pdl(be, moe_combine_norm_kernel<T>, dim3(unsigned(a.n_tokens)), dim3(threads), size_t(a.k) * 8,
                       a.y.ptr<const T>(), a.dest_rows.ptr<const int32_t>(), a.topk_weights.ptr<const float>(),
                       a.out.ptr<T>(), shared, gate, a.norm.residual.ptr<T>(), a.norm.w.data, a.norm.w.type,
                       a.norm.h.ptr<T>(), int(a.n), int(a.k), a.norm.eps);
            return;
        }
        dim3 grid(unsigned(a.n_tokens), unsigned((a.n + THREADS - 1) / THREADS));
        launch_pdl(be, moe_combine_kernel<T>, grid, dim3(THREADS), size_t(a.k) * 8, a.y.ptr<const T>(),
                   a.dest_rows.ptr<const int32_t>(), a.topk_weights.ptr<const float>(), a.out.ptr<T>(), shared, gate,
                   int(a.n), int(a.k));
    });
    if (!fused) moe_combine_norm_after(be, a);  // the folded norm where the fused kernel did not run
}

static std::string moe_combine_accepts(const moe_combine_args& a) {
    if (a.n > INT32_MAX / 2 || a.n_tokens > INT32_MAX / 2) return "shape too large for int indexing";
    if ((a.n + THREADS - 1) / THREADS > 65535) return "n too large for the grid (65535 column blocks)";
    if (a.k > 4096) return "k = " + std::to_string(a.k) + " > 4096 (shared-memory staging)";
    return "";
}

void register_moe_combine_sm80(kernel_registry& r) {
    r.add(make_kernel<moe_combine_args>("moe_combine", "moe_combine_sm80",
                                        cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10, moe_combine_accepts,
                                        moe_combine_launch));
}

}  // namespace cuda
}  // namespace tetra

// rope_sm80: NeoX/HF rotate_half rope in place on q and k, as the CPU oracle: angle =
// f32(pos · inv_freq[i]), cos/sin evaluated in double and rounded to f32 (so they match the
// oracle's std::cos/std::sin to the ulp), out[i] = x[i]·c − x[i+h]·s, out[i+h] = x[i+h]·c + x[i]·s.
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// q: [n_tokens, n_head, head_dim] T; k: [n_tokens, n_head_kv, head_dim] T; positions: i32
// [n_tokens]; inv_freq: f32 [half]. Grid (tokens, head groups of hpb heads), hpb·half threads: each
// thread rotates exactly one pair, so a decode token's q and k take one memory round trip (a strided
// loop over 40 heads × 64 pairs in one block took ~6 µs on an H100). The CTA's cos/sin table is
// built in shared memory first (2·half floats of dynamic smem).
template <class T>
__global__ void rope_kernel(T* q, T* k, const int32_t* positions, const float* inv_freq, int n_head, int n_head_kv,
                            int head_dim, int half, int hpb) {
    extern __shared__ float cs[];
    const int64_t t = blockIdx.x;
    rope_table(cs, float(positions[t]), inv_freq, half);
    __syncthreads();
    const int hd = blockIdx.y * hpb + int(threadIdx.x) / half, i = int(threadIdx.x) % half;
    if (int(threadIdx.x) >= hpb * half || hd >= n_head + n_head_kv) return;
    T* base = hd < n_head ? q + (t * n_head + hd) * head_dim : k + (t * n_head_kv + (hd - n_head)) * head_dim;
    float x1 = to_f32(base[i]), x2 = to_f32(base[i + half]), c = cs[i], s = cs[half + i];
    base[i] = from_f32<T>(rope_first(x1, x2, c, s));
    base[i + half] = from_f32<T>(rope_second(x1, x2, c, s));
}

static void rope_launch(backend& be, const rope_args& a) {
    int64_t n_tokens = a.q.dim(0);
    int half = int(a.inv_freq.dim(0));
    if (n_tokens == 0 || half == 0) return;
    TETRA_CHECK(n_tokens <= 0x7fffffff, "rope_sm80: %lld tokens exceed the grid limit", (long long)n_tokens);
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const int heads = int(a.q.dim(1) + a.k.dim(1));
        const int hpb = std::max(1, std::min(heads, 512 / half));  // heads per CTA: ≤ 512 threads
        const int threads = std::max(32, (hpb * half + 31) / 32 * 32);
        rope_kernel<T><<<dim3(unsigned(n_tokens), unsigned((heads + hpb - 1) / hpb)), threads,
                         size_t(2 * half) * sizeof(float), stream_of(be)>>>(
            a.q.ptr<T>(), a.k.ptr<T>(), a.positions.ptr<const int32_t>(), a.inv_freq.ptr<const float>(),
            int(a.q.dim(1)), int(a.k.dim(1)), int(a.q.dim(2)), half, hpb);
        CUDA_CHECK(cudaGetLastError());
    });
}

static std::string rope_accepts(const rope_args& a) {
    if (a.inv_freq.dim(0) > 512) return strfmt("n_rot/2 = %lld > 512 (one thread per pair of a head)", (long long)a.inv_freq.dim(0));
    return "";
}

void register_rope(kernel_registry& r) {
    r.add(make_kernel<rope_args>("rope", "rope_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10,
                                 rope_accepts, rope_launch));
}

}  // namespace cuda
}  // namespace tetra

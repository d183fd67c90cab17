// moe_permute_sm80: the stable counting sort of moe_permute_cpu in one CTA, integers only. Thread e
// owns expert e (looping e += blockDim): pass 1 counts its assignments by scanning topk_ids in
// order, an exclusive scan gives the offsets, pass 2 scans again and places each of its
// assignments at the next row of its group — ascending (token, slot) within a group by
// construction, the same integers as the CPU whatever the launch shape. O(n_tokens·k) reads per
// thread (broadcast loads of the same id); ids outside [0, n_expert) are skipped (undefined, moe.h).
#include "backend/cuda/cuda_device.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int THREADS = 512;

// ids: i32 [n]; counts: i32 [ne]; offsets: i32 [ne + 1]; sorted: i32 [n]; dest: i32 [n]
__global__ void __launch_bounds__(THREADS) moe_permute_kernel(const int32_t* ids, int32_t* counts, int32_t* offsets,
                                                              int32_t* sorted, int32_t* dest, int n, int ne, int k) {
    extern __shared__ int32_t base[];  // [ne + 1]: offsets
    for (int e = threadIdx.x; e < ne; e += THREADS) {
        int c = 0;
        for (int i = 0; i < n; ++i) c += __ldg(ids + i) == e;
        base[e + 1] = c;
        counts[e] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        base[0] = 0;
        for (int e = 0; e < ne; ++e) base[e + 1] += base[e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e <= ne; e += THREADS) offsets[e] = base[e];
    for (int e = threadIdx.x; e < ne; e += THREADS) {
        int r = base[e];
        for (int i = 0; i < n; ++i)
            if (__ldg(ids + i) == e) {
                sorted[r] = i / k;
                dest[i] = r++;
            }
    }
}

}  // namespace

static void moe_permute_launch(backend& be, const moe_permute_args& a) {
    const int64_t n = a.n_tokens * a.k;
    size_t smem = size_t(a.n_expert + 1) * sizeof(int32_t);
    moe_permute_kernel<<<1, THREADS, smem, stream_of(be)>>>(a.topk_ids.ptr<const int32_t>(), a.expert_counts.ptr<int32_t>(),
                                                            a.expert_offsets.ptr<int32_t>(), a.sorted_tokens.ptr<int32_t>(),
                                                            a.dest_rows.ptr<int32_t>(), int(n), int(a.n_expert), int(a.k));
    CUDA_CHECK(cudaGetLastError());
}

static std::string moe_permute_accepts(const moe_permute_args& a) {
    if (a.n_expert > 8192) return "n_expert = " + std::to_string(a.n_expert) + " > 8192 (offsets in shared memory)";
    return "";
}

void register_moe_permute_sm80(kernel_registry& r) {
    kernel_req req = cuda_req(80, {dtype::I32});
    r.add(make_kernel<moe_permute_args>("moe_permute", "moe_permute_sm80", req, 10, moe_permute_accepts,
                                        moe_permute_launch));
}

}  // namespace cuda
}  // namespace tetra

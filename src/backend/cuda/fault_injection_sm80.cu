// fault_injection_sm80 (test-only, -DTETRA_FAULT_INJECTION=ON builds with the CUDA backend): CUDA
// twins of cpu/faulty_*.cpp. Each runs the real CUDA kernel of its op (same accepts(), found in the
// process registry), then breaks the result in one documented way, so the only difference from a
// correct kernel is the fault: a row broadcast (the "!!!!!" signature), one NaN, or — the subtle
// one — the last 16-element scale block of every weight row dropped. Never in a release build.
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/fault_injection.h"


namespace tetra {
namespace cuda {

namespace {

const char* const k_w4a16 = "matmul_nvfp4_w4a16_sm80";
const char* const k_dense = "matmul_dense_bf16_cublaslt";

// Every element of row blockIdx.x = the row's first element, as when every thread reads one lane.
// out: [n_rows, n] T
template <class T>
__global__ void faulty_broadcast_rows_kernel(T* out, int64_t n) {
    T* row = out + int64_t(blockIdx.x) * n;
    const T v = row[0];  // row[0] itself is never written
    for (int64_t j = 1 + threadIdx.x; j < n; j += blockDim.x) row[j] = v;
}

// One NaN in the last element of the first row; the rest stays correct. out: [n_rows, n] T
template <class T>
__global__ void faulty_poison_nan_kernel(T* out, int64_t n) {
    out[n - 1] = from_f32<T>(__int_as_float(0x7fc00000));
}

const kernel_entry& real(const char* name) {
    const kernel_entry* k = kernel_registry::instance().find(name);
    TETRA_ASSERT(k != nullptr);  // both real kernels are compiled into every CUDA build
    return *k;
}

// out: [m, n] act (device)
void broadcast_rows(backend& be, const matmul_args& a) {
    if (a.m == 0 || a.n == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        faulty_broadcast_rows_kernel<T><<<unsigned(a.m), 256, 0, stream_of(be)>>>(a.out.ptr<T>(), a.n);
        CUDA_CHECK(cudaGetLastError());
    });
}

// out: [m, n] act (device)
void poison_nan(backend& be, const matmul_args& a) {
    if (a.m == 0 || a.n == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        faulty_poison_nan_kernel<T><<<1, 1, 0, stream_of(be)>>>(a.out.ptr<T>(), a.n);
        CUDA_CHECK(cudaGetLastError());
    });
}

std::string accepts_w4a16(const matmul_args& a) { return real(k_w4a16).accepts(a); }
std::string accepts_dense(const matmul_args& a) { return real(k_dense).accepts(a); }

void launch_w4a16_broadcast(backend& be, const matmul_args& a) {
    real(k_w4a16).launch(be, a);
    broadcast_rows(be, a);
}

void launch_w4a16_nan(backend& be, const matmul_args& a) {
    real(k_w4a16).launch(be, a);
    poison_nan(be, a);
}

// Dropping the last scale block of every weight row (scale 0) removes exactly the terms k ≥ K − 16
// of every dot product, so it equals the real kernel on x with its last 16 columns zeroed: the same
// fault as cpu/faulty_matmul_nvfp4_w4a16_dropblock.cpp, whatever layout prepare_linear chose.
// Output stays finite and plausible (NMSE ≈ 16/K against the oracle).
// x: [m, k] act (device), k a multiple of 16
void launch_w4a16_dropblock(backend& be, const matmul_args& a) {
    if (a.m == 0) return;
    cudaStream_t s = stream_of(be);
    const size_t es = dtype_size(a.act), row = size_t(a.k) * es;
    matmul_args b = a;
    b.x.owner.reset();
    // Stream-ordered allocation: legal inside CUDA-graph capture, freed after the matmul is enqueued.
    CUDA_CHECK(cudaMallocAsync(&b.x.data, size_t(a.m) * row, s));
    CUDA_CHECK(cudaMemcpyAsync(b.x.data, a.x.data, size_t(a.m) * row, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(b.x.data) + size_t(a.k - 16) * es, row, 0, 16 * es,
                                 size_t(a.m), s));
    real(k_w4a16).launch(be, b);
    CUDA_CHECK(cudaFreeAsync(b.x.data, s));
}

void launch_dense_broadcast(backend& be, const matmul_args& a) {
    real(k_dense).launch(be, a);
    broadcast_rows(be, a);
}

kernel_req faulty_req() {
    kernel_req req = cuda_req(80, {dtype::BF16});  // as the real kernels they wrap
    req.align = 16;
    return req;
}

}  // namespace

void register_faulty_kernels(kernel_registry& r, int priority) {
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "faulty_matmul_nvfp4_w4a16_broadcast_sm80", faulty_req(),
                                   priority, accepts_w4a16, launch_w4a16_broadcast));
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "faulty_matmul_nvfp4_w4a16_nan_sm80", faulty_req(), priority,
                                   accepts_w4a16, launch_w4a16_nan));
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "faulty_matmul_nvfp4_w4a16_dropblock_sm80", faulty_req(),
                                   priority, accepts_w4a16, launch_w4a16_dropblock));
    r.add(make_kernel<matmul_args>("matmul_dense", "faulty_matmul_dense_broadcast_sm80", faulty_req(), priority,
                                   accepts_dense, launch_dense_broadcast));
}

}  // namespace cuda
}  // namespace tetra

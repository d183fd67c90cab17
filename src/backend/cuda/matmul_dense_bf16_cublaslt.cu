// matmul_dense_bf16_cublaslt: out = alpha · x · wᵀ in bf16 with f32 accumulation through cuBLASLt
// (the lm_head, dense layers, and the GEMM of the W4A16 large-M path). Row-major x [m, k] and
// w [n, k] are column-major k×m and k×n, so this is the "TN" GEMM D[n×m] = op(A)ᵀ·B with A = w.
// One handle per device and a per-shape cache of descriptors + heuristic algorithm; the caller
// provides the workspace, so a call on a seen shape does no allocation (graph-capturable).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"

namespace tetra {
namespace cuda {

namespace {

#define CUBLAS_CHECK(expr)                                                                          \
    do {                                                                                            \
        cublasStatus_t tetra_cublas_st_ = (expr);                                                   \
        TETRA_CHECK(tetra_cublas_st_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt error %d (%s) at %s:%d: %s", \
                    int(tetra_cublas_st_), cublasLtGetStatusString(tetra_cublas_st_), __FILE__, __LINE__, #expr); \
    } while (0)

struct gemm_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
};

// (device, m, n, k, ld_out, workspace bytes)
using plan_key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, size_t>;

struct lt_state {
    std::mutex mu;
    std::map<int, cublasLtHandle_t> handles;
    std::map<plan_key, gemm_plan> plans;
};

lt_state& state() {
    static lt_state* s = new lt_state();  // never destroyed: handles outlive static teardown order
    return *s;
}

const gemm_plan& plan_for(int dev, int64_t m, int64_t n, int64_t k, int64_t ld_out, size_t ws_bytes,
                          cublasLtHandle_t& handle) {
    lt_state& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    auto h = st.handles.find(dev);
    if (h == st.handles.end()) {
        cublasLtHandle_t nh = nullptr;
        CUBLAS_CHECK(cublasLtCreate(&nh));
        h = st.handles.emplace(dev, nh).first;
    }
    handle = h->second;
    plan_key key{dev, m, n, k, ld_out, ws_bytes};
    auto it = st.plans.find(key);
    if (it != st.plans.end()) return it->second;

    gemm_plan p;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k));       // w: k×n
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(k), uint64_t(m), k));       // x: k×m
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, uint64_t(n), uint64_t(m), ld_out));  // out: n×m
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    cublasStatus_t st_h = cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    TETRA_CHECK(st_h == CUBLAS_STATUS_SUCCESS && found > 0,
                "cuBLASLt: no bf16 GEMM algorithm for out[%lld, %lld] (ld %lld) = x[%lld, %lld] · w[%lld, %lld]ᵀ "
                "with a %zu-byte workspace (status %d)",
                (long long)m, (long long)n, (long long)ld_out, (long long)m, (long long)k, (long long)n,
                (long long)k, ws_bytes, int(st_h));
    p.algo = res.algo;
    return st.plans.emplace(key, p).first->second;
}

}  // namespace

void gemm_bf16_tn_launch(const void* x, const void* w, void* out, int64_t m, int64_t n, int64_t k, int64_t ld_out,
                         float alpha, void* ws, size_t ws_bytes, cudaStream_t s) {
    TETRA_CHECK(m > 0 && n > 0 && k > 0 && ld_out >= n, "gemm_bf16: bad shape m=%lld n=%lld k=%lld ld_out=%lld",
                (long long)m, (long long)n, (long long)k, (long long)ld_out);
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cublasLtHandle_t handle = nullptr;
    const gemm_plan& p = plan_for(dev, m, n, k, ld_out, ws_bytes, handle);
    float beta = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(handle, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &p.algo, ws,
                                ws_bytes, s));
}

#ifndef TETRA_MATMUL_STANDALONE  // bench/device_matmul.sh's nvcc-only build: launchers only
namespace {

std::string accepts_dense_bf16(const matmul_args& a) {
    if (a.w->kind != linear_kind::DENSE) return "weight is not dense";
    if (a.w->dense.type != dtype::BF16) return "needs a bf16 weight";
    if (a.x.type != dtype::BF16 || a.out.type != dtype::BF16) return "needs bf16 x and out";
    return "";
}

void launch_dense_bf16(backend& be, const matmul_args& a) {
    void* ws = scratch(be, CUBLASLT_WORKSPACE_BYTES);
    gemm_bf16_tn_launch(a.x.data, a.w->dense.data, a.out.data, a.m, a.n, a.k, a.n, 1.0f, ws,
                        CUBLASLT_WORKSPACE_BYTES, stream_of(be));
}

}  // namespace

void register_matmul_dense_bf16_cublaslt(kernel_registry& r) {
    kernel_req req = cuda_req(80, {dtype::BF16});
    req.align = 16;
    r.add(make_kernel<matmul_args>("matmul_dense", "matmul_dense_bf16_cublaslt", req, 10, accepts_dense_bf16,
                                   launch_dense_bf16));
}

#endif  // TETRA_MATMUL_STANDALONE

}  // namespace cuda
}  // namespace tetra

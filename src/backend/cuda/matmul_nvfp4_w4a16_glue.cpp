// The backend side of the W4A16 NVFP4 kernels on the sm80 packed layout (host code; the kernels
// and launchers are in matmul_nvfp4_w4a16_sm80.cu, matmul_nvfp4_w4a16_gemv_sm80.cu and
// matmul_nvfp4_w4a16_large_sm80.cu): the prepare step that re-lays a host weight and uploads it,
// the check that a weight is in that layout, the workspace binding, and the registry entries of
// "matmul_nvfp4_w4a16" (small-M/large-M and decode kernels) and "matmul_silu".
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/arch.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"

namespace tetra {
namespace cuda {

namespace {

// Device buffers holding a re-laid weight, by codes pointer: how accepts() tells a prepared weight
// from a canonical one (both carry the canonical [n, k/2] / [n, k/16] shapes, so the op wrapper's
// checks pass). An entry lives as long as the tensor's owner.
std::mutex packed_mu;
std::map<const void*, std::pair<int64_t, int64_t>>& packed_set() {
    static auto* m = new std::map<const void*, std::pair<int64_t, int64_t>>();
    return *m;
}

// The uploaded bytes of `buf`, shaped `shape` (a prefix view of the packed buffer), unregistered
// from packed_set() when the last copy of the returned tensor dies.
tensor packed_view(const tensor& buf, dtype t, std::vector<int64_t> shape, bool track, int64_t n, int64_t k) {
    tensor v = buf;
    v.type = t, v.shape = std::move(shape);
    if (track) {
        const void* key = buf.data;
        {
            std::lock_guard<std::mutex> lock(packed_mu);
            packed_set()[key] = {n, k};
        }
        std::shared_ptr<void> keep = buf.owner;
        v.owner = std::shared_ptr<void>(buf.data, [keep, key](void*) mutable {
            std::lock_guard<std::mutex> lock(packed_mu);
            packed_set().erase(key);
            keep.reset();
        });
    }
    return v;
}

}  // namespace

linear_weight matmul_nvfp4_w4a16_sm80_prepare(backend& be, const linear_weight& host) {
    TETRA_CHECK(host.kind == linear_kind::NVFP4 && host.codes.device == device_kind::CPU &&
                    host.scales.device == device_kind::CPU,
                "matmul_nvfp4_w4a16_sm80: prepare expects a host NVFP4 weight");
    w4a16_sm80_dims d = w4a16_sm80_dims_of(host.n_out, host.n_in);
    TETRA_CHECK(host.codes.nbytes() == size_t(host.n_out * host.n_in / 2) &&
                    host.scales.nbytes() == size_t(host.n_out * host.n_in / 16),
                "matmul_nvfp4_w4a16_sm80: weight [%lld, %lld]: codes %s / scales %s do not match [n, k/2] / [n, k/16]",
                (long long)host.n_out, (long long)host.n_in, host.codes.shape_str().c_str(),
                host.scales.shape_str().c_str());
    std::vector<uint8_t> pc(d.codes_bytes), ps(d.scales_bytes);
    w4a16_sm80_pack(host.codes.ptr<uint8_t>(), static_cast<const uint8_t*>(host.scales.data), host.n_out,
                    host.n_in, pc.data(), ps.data());
    tensor dc = be.upload(tensor::view(dtype::U8, {int64_t(pc.size())}, pc.data()));
    tensor ds = be.upload(tensor::view(dtype::U8, {int64_t(ps.size())}, ps.data()));
    be.synchronize();  // the host buffers die here
    linear_weight w = host;
    w.codes = packed_view(dc, dtype::U8, {host.n_out, host.n_in / 2}, true, host.n_out, host.n_in);
    w.scales = packed_view(ds, dtype::E4M3, {host.n_out, host.n_in / 16}, false, 0, 0);
    return w;
}

std::string w4a16_sm80_weight_why_not(const linear_weight& w) {
    if (w.kind != linear_kind::NVFP4) return "weight is not NVFP4";
    std::lock_guard<std::mutex> lock(packed_mu);
    auto it = packed_set().find(w.codes.data);
    if (it == packed_set().end() || it->second != std::make_pair(w.n_out, w.n_in))
        return "weight is not in the sm80 packed layout (prepare_linear did not re-lay it)";
    return "";
}

namespace {

// Split-K counters must stay zero between launches, so they live outside the shared scratch.
int* counters_for(cudaStream_t s, size_t count) { return static_cast<int*>(zeroed_buffer(s, count * sizeof(int), 0)); }

std::string accepts_w4a16_sm80(const matmul_args& a) {
    if (a.x.type != dtype::BF16 || a.out.type != dtype::BF16) return "needs bf16 x and out";
    std::string why = w4a16_sm80_weight_why_not(*a.w);
    if (!why.empty()) return why;
    if (a.n > INT32_MAX / 2 || a.k > INT32_MAX / 2 || a.m > INT32_MAX / 2) return "shape too large for int indexing";
    return "";
}

// ws (sizes from w4a16_sm80_workspace_need or a decode plan) with its buffers: partial sums,
// dequant tiles and cuBLASLt workspace in the backend's scratch (256-B aligned pieces), split-K
// counters in the stream's zeroed buffer.
w4a16_sm80_workspace bind_workspace(backend& be, cudaStream_t s, w4a16_sm80_workspace ws) {
    const size_t part = (ws.partial_bytes + 255) / 256 * 256, deq = (ws.dequant_bytes + 255) / 256 * 256;
    char* base = static_cast<char*>(scratch(be, std::max<size_t>(1, part + deq + ws.cublas_bytes)));
    ws.partial = base, ws.dequant = base + part, ws.cublas = base + part + deq;
    ws.counters = ws.counter_count ? counters_for(s, ws.counter_count) : nullptr;
    return ws;
}

w4a16_sm80_weight device_weight(const linear_weight& w, int64_t n, int64_t k) {
    return w4a16_sm80_weight{w.codes.data, w.scales.data, n, k, w.scale_global};
}

void launch_w4a16_sm80(backend& be, const matmul_args& a) {
    cudaStream_t s = stream_of(be);
    const int sms = be.device().sm_count;
    const w4a16_sm80_workspace ws = bind_workspace(be, s, w4a16_sm80_workspace_need(a.m, a.n, a.k, sms));
    w4a16_small_config cfg;
    cfg.pdl = pdl_enabled(be) ? 1 : 0;
    matmul_nvfp4_w4a16_sm80_launch(a.x.data, a.m, device_weight(*a.w, a.n, a.k), a.out.data, ws, sms, s, cfg);
}

// matmul_silu on the small-M kernel (version 1 with the gate/up pairing, silu in the epilogue):
// W4A16 on the packed stacked weight, m ≤ 16, n_ff a multiple of 16 (the up half starts on a tile).
// What every fused matmul_silu form on the packed weight needs: W4A16, the form's own conditions on
// the stacked matmul (`form`: its plain kernel's accepts() and m range), n_ff a multiple of 16 (the
// up half starts on a tile), a bf16 out.
std::string accepts_silu_packed(const matmul_silu_args& a, std::string (*form)(const matmul_silu_args&)) {
    if (a.mode != matmul_mode::W4A16) return std::string("mode ") + matmul_mode_name(a.mode) + " (fused: W4A16 only)";
    std::string why = form(a);
    if (!why.empty()) return why;
    if (a.n_ff % 16 != 0) return "n_ff = " + std::to_string(a.n_ff) + " is not a multiple of 16";
    if (a.out.type != dtype::BF16) return "needs a bf16 out";
    return "";
}

std::string accepts_silu_w4a16_sm80(const matmul_silu_args& a) {
    return accepts_silu_packed(a, [](const matmul_silu_args& b) -> std::string {
        std::string why = accepts_w4a16_sm80(b.mm);
        if (!why.empty()) return why;
        if (b.mm.m > W4A16_SILU_M_MAX)
            return "m = " + std::to_string(b.mm.m) + " > " + std::to_string(W4A16_SILU_M_MAX) +
                   " (the two-step kernel: on an H100 the fused form was slower at m = 64)";
        return "";
    });
}

void launch_silu_w4a16_sm80(backend& be, const matmul_silu_args& a) {
    cudaStream_t s = stream_of(be);
    const int sms = be.device().sm_count;
    const w4a16_sm80_workspace ws = bind_workspace(be, s, w4a16_sm80_workspace_need(a.mm.m, a.mm.n, a.mm.k, sms));
    w4a16_small_config cfg;
    cfg.version = 1, cfg.silu_n_ff = a.n_ff;
    cfg.pdl = pdl_enabled(be) ? 1 : 0;
    matmul_nvfp4_w4a16_sm80_small_launch(a.mm.x.data, a.mm.m, device_weight(*a.mm.w, a.mm.n, a.mm.k), a.out.data,
                                         ws, sms, s, cfg);
}

// The decode kernel (matmul_nvfp4_w4a16_gemv_sm80.cu) on the same prepared weight: m ≤ 8 and x
// small enough to stage in shared memory.
std::string accepts_w4a16_gemv(const matmul_args& a) {
    if (!w4a16_gemv_fits(a.m, a.k))
        return "x [" + std::to_string(a.m) + ", " + std::to_string(a.k) + "]: the decode kernel takes m ≤ " +
               std::to_string(W4A16_GEMV_M_MAX) + " rows of ≤ " + std::to_string(W4A16_GEMV_X_SMEM_MAX) +
               " bytes together (the sm80 kernel takes it)";
    std::string why = accepts_w4a16_sm80(a);
    if (!why.empty()) return why;
    if ((a.n + 15) / 16 * ((a.k + 63) / 64) >= (int64_t(1) << 30)) return "weight too large for the decode kernel";
    const int64_t smem = w4a16_gemv_smem(a.m, a.k), limit = smem_optin_here();  // no static __shared__
    if (smem > limit)
        return "x [" + std::to_string(a.m) + ", " + std::to_string(a.k) + "] and the rings need " + std::to_string(smem) +
               " B of shared memory per CTA, the device allows " + std::to_string(limit);
    return "";
}

void launch_w4a16_gemv(backend& be, const matmul_args& a) {
    cudaStream_t s = stream_of(be);
    const int sms = be.device().sm_count;
    const w4a16_gemv_plan pl = w4a16_gemv_plan_of(a.n, a.k, sms);
    w4a16_sm80_workspace need;
    need.partial_bytes = pl.partial_bytes, need.counter_count = pl.counter_count;
    matmul_nvfp4_w4a16_gemv_launch(a.x.data, a.m, device_weight(*a.w, a.n, a.k), a.out.data, bind_workspace(be, s, need),
                                   sms, s);
}

// The sweep decode kernel (matmul_nvfp4_w4a16_sweep_sm80.cu) on the same prepared weight: every m it
// takes (≤ W4A16_SWEEP_M_MAX; above 8 only for n ≤ W4A16_SWEEP_WIDE_N_MAX) where k ≤ 4096 (its default
// plan holds all of k in one CTA) — it measured faster than the sm80 kernel there on an H100
// (docs/perf.md, sessions 18 and 20); the sm80 kernel keeps the rest. The plan's own check
// (w4a16_sweep_why_not) refuses larger m, and plans the device's shared memory cannot hold (the plan
// first reads x through L1 there: 99 KB devices at m = 3–4 on k = 4096).
std::string accepts_w4a16_sweep(const matmul_args& a) {
    std::string why = accepts_w4a16_sm80(a);
    if (!why.empty()) return why;
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(a.n, a.k);
    if (d.k_groups > W4A16_SWEEP_K_GROUPS_MAX)
        return "k = " + std::to_string(a.k) + " > " + std::to_string(W4A16_SWEEP_K_GROUPS_MAX * w4a16::GROUP_K) +
               ": a CTA of the sweep kernel holds all of k (split plans measured slower); the sm80 kernel takes it";
    if (a.m > 8 && a.n > W4A16_SWEEP_WIDE_N_MAX)
        return "m = " + std::to_string(a.m) + " > 8 on n = " + std::to_string(a.n) + " > " +
               std::to_string(W4A16_SWEEP_WIDE_N_MAX) + ": every CTA re-reads x (slower than the sm80 kernel)";
    w4a16_sweep_config cfg;
    cfg.smem_limit = w4a16_sweep_smem_limit_here();
    return w4a16_sweep_why_not(w4a16_sweep_plan_of(a.n, a.k, a.m, cfg), a.m, cfg.smem_limit);
}

void launch_w4a16_sweep(backend& be, const matmul_args& a) {
    cudaStream_t s = stream_of(be);
    w4a16_sweep_config cfg;
    cfg.pdl = pdl_enabled(be) ? 1 : 0;
    cfg.smem_limit = w4a16_sweep_smem_limit_here();
    const w4a16_sweep_plan pl = w4a16_sweep_plan_of(a.n, a.k, a.m, cfg);
    w4a16_sm80_workspace need;
    need.partial_bytes = pl.partial_bytes, need.counter_count = pl.counter_count;
    matmul_nvfp4_w4a16_sweep_launch(a.x.data, a.m, device_weight(*a.w, a.n, a.k), a.out.data,
                                    bind_workspace(be, s, need), s, cfg);
}

// matmul_silu on the sweep kernel: where the plain sweep kernel takes the stacked weight, with a gate
// tile and its up tile per CTA (the plan's own check). Faster than the sm80 fused kernel alone; in the
// decode step once the sm80 down kernel that follows it could no longer land two CTAs on an SM
// (docs/perf.md, session 19).
std::string accepts_silu_w4a16_sweep(const matmul_silu_args& a) {
    return accepts_silu_packed(a, [](const matmul_silu_args& b) -> std::string {
        std::string why = accepts_w4a16_sweep(b.mm);
        if (!why.empty()) return why;
        w4a16_sweep_config cfg;
        cfg.silu_n_ff = b.n_ff;
        cfg.smem_limit = w4a16_sweep_smem_limit_here();
        return w4a16_sweep_why_not(w4a16_sweep_plan_of(b.mm.n, b.mm.k, b.mm.m, cfg), b.mm.m, cfg.smem_limit);
    });
}

void launch_silu_w4a16_sweep(backend& be, const matmul_silu_args& a) {
    w4a16_sweep_config cfg;
    cfg.pdl = pdl_enabled(be) ? 1 : 0;
    cfg.silu_n_ff = a.n_ff;
    cfg.smem_limit = w4a16_sweep_smem_limit_here();
    matmul_nvfp4_w4a16_sweep_launch(a.mm.x.data, a.mm.m, device_weight(*a.mm.w, a.mm.n, a.mm.k), a.out.data, {},
                                    stream_of(be), cfg);
}

// The fused large-M kernel (matmul_nvfp4_w4a16_wgmma_sm90.cu) where it measured faster than
// dequant + cuBLASLt on an H100 (docs/perf.md, session 15): 64 < m ≤ 2048; at m = 4096 the dequant
// is a small share and cuBLAS's GEMM is faster. (The launcher picks its token tile per shape.)
constexpr int64_t W4A16_WGMMA_M_MAX = 2048;

std::string accepts_w4a16_wgmma(const matmul_args& a) {
    std::string why = accepts_w4a16_sm80(a);
    if (!why.empty()) return why;
    if (a.m <= W4A16_SM80_SMALL_M_MAX)
        return "m = " + std::to_string(a.m) + " ≤ " + std::to_string(W4A16_SM80_SMALL_M_MAX) + ": the small-M kernels";
    if (a.m > W4A16_WGMMA_M_MAX)
        return "m = " + std::to_string(a.m) + " > " + std::to_string(W4A16_WGMMA_M_MAX) +
               ": dequant + cuBLASLt measured faster (docs/perf.md)";
    return "";
}

// The fused kernels' workspace: x of m rows in the packed k order.
w4a16_sm80_workspace bind_wgmma_workspace(backend& be, cudaStream_t s, int64_t m, int64_t k) {
    w4a16_sm80_workspace need;
    need.dequant_bytes = w4a16_wgmma_workspace_bytes(m, k);
    return bind_workspace(be, s, need);
}

void launch_w4a16_wgmma(backend& be, const matmul_args& a) {
    cudaStream_t s = stream_of(be);
    const w4a16_sm80_workspace ws = bind_wgmma_workspace(be, s, a.m, a.k);
    matmul_nvfp4_w4a16_wgmma_launch(a.x.data, a.m, device_weight(*a.w, a.n, a.k), a.out.data, a.n, ws.dequant,
                                    ws.dequant_bytes, s);
}

// matmul_silu on the fused large-M kernel: the plain kernel's conditions and m range.
std::string accepts_silu_w4a16_wgmma(const matmul_silu_args& a) {
    return accepts_silu_packed(a, [](const matmul_silu_args& b) { return accepts_w4a16_wgmma(b.mm); });
}

void launch_silu_w4a16_wgmma(backend& be, const matmul_silu_args& a) {
    cudaStream_t s = stream_of(be);
    const w4a16_sm80_workspace ws = bind_wgmma_workspace(be, s, a.mm.m, a.mm.k);
    matmul_silu_nvfp4_w4a16_wgmma_launch(a.mm.x.data, a.mm.m, device_weight(*a.mm.w, a.mm.n, a.mm.k), a.n_ff,
                                         a.out.data, ws.dequant, ws.dequant_bytes, s);
}

// What every kernel on the packed layout needs: sm_80+, bf16 activations, 16-byte aligned operands.
kernel_req packed_req() {
    kernel_req req = cuda_req(80, {dtype::BF16});
    req.align = 16;
    return req;
}

}  // namespace

void register_matmul_nvfp4_w4a16_sm80(kernel_registry& r) {
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "matmul_nvfp4_w4a16_sm80", packed_req(), 10,
                                   accepts_w4a16_sm80, launch_w4a16_sm80));
}

// Priority 12, above the sm80 entry, where the image has wgmma (exactly sm_90a) and accepts() says
// the shape is one it measured faster on.
void register_matmul_nvfp4_w4a16_wgmma_sm90(kernel_registry& r) {
    kernel_req req = packed_req();
    req.features = FEAT_WGMMA;  // only an sm_90a image on an sm_90 device has it
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "matmul_nvfp4_w4a16_wgmma_sm90", req, 12, accepts_w4a16_wgmma,
                                   launch_w4a16_wgmma));
    r.add(make_kernel<matmul_silu_args>("matmul_silu", "matmul_silu_nvfp4_w4a16_wgmma_sm90", req, 12,
                                        accepts_silu_w4a16_wgmma, launch_silu_w4a16_wgmma));
}

void register_matmul_silu_sm80(kernel_registry& r) {
    r.add(make_kernel<matmul_silu_args>("matmul_silu", "matmul_silu_nvfp4_w4a16_sm80", packed_req(), 10,
                                        accepts_silu_w4a16_sm80, launch_silu_w4a16_sm80));
    // any mode, any shape: the CPU oracle's sequence on this backend's kernels
    r.add(make_kernel<matmul_silu_args>("matmul_silu", "matmul_silu_two_step_cuda",
                                        cuda_req(0, {dtype::F32, dtype::BF16, dtype::F16}), 0, nullptr,
                                        matmul_silu_two_step));
}

// Priority 15, above the sm80 (10) and wgmma (12) entries: accepts() holds the measured range.
void register_matmul_nvfp4_w4a16_sweep_sm80(kernel_registry& r) {
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "matmul_nvfp4_w4a16_sweep_sm80", packed_req(), 15,
                                   accepts_w4a16_sweep, launch_w4a16_sweep));
    r.add(make_kernel<matmul_silu_args>("matmul_silu", "matmul_silu_nvfp4_w4a16_sweep_sm80", packed_req(), 15,
                                        accepts_silu_w4a16_sweep, launch_silu_w4a16_sweep));
}

// Priority 5, below the sm80 kernel: on H100 it measured slower at every decode shape (docs/perf.md,
// 2026-11-22), so it runs only when forced (TETRA_KERNEL=matmul_nvfp4_w4a16:matmul_nvfp4_w4a16_gemv_sm80).
void register_matmul_nvfp4_w4a16_gemv_sm80(kernel_registry& r) {
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "matmul_nvfp4_w4a16_gemv_sm80", packed_req(), 5,
                                   accepts_w4a16_gemv, launch_w4a16_gemv));
}

}  // namespace cuda
}  // namespace tetra

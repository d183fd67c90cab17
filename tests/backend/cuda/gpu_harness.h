// Helpers of the GPU test_backend_ops: the CUDA backend under test, host ↔ device copies, guarded
// device outputs (64 sentinel bytes 0xA5 on each side, NaN/0x7F payload, checked after download),
// and running an op once per CUDA kernel entry of the op (forced through TETRA_KERNEL): kernels
// the device cannot run must refuse when forced; the rest must run and are counted.
#pragma once
#include "backend/ops_harness.h"

namespace tetra_test {

inline backend& gpu_be() {
    static std::unique_ptr<backend> be = make_cuda_backend(0);
    return *be;
}

inline tensor to_gpu(const tensor& host) { return gpu_be().upload(host); }

inline tensor to_host(const tensor& dev) {
    tensor h = tensor::alloc(dev.type, dev.shape);
    gpu_be().download(dev, h.data);
    return h;
}

// A device output with guards; result() downloads it and checks the guards.
struct gpu_guarded {
    guarded host;  // the pattern, and after result() the downloaded bytes
    tensor buf, view;
    tensor result(bool* intact) {
        gpu_be().download(buf, host.buf.data);
        *intact = host.intact();
        return host.view;
    }
};

inline gpu_guarded make_gpu_guarded(dtype t, std::vector<int64_t> shape) {
    gpu_guarded g;
    g.host = make_guarded(t, shape);
    g.buf = to_gpu(g.host.buf);
    g.view = tensor::view(t, std::move(shape), g.buf.ptr<uint8_t>() + guarded::k_guard);
    g.view.device = device_kind::CUDA;
    g.view.owner = g.buf.owner;
    return g;
}

// A random host linear [n, k]: NVFP4 (codes uniform, e4m3 scales in [2^-4, 2^1), `scale_global`)
// or dense bf16 N(0, 1).
inline linear_weight random_linear(rng& r, int64_t n, int64_t k, bool nvfp4, float scale_global = 1.0f / 64) {
    linear_weight w;
    w.n_out = n, w.n_in = k;
    if (!nvfp4) {
        w.dense = random_tensor(r, dtype::BF16, {n, k});
        return w;
    }
    w.kind = linear_kind::NVFP4, w.scale_global = scale_global;
    w.codes = tensor::alloc(dtype::U8, {n, k / 2}), w.scales = tensor::alloc(dtype::E4M3, {n, k / 16});
    uint8_t *c = w.codes.ptr<uint8_t>(), *s = static_cast<uint8_t*>(w.scales.data);
    for (int64_t i = 0; i < n * k / 2; ++i) c[i] = uint8_t(r.randint(0, 255));
    for (int64_t i = 0; i < n * k / 16; ++i) s[i] = uint8_t(r.randint(0x20, 0x50));
    return w;
}

inline std::vector<const kernel_entry*> cuda_kernels(const std::string& op) {
    std::vector<const kernel_entry*> out;
    for (const kernel_entry* k : kernel_registry::instance().kernels(op))
        if (k->req.device == device_kind::CUDA) out.push_back(k);
    return out;
}

// Runs `run` once per CUDA kernel of `op`, forced. A kernel that cannot run on this device or
// does not handle `act` must refuse with an error; a kernel whose accepts() rejects the case is
// counted in `declined` (the error must say why); the rest run and are counted in `ran`.
inline void for_each_gpu_kernel(const std::string& op, dtype act, std::map<std::string, int>& ran,
                                std::map<std::string, int>& declined,
                                const std::function<void(const kernel_entry&)>& run) {
    for (const kernel_entry* k : cuda_kernels(op)) {
        force_kernel fk(op, k->name);
        std::string why = kernel_rejection(*k, gpu_be().device(), nullptr);
        if (!why.empty() || !handles(*k, act)) {
            try {
                run(*k);
                ADD_FAILURE() << k->name << " ran although it cannot (" << why << ", act " << dtype_name(act) << ")";
            } catch (const error& e) {
                EXPECT_NE(std::string(e.what()).find("cannot run"), std::string::npos) << e.what();
            }
            continue;
        }
        try {
            run(*k);
            ++ran[k->name];
        } catch (const error& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find("TETRA_KERNEL forces " + k->name), std::string::npos) << k->name << ": " << msg;
            ++declined[k->name];
        }
    }
}

// Every CUDA kernel of `op` that this device can run ran at least `min_cases` cases.
inline void expect_gpu_ran(const std::string& op, const std::map<std::string, int>& ran, int min_cases) {
    for (const kernel_entry* k : cuda_kernels(op)) {
        if (!kernel_rejection(*k, gpu_be().device(), nullptr).empty()) continue;
        auto it = ran.find(k->name);
        EXPECT_TRUE(it != ran.end() && it->second >= min_cases)
            << k->name << " ran " << (it == ran.end() ? 0 : it->second) << " cases; expected >= " << min_cases;
    }
}

}  // namespace tetra_test

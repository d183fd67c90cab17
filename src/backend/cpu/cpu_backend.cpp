// The CPU backend: host memory (upload is zero-copy), synchronous ops, and the registration list
// of the CPU op tables — one line per op file; kernels are added inside their op's file.
#include <cstdio>
#include <cstring>

#include "backend/backend.h"
#include "backend/moe.h"
#include "backend/sampling.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"

namespace tetra {

namespace cpu {

void register_quantize_nvfp4_act(kernel_registry& r);  // quantize_nvfp4_act_cpu.cpp

void register_kernels(kernel_registry& r) {
    register_get_rows(r);
    register_rms_norm(r);
    register_add_rms_norm(r);
    register_rope(r);
    register_kv_store(r);
    register_qkv_rope_store(r);
    register_decode_layers(r);
    register_attention(r);
    register_matmul_dense(r);
    register_matmul_nvfp4_w4a16(r);
    register_matmul_nvfp4_w4a4(r);
    register_silu_mul(r);
    register_matmul_silu(r);
    register_add(r);
    register_argmax(r);
    register_cast(r);
    register_quantize_nvfp4_act(r);
    register_moe_kernels(r);  // moe_register.cpp
    register_sampling_kernels(r);  // sample_rows_cpu.cpp, sample_guard_stats_cpu.cpp
}

namespace {

class cpu_backend final : public backend {
  public:
    cpu_backend() : backend(cpu_device_info()) {}

    tensor alloc(dtype t, std::vector<int64_t> shape) override { return tensor::alloc(t, std::move(shape)); }

    tensor upload(const tensor& host) override {
        TETRA_CHECK(host.device == device_kind::CPU, "cpu backend: upload expects a host tensor; got a cuda tensor %s",
                    host.shape_str().c_str());
        return host;
    }

    void download(const tensor& dev, void* host) override {
        TETRA_CHECK(dev.device == device_kind::CPU, "cpu backend: download of a cuda tensor %s",
                    dev.shape_str().c_str());
        if (dev.nbytes()) std::memmove(host, dev.data, dev.nbytes());
    }

    void copy(const tensor& src, const tensor& dst) override {
        TETRA_CHECK(src.device == device_kind::CPU && dst.device == device_kind::CPU,
                    "cpu backend: copy between non-host tensors");
        TETRA_CHECK(src.type == dst.type && src.numel() == dst.numel(),
                    "cpu backend: copy %s %s → %s %s: dtype and element count must match", dtype_name(src.type),
                    src.shape_str().c_str(), dtype_name(dst.type), dst.shape_str().c_str());
        if (src.nbytes()) std::memmove(dst.data, src.data, src.nbytes());
    }

    void synchronize() override {}

    void copy_from_host(const void* host, const tensor& dst) override {
        TETRA_CHECK(dst.device == device_kind::CPU, "cpu backend: copy_from_host into a cuda tensor %s",
                    dst.shape_str().c_str());
        if (dst.nbytes()) std::memmove(dst.data, host, dst.nbytes());
    }

    // /proc/meminfo MemAvailable / MemTotal (kB); 0 when unreadable (non-Linux).
    void memory_info(int64_t* free_bytes, int64_t* total_bytes) override {
        *free_bytes = *total_bytes = 0;
        std::FILE* f = std::fopen("/proc/meminfo", "r");
        if (!f) return;
        char key[64];
        long long kb = 0;
        while (std::fscanf(f, "%63s %lld kB", key, &kb) == 2) {
            if (std::strcmp(key, "MemTotal:") == 0) *total_bytes = int64_t(kb) * 1024;
            if (std::strcmp(key, "MemAvailable:") == 0) *free_bytes = int64_t(kb) * 1024;
        }
        std::fclose(f);
    }

    linear_weight prepare_linear(const linear_weight& host) override { return host; }
};

}  // namespace
}  // namespace cpu

std::unique_ptr<backend> make_cpu_backend() { return std::make_unique<cpu::cpu_backend>(); }

}  // namespace tetra

// The CUDA backend: cudaMalloc'd tensors (device_kind::CUDA), one non-blocking stream per backend,
// uploads/downloads through that stream, a grow-only scratch buffer, and the registration list of
// the CUDA op tables (one line per op file). device_info comes from cudaGetDeviceProperties and
// the compiled image list; a device that none of the compiled images runs on is refused here.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/env.h"
#include "backend/cuda/fault_injection.h"
#include "backend/cuda/matmul_launch.h"
#include "core/dtype.h"
#include "core/error.h"

namespace tetra {
namespace cuda {

void register_kernels(kernel_registry& r) {
    register_get_rows(r);
    register_rms_norm(r);
    register_add_rms_norm(r);
    register_rope(r);
    register_kv_store(r);
    register_qkv_rope_store(r);
    register_decode_layers(r);
    register_attention_prefill(r);
    register_attention_prefill_fa2(r);
    register_attention_decode(r);
    register_attention_decode_v2(r);
    register_attention_decode_mma(r);
    register_attention_decode_cluster(r);
    register_silu_mul(r);
    register_add(r);
    register_argmax(r);
    register_cast(r);
    register_quantize_nvfp4_act_sm80(r);
    register_quantize_nvfp4_act_sm120a(r);
    register_matmul(r);
    register_moe_kernels_cuda(r);
    register_sampling_kernels_cuda(r);
#ifdef TETRA_FAULT_INJECTION
    register_faulty_kernels(r);  // test-only wrong kernels, priority -100 (fault_injection_sm80.cu)
#endif
}

namespace {

// Device memory owned by a shared_ptr; freed on the device it came from.
std::shared_ptr<void> device_alloc(int device, size_t bytes) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    TETRA_CHECK(e == cudaSuccess, "cuda backend: cudaMalloc of %zu bytes on device %d failed: %s", bytes, device,
                cudaGetErrorString(e));
    return std::shared_ptr<void>(p, [device](void* q) {
        int cur = 0;
        if (cudaGetDevice(&cur) == cudaSuccess && cur != device) cudaSetDevice(device);
        cudaFree(q);  // errors at process exit (context gone) are ignored on purpose
        if (cur != device) cudaSetDevice(cur);
    });
}

device_info query_device(int device) {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    TETRA_CHECK(device >= 0 && device < count, "cuda backend: device index %d out of range (%d CUDA devices)", device,
                count);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    device_info d;
    d.kind = device_kind::CUDA;
    d.name = prop.name;
    d.cc = prop.major * 10 + prop.minor;
    d.compiled = parse_compiled_targets(compiled_targets_list());
    d.features = cuda_features(d.cc, d.compiled);
    d.smem_per_block = int64_t(prop.sharedMemPerBlockOptin);
    d.sm_count = prop.multiProcessorCount;
    d.memory_bytes = int64_t(prop.totalGlobalMem);
    compiled_target img;
    TETRA_CHECK(select_image(d.compiled, d.cc, &img),
                "cuda backend: device %d (%s, sm_%d) can run none of the compiled images [%s]; rebuild with "
                "-DTETRA_CUDA_TARGETS including %d (or its family/PTX)",
                device, d.name.c_str(), d.cc, compiled_targets_str(d.compiled).c_str(), d.cc);
    return d;
}

class cuda_backend final : public backend {
  public:
    explicit cuda_backend(int device) : backend(query_device(device)), device_(device) {
        CUDA_CHECK(cudaSetDevice(device_));
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
    ~cuda_backend() override {
        cudaStreamSynchronize(stream_);
        scratch_.reset();
        if (ev0_) cudaEventDestroy(ev0_), cudaEventDestroy(ev1_);
        cudaStreamDestroy(stream_);
    }

    cudaStream_t stream() const { return stream_; }

    tensor alloc(dtype t, std::vector<int64_t> shape) override {
        tensor x;
        x.type = t;
        x.shape = std::move(shape);
        for (int64_t d : x.shape)
            TETRA_CHECK(d >= 0, "cuda backend: alloc with a negative dimension in %s", x.shape_str().c_str());
        x.device = device_kind::CUDA;
        CUDA_CHECK(cudaSetDevice(device_));
        x.owner = device_alloc(device_, x.nbytes());
        x.data = x.owner.get();
        CUDA_CHECK(cudaMemsetAsync(x.data, 0, x.nbytes(), stream_));
        return x;
    }

    // Pageable source: cudaMemcpyAsync returns once the bytes are staged, so the host tensor may
    // be freed right after; the copy is ordered on this backend's stream.
    tensor upload(const tensor& host) override {
        TETRA_CHECK(host.device == device_kind::CPU, "cuda backend: upload expects a host tensor; got a cuda tensor %s",
                    host.shape_str().c_str());
        tensor d = alloc(host.type, host.shape);
        if (d.nbytes()) CUDA_CHECK(cudaMemcpyAsync(d.data, host.data, d.nbytes(), cudaMemcpyHostToDevice, stream_));
        return d;
    }

    void download(const tensor& dev, void* host) override {
        TETRA_CHECK(dev.device == device_kind::CUDA, "cuda backend: download expects a cuda tensor; got a host tensor %s",
                    dev.shape_str().c_str());
        if (dev.nbytes()) CUDA_CHECK(cudaMemcpyAsync(host, dev.data, dev.nbytes(), cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    void copy(const tensor& src, const tensor& dst) override {
        TETRA_CHECK(src.device == device_kind::CUDA && dst.device == device_kind::CUDA,
                    "cuda backend: copy needs two cuda tensors");
        TETRA_CHECK(src.type == dst.type && src.numel() == dst.numel(),
                    "cuda backend: copy %s %s → %s %s: dtype and element count must match", dtype_name(src.type),
                    src.shape_str().c_str(), dtype_name(dst.type), dst.shape_str().c_str());
        if (src.nbytes())
            CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    }

    void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

    void copy_from_host(const void* host, const tensor& dst) override {
        TETRA_CHECK(dst.device == device_kind::CUDA, "cuda backend: copy_from_host into a host tensor %s",
                    dst.shape_str().c_str());
        if (dst.nbytes()) CUDA_CHECK(cudaMemcpyAsync(dst.data, host, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    }

    void memory_info(int64_t* free_bytes, int64_t* total_bytes) override {
        CUDA_CHECK(cudaSetDevice(device_));
        size_t f = 0, t = 0;
        CUDA_CHECK(cudaMemGetInfo(&f, &t));
        *free_bytes = int64_t(f), *total_bytes = int64_t(t);
    }

    // NVFP4 weights are re-laid for matmul_nvfp4_w4a16_sm80 (the CUDA NVFP4 kernels read that
    // layout); dense weights are uploaded as bf16 (the activation dtype of this backend).
    linear_weight prepare_linear(const linear_weight& host) override {
        if (host.kind == linear_kind::NVFP4 && host.codes.device == device_kind::CPU)
            return matmul_nvfp4_w4a16_sm80_prepare(*this, host);
        linear_weight w = host;
        if (!w.dense.empty() && w.dense.device == device_kind::CPU) {
            if (w.dense.type == dtype::F32 || w.dense.type == dtype::F16) {
                tensor b = tensor::alloc(dtype::BF16, w.dense.shape);
                cast_to_bf16_host(w.dense, b);
                w.dense = upload(b);
                synchronize();  // b dies here
            } else {
                w.dense = upload(w.dense);
            }
        }
        return w;
    }

    // Graphs are captured in relaxed mode (kernels set their smem attributes on first use) and
    // tagged with the scratch epoch: a scratch reallocation frees the memory a graph points at,
    // so replay_graph refuses a stale graph (the caller re-captures).
    bool supports_graphs() const override { return true; }
    std::shared_ptr<void> capture_graph(const std::function<void()>& fn) override {
        CUDA_CHECK(cudaSetDevice(device_));
        CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
        uint64_t epoch = scratch_epoch_;
        cudaGraph_t g = nullptr;
        try {
            fn();
        } catch (...) {
            cudaStreamEndCapture(stream_, &g);
            if (g) cudaGraphDestroy(g);
            throw;
        }
        CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
        TETRA_CHECK(epoch == scratch_epoch_, "cuda backend: scratch grew during graph capture (warm up first)");
        cudaGraphExec_t exec = nullptr;
        cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
        cudaGraphDestroy(g);
        CUDA_CHECK(e);
        auto* h = new graph_handle{exec, epoch};
        return std::shared_ptr<void>(h, [](void* p) {
            auto* gh = static_cast<graph_handle*>(p);
            cudaGraphExecDestroy(gh->exec);
            delete gh;
        });
    }

    double time_op(const std::function<void()>& fn) override {
        if (!ev0_) {
            CUDA_CHECK(cudaEventCreate(&ev0_));
            CUDA_CHECK(cudaEventCreate(&ev1_));
        }
        CUDA_CHECK(cudaEventRecord(ev0_, stream_));
        fn();
        CUDA_CHECK(cudaEventRecord(ev1_, stream_));
        CUDA_CHECK(cudaEventSynchronize(ev1_));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev0_, ev1_));
        return double(ms);
    }

    bool replay_graph(const std::shared_ptr<void>& graph) override {
        auto* gh = static_cast<graph_handle*>(graph.get());
        if (!gh || gh->epoch != scratch_epoch_) return false;
        CUDA_CHECK(cudaGraphLaunch(gh->exec, stream_));
        return true;
    }

    void* scratch(size_t bytes) {
        if (bytes > scratch_bytes_) {
            CUDA_CHECK(cudaStreamSynchronize(stream_));
            scratch_.reset();
            scratch_ = device_alloc(device_, bytes);
            scratch_bytes_ = bytes;
            ++scratch_epoch_;
        }
        return scratch_.get();
    }

  private:
    int device_ = 0;
    cudaStream_t stream_ = nullptr;
    std::shared_ptr<void> scratch_;
    size_t scratch_bytes_ = 0;
    uint64_t scratch_epoch_ = 0;
    cudaEvent_t ev0_ = nullptr, ev1_ = nullptr;
    struct graph_handle {
        cudaGraphExec_t exec;
        uint64_t epoch;
    };

    static void cast_to_bf16_host(const tensor& src, tensor& dst) {
        uint16_t* o = dst.ptr<uint16_t>();
        for (int64_t i = 0; i < src.numel(); ++i)
            o[i] = f32_to_bf16(src.type == dtype::F32 ? src.ptr<float>()[i] : f16_to_f32(src.ptr<uint16_t>()[i]));
    }
};

cuda_backend& as_cuda(backend& b) {
    TETRA_ASSERT(b.device().kind == device_kind::CUDA);
    return static_cast<cuda_backend&>(b);
}

}  // namespace

cudaStream_t stream_of(backend& b) { return as_cuda(b).stream(); }
void* scratch(backend& b, size_t bytes) { return as_cuda(b).scratch(bytes); }

void* zeroed_buffer(cudaStream_t s, size_t bytes, int key) {
    static std::mutex mu;
    static auto* bufs = new std::map<std::tuple<int, cudaStream_t, int>, std::pair<void*, size_t>>();
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    auto& b = (*bufs)[{dev, s, key}];
    if (b.second < bytes) {
        CUDA_CHECK(cudaStreamSynchronize(s));
        if (b.first) CUDA_CHECK(cudaFree(b.first));
        CUDA_CHECK(cudaMalloc(&b.first, bytes));
        CUDA_CHECK(cudaMemset(b.first, 0, bytes));
        b.second = bytes;
    }
    return b.first;
}
bool pdl_enabled(backend& b) {
    static const bool on = env_int("TETRA_PDL", 1) != 0;
    // the loaded image, not the device: an sm_80/89 image running on sm_90+ has no pdl_wait()
    return on && (b.device().features & FEAT_PDL) != 0;
}

}  // namespace cuda

std::unique_ptr<backend> make_cuda_backend(int device) { return std::make_unique<cuda::cuda_backend>(device); }

int cuda_device_count() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace tetra

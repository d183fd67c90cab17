// Decode-shaped matmul timing of the CPU kernels (not a test): SmolLM2-135M per-token linears
// (30 layers × q,k,v,o,gate,up,down NVFP4 W4A16 = 106 M MACs) and the bf16 lm_head (28.3 M MACs),
// M = 1, random weights; each kernel forced through TETRA_KERNEL; median of repeated runs.
// Build: g++ -O2 -std=c++17 -Isrc bench/bench_backend_matmul.cpp <build>/src/libtetra_{backend,nvfp4,core}.a -lpthread
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"

using namespace tetra;

struct lin { linear_weight w; std::vector<uint8_t> codes, scales; };

static lin make_nvfp4(std::mt19937& g, int64_t n, int64_t k) {
    lin l;
    l.codes.resize(size_t(n * k / 2)), l.scales.resize(size_t(n * k / 16));
    for (auto& c : l.codes) c = uint8_t(g());
    for (auto& s : l.scales) s = uint8_t(0x20 + g() % 0x40);
    l.w.kind = linear_kind::NVFP4, l.w.n_out = n, l.w.n_in = k, l.w.scale_global = 0.01f;
    l.w.codes = tensor::view(dtype::U8, {n, k / 2}, l.codes.data());
    l.w.scales = tensor::view(dtype::E4M3, {n, k / 16}, l.scales.data());
    return l;
}

static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

// Process CPU seconds: on a shared, oversubscribed machine wall time mostly measures waiting;
// CPU time / threads is what the kernel would take on idle cores.
static double cpu_now() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? std::atoi(argv[1]) : 15;
    auto be = make_cpu_backend();
    std::mt19937 g(1);
    const int64_t e = 576, ff = 1536, kv = 192, vocab = 49152;
    std::vector<lin> layer = {make_nvfp4(g, e, e), make_nvfp4(g, kv, e), make_nvfp4(g, kv, e), make_nvfp4(g, e, e),
                              make_nvfp4(g, ff, e), make_nvfp4(g, ff, e), make_nvfp4(g, e, ff)};
    std::vector<std::vector<lin>> layers;
    for (int il = 0; il < 30; ++il) {  // distinct weights per layer: realistic cache behaviour
        std::vector<lin> l;
        for (const auto& p : layer) l.push_back(make_nvfp4(g, p.w.n_out, p.w.n_in));
        layers.push_back(std::move(l));
    }
    linear_weight head;
    head.n_out = vocab, head.n_in = e, head.dense = tensor::alloc(dtype::BF16, {vocab, e});
    for (int64_t i = 0; i < head.dense.numel(); ++i) head.dense.ptr<uint16_t>()[i] = f32_to_bf16(float(int(g() % 200) - 100) / 1000);
    tensor x = tensor::alloc(dtype::F32, {1, ff}), out = tensor::alloc(dtype::F32, {1, vocab});
    for (int64_t i = 0; i < ff; ++i) x.ptr<float>()[i] = float(int(g() % 200) - 100) / 100;
    double macs_layers = 0;
    for (const auto& l : layer) macs_layers += double(l.w.n_out * l.w.n_in);
    macs_layers *= 30;
    double macs_head = double(vocab * e);
    std::printf("threads=%d  nvfp4 MACs/token=%.1f M  lm_head MACs/token=%.1f M\n", num_threads(), macs_layers / 1e6,
                macs_head / 1e6);
    for (const char* kname : {"matmul_nvfp4_w4a16_cpu", "matmul_nvfp4_w4a16_avx2"}) {
        setenv("TETRA_KERNEL", (std::string("matmul_nvfp4_w4a16:") + kname).c_str(), 1);
        std::vector<double> ts, cs;
        for (int r = 0; r < (std::string(kname).find("avx2") != std::string::npos ? reps : 3); ++r) {
            auto t0 = std::chrono::steady_clock::now();
            double c0 = cpu_now();
            for (const auto& l : layers)
                for (const auto& p : l) {
                    tensor xv = tensor::view(dtype::F32, {1, p.w.n_in}, x.data);
                    tensor ov = tensor::view(dtype::F32, {1, p.w.n_out}, out.data);
                    be->matmul(xv, p.w, ov);
                }
            ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            cs.push_back((cpu_now() - c0) / num_threads());
        }
        double t = median(ts), c = median(cs);
        std::printf("%-26s 30 layers: wall %7.2f ms (%6.2f GFLOP/s)  cpu/thread %7.2f ms (%6.2f GFLOP/s, %5.2f GB/s)\n",
                    kname, t * 1e3, 2 * macs_layers / t / 1e9, c * 1e3, 2 * macs_layers / c / 1e9,
                    macs_layers * 0.5625 / c / 1e9);
    }
    for (const char* kname : {"matmul_dense_cpu", "matmul_dense_avx2"}) {
        setenv("TETRA_KERNEL", (std::string("matmul_dense:") + kname).c_str(), 1);
        std::vector<double> ts, cs;
        tensor xv = tensor::view(dtype::F32, {1, e}, x.data);
        for (int r = 0; r < (std::string(kname).find("avx2") != std::string::npos ? reps : 3); ++r) {
            auto t0 = std::chrono::steady_clock::now();
            double c0 = cpu_now();
            be->matmul(xv, head, out);
            ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            cs.push_back((cpu_now() - c0) / num_threads());
        }
        double t = median(ts), c = median(cs);
        std::printf("%-26s lm_head:   wall %7.2f ms (%6.2f GFLOP/s)  cpu/thread %7.2f ms (%6.2f GFLOP/s, %5.2f GB/s)\n",
                    kname, t * 1e3, 2 * macs_head / t / 1e9, c * 1e3, 2 * macs_head / c / 1e9, macs_head * 2 / c / 1e9);
    }
    unsetenv("TETRA_KERNEL");
    return 0;
}

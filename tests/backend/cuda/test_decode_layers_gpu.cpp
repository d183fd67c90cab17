// decode_layers on the GPU: the persistent kernel (decode_layers_persistent_sm90) against the CPU
// oracle (the op's composition on the CPU backend, bf16 activations) and against the same
// composition on the CUDA kernels, on random stacks shaped like Llama, Qwen3 (q/k norm) and SmolLM2
// (576-wide rows: padded 512-k groups; 3 q heads per kv head), from the first position (no history)
// to contexts with many splits per kv head and more attention items than CTAs. Checked: the
// residual and proj it leaves, the new k/v rows of every layer, every other cache row untouched,
// and the same bits on a repeated run. Tolerance: the persistent kernel's NMSE against the CPU at most
// 4× the CUDA composition's (≥ 1e-5): all three sides round every op's output to bf16 but sum in
// different orders (matmul k order, the norms' and the attention's reductions), so single roundings
// differ by an ulp and propagate; the composition's distance is what that costs on these shapes
// (measured: persistent ≤ 1.1× the composition's, 0 to 1.4e-4; printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/decode_layers_case.h"

using namespace tetra;
using namespace tetra_test;

namespace {

struct state {
    std::vector<double> residual, proj;
    std::vector<tensor> kc, vc;  // host copies
};

state read_state(backend& be, const decode_layers_args& a) {
    auto host = [&](const tensor& t) {
        tensor h = tensor::alloc(t.type, t.shape);
        be.download(t, h.data);
        return h;
    };
    state s;
    s.residual = to_double(host(a.residual)), s.proj = to_double(host(a.proj));
    for (const decode_layer_ref& L : a.layers) s.kc.push_back(host(L.k_cache)), s.vc.push_back(host(L.v_cache));
    return s;
}

double nmse(const std::vector<double>& got, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    return den > 0 ? num / den : num;
}

// Row `slot` of a cache [n_blocks, block_size, n_kv, hd] as doubles; the rest compared bit for bit.
std::vector<double> cache_row(const tensor& c, int64_t slot) {
    const int64_t row = c.dim(2) * c.dim(3);
    std::vector<double> all = to_double(c);
    return std::vector<double>(all.begin() + slot * row, all.begin() + (slot + 1) * row);
}
bool same_except(const tensor& a, const tensor& b, int64_t slot) {
    const size_t row = size_t(a.dim(2) * a.dim(3)) * 2, n = a.nbytes();
    const auto* x = static_cast<const uint8_t*>(a.data);
    const auto* y = static_cast<const uint8_t*>(b.data);
    return std::memcmp(x, y, size_t(slot) * row) == 0 &&
           std::memcmp(x + (slot + 1) * row, y + (slot + 1) * row, n - (slot + 1) * row) == 0;
}

double worst_nmse(const state& got, const state& ref, int64_t slot, const std::string& what) {
    double w = std::max(nmse(got.residual, ref.residual), nmse(got.proj, ref.proj));
    for (size_t il = 0; il < ref.kc.size(); ++il) {
        w = std::max(w, nmse(cache_row(got.kc[il], slot), cache_row(ref.kc[il], slot)));
        w = std::max(w, nmse(cache_row(got.vc[il], slot), cache_row(ref.vc[il], slot)));
        EXPECT_TRUE(same_except(got.kc[il], ref.kc[il], slot)) << what << ": layer " << il << " k rows but the new one";
        EXPECT_TRUE(same_except(got.vc[il], ref.vc[il], slot)) << what << ": layer " << il << " v rows but the new one";
    }
    return w;
}

void check_stack(const std::string& name, const stack_shape& s) {
    SCOPED_TRACE(name);
    const stack_host h = make_stack(s, 1234 + uint64_t(s.pos));
    const int64_t slot = h.slots.ptr<int32_t>()[0];
    std::unique_ptr<backend> cpu = make_cpu_backend();
    stack_side c = side_of(*cpu, h);
    cpu->decode_layers(c.a);  // the CPU kernel: the composition
    const state ref = read_state(*cpu, c.a);

    backend& be = gpu_be();
    stack_side g = side_of(be, h);
    force_kernel fk("decode_layers", "decode_layers_persistent_sm90");  // below the composition by priority
    ASSERT_TRUE(be.has_decode_layers(g.a)) << "the persistent kernel declined";
    be.decode_layers(g.a);
    const state got = read_state(be, g.a);

    stack_side g2 = side_of(be, h);  // a fresh copy: the same bits again
    be.decode_layers(g2.a);
    const state again = read_state(be, g2.a);
    EXPECT_EQ(got.residual, again.residual) << "a repeated run differs";
    EXPECT_EQ(got.proj, again.proj) << "a repeated run differs";
    for (size_t il = 0; il < got.kc.size(); ++il)
        EXPECT_TRUE(std::memcmp(got.kc[il].data, again.kc[il].data, got.kc[il].nbytes()) == 0 &&
                    std::memcmp(got.vc[il].data, again.vc[il].data, got.vc[il].nbytes()) == 0)
            << "layer " << il << ": a repeated run differs in the caches";

    stack_side g3 = side_of(be, h);  // the composition on the CUDA kernels (their registry choices)
    decode_layers_composed(be, g3.a);
    const state composed = read_state(be, g3.a);

    const double e_cpu = worst_nmse(got, ref, slot, "vs CPU");
    const double e_cuda = worst_nmse(got, composed, slot, "vs CUDA composition");
    const double e_base = worst_nmse(composed, ref, slot, "CUDA composition vs CPU");
    std::printf("[%s] worst NMSE: persistent vs CPU %.3g, vs CUDA composition %.3g; composition vs CPU %.3g\n",
                name.c_str(), e_cpu, e_cuda, e_base);
    EXPECT_LE(e_cpu, std::max(4 * e_base, 1e-5));
    EXPECT_LE(e_cuda, std::max(4 * e_base, 1e-5));
}

}  // namespace

// Llama-3-like: 4 q heads per kv head, head_dim 128, k of down not a multiple of 512.
TEST(decode_layers_gpu, llama_like_first_token) {
    check_stack("llama pos 0", {1024, 8, 2, 128, 2816, 3, false, 0, true});
}
TEST(decode_layers_gpu, llama_like_two_splits) {
    check_stack("llama pos 100", {1024, 8, 2, 128, 2816, 3, false, 100, false});
}
TEST(decode_layers_gpu, llama_like_many_splits) {
    check_stack("llama pos 1500", {1024, 8, 2, 128, 2816, 2, false, 1500, false});
}
// Qwen3-like: q/k norm, 2 q heads per kv head.
TEST(decode_layers_gpu, qwen3_like) { check_stack("qwen3 pos 37", {1024, 16, 8, 128, 3072, 3, true, 37, false}); }
// SmolLM2-like: 576-wide rows (two 512-k groups, the second padded), 3 q heads per kv head, head_dim 64.
TEST(decode_layers_gpu, smollm2_like) { check_stack("smollm2 pos 300", {576, 9, 3, 64, 1536, 3, false, 300, false}); }
// 8 q heads per kv head (the most it takes); 5120-wide rows (a second vector per thread in the norms)
// with f32 norm weights.
TEST(decode_layers_gpu, eight_q_heads_per_kv_head) {
    check_stack("g8 pos 77", {1024, 16, 2, 128, 2048, 2, false, 77, false});
}
TEST(decode_layers_gpu, wide_rows_f32_norms) {
    check_stack("wide pos 260", {5120, 16, 4, 128, 1024, 2, true, 260, false, 16, dtype::F32});
}
// More attention items than CTAs: 8 kv heads × 20 splits of 256 positions.
TEST(decode_layers_gpu, long_context_items_beyond_the_grid) {
    check_stack("long pos 5000", {512, 16, 8, 64, 1024, 2, true, 5000, false});
}
// What it does not take, it refuses with the reason (forced: an error naming it).
TEST(decode_layers_gpu, refuses_what_it_does_not_take) {
    const stack_host h = make_stack({512, 2, 1, 256, 512, 1, false, 3, false}, 3);
    backend& be = gpu_be();
    stack_side g = side_of(be, h);
    force_kernel fk("decode_layers", "decode_layers_persistent_sm90");
    try {
        be.decode_layers(g.a);
        ADD_FAILURE() << "head_dim 256 ran";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("head_dim 256 (64 or 128)"), std::string::npos) << e.what();
    }
}

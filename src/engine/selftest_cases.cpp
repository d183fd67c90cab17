// The self-test's op cases (selftest_cases.h): for each op the model's forward runs, fixed-seed inputs
// at the model's real feature sizes (norm weights, linears' real rows, the vocabulary), rebuilt on
// every run so the device kernel and the CPU oracle see identical bytes; matmul and matmul_silu
// cases probe the kernel selection at M in {1, 2, 3, 4, 8, 16, 64, 1024, max_tokens} (probe_ms).
#include "engine/selftest_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>

#include "backend/moe.h"
#include "backend/op_checks.h"
#include "backend/ops.h"
#include "backend/sampling.h"
#include "core/error.h"
#include "core/log.h"
#include "model/layers.h"
#include "model/model.h"

namespace tetra {
namespace selftest_detail {

namespace {

// ---- inputs ---------------------------------------------------------------------------------------

tensor host_i32(std::vector<int32_t> v, std::vector<int64_t> shape) {
    tensor h = tensor::alloc(dtype::I32, std::move(shape));
    TETRA_ASSERT(size_t(h.numel()) == v.size());
    std::copy(v.begin(), v.end(), h.ptr<int32_t>());
    return h;
}

// A host tensor of dtype t (f32|bf16|f16) with element i = f(i), called for i = 0, 1, … in order;
// the values are rounded to t (exact inputs: f's values exact in t).
template <class F> tensor host_exact(dtype t, std::vector<int64_t> shape, F f) {
    tensor h = tensor::alloc(t, std::move(shape));
    for (int64_t i = 0; i < h.numel(); ++i) {
        const float v = f(i);
        if (t == dtype::F32) h.ptr<float>()[i] = v;
        else if (t == dtype::BF16) h.ptr<uint16_t>()[i] = f32_to_bf16(v);
        else h.ptr<uint16_t>()[i] = f32_to_f16(v);
    }
    return h;
}

// Every element of a tensor on `be` as f32 (bytes of u8/e4m3 tensors as their integer values: those
// outputs are compared bit-exactly).
void append_f32(backend& be, const tensor& t, std::vector<float>& out) {
    std::vector<uint8_t> raw(t.nbytes());
    be.download(t, raw.data());
    for (int64_t i = 0; i < t.numel(); ++i) {
        switch (t.type) {
            case dtype::F32: case dtype::BF16: case dtype::F16: out.push_back(load_f32(raw.data(), t.type, i)); break;
            case dtype::I32: out.push_back(float(reinterpret_cast<const int32_t*>(raw.data())[i])); break;
            default: TETRA_ASSERT(dtype_size(t.type) == 1); out.push_back(float(raw[size_t(i)])); break;
        }
    }
}

// A case's run: launches the op on its args, then returns its outputs as f32 in the order given.
std::vector<float> launch_read(backend& be, const launch_fn& launch, op_args& args,
                               std::initializer_list<const tensor*> outputs) {
    launch(args);
    std::vector<float> r;
    for (const tensor* t : outputs) append_f32(be, *t, r);
    return r;
}

using op_checks::ptr_align;  // op_args::align as the op wrappers fill it

// ---- cases ----------------------------------------------------------------------------------------


// NMSE tolerances (Σ(out − ref)² / Σ ref²), per op and activation dtype. f32: kernels differ from the
// oracle only in summation order and libm ulps (relative ≲ 1e-6 over K ≤ 64k terms, NMSE ≲ 1e-11),
// so 1e-8 leaves a wide margin. bf16: every stored result rounds to 8 mantissa bits (relative ≤ 2^-9,
// NMSE ≤ 2^-18 ≈ 3.8e-6 per rounding); 1e-4 allows a few chained roundings (×25). Every modelled
// fault is far above either: a broadcast row or a NaN ≈ 1..inf, one dropped scale block out of K/16
// ≈ 16/K ≥ 1.1e-3 at K = 14336. Copies and codecs (get_rows, kv_store, cast, quantize) are bit-exact.
double tolerance(const std::string& op, dtype act) {
    if (op == "get_rows" || op == "kv_store" || op == "cast" || op == "quantize_nvfp4_act" || op == "moe_permute" ||
        op == "sample_rows")
        return 0.0;
    return act == dtype::F32 ? 1e-8 : 1e-4;
}


struct case_builder {
    const model_config& c;
    model_weights& w;
    dtype act;
    int64_t max_tokens;
    matmul_mode mode;
    std::vector<op_case> cases;

    void norm_case(const std::string& op, const std::string& weight, int64_t n, uint64_t seed) {
        op_case k;
        k.op = op;
        k.label = op + " n=" + std::to_string(n);
        k.what = strfmt("%s x[3, %lld] %s, w = %s", op.c_str(), (long long)n, dtype_name(act), weight.c_str());
        k.tol = tolerance(op, act);
        tensor wt = w.get(weight);
        float eps = c.rms_norm_eps;
        dtype a = act;
        bool add = op == "add_rms_norm";
        k.run = [=](backend& be, int, const launch_fn& launch) {
            tensor x = be.upload(host_random(a, {3, n}, seed)), wd = be.upload(wt), out = be.alloc(a, {3, n});
            std::vector<float> r;
            if (add) {
                tensor res = be.upload(host_random(a, {3, n}, seed + 1, 4.0f));
                add_rms_norm_args g;
                g.act = a, g.residual = res, g.x = x, g.w = wd, g.out = out, g.eps = eps;
                g.align = ptr_align({&res, &x, &wd, &out});
                launch(g);
                append_f32(be, out, r), append_f32(be, res, r);
            } else {
                rms_norm_args g;
                g.act = a, g.x = x, g.w = wd, g.out = out, g.eps = eps, g.align = ptr_align({&x, &wd, &out});
                launch(g);
                append_f32(be, out, r);
            }
            return r;
        };
        cases.push_back(k);
    }

    // get_rows of `ids` from the host rows `src` (uploaded), into `a`; the output as f32.
    static std::vector<float> run_get_rows(backend& be, const launch_fn& launch, dtype a, const tensor& src,
                                           const std::vector<int32_t>& ids) {
        get_rows_args g;
        g.act = a, g.src = be.upload(src);
        g.ids = be.upload(host_i32(ids, {int64_t(ids.size())}));
        g.out = be.alloc(a, {int64_t(ids.size()), src.dim(1)});
        g.align = ptr_align({&g.src, &g.ids, &g.out});
        return launch_read(be, launch, g, {&g.out});
    }

    void get_rows_cases() {
        const tensor& embed = w.get("model.embed_tokens.weight");
        int64_t n_rows = std::min<int64_t>(c.n_vocab, 64), row0 = c.n_vocab - n_rows, n = c.n_embd;
        tensor table = tensor_rows(embed, row0, n_rows);  // the real last rows of the embedding
        dtype a = act;
        op_case k;
        k.op = "get_rows";
        k.label = "embedding n=" + std::to_string(n);
        k.what = strfmt("embedding rows [%lld, %lld) %s → %s, ids {%lld, 0, 5}", (long long)row0,
                        (long long)c.n_vocab, dtype_name(embed.type), dtype_name(a), (long long)(n_rows - 1));
        k.tol = 0;
        const std::vector<int32_t> ids = {int32_t(n_rows - 1), 0, int32_t(std::min<int64_t>(5, n_rows - 1))};
        k.run = [=](backend& be, int, const launch_fn& launch) { return run_get_rows(be, launch, a, table, ids); };
        cases.push_back(k);
        op_case s = k;  // the same op on activations: picking the last token row of each sequence
        s.label = "get_rows n=" + std::to_string(n);
        s.what = strfmt("get_rows src[5, %lld] %s, ids {4, 1}", (long long)n, dtype_name(a));
        s.run = [=](backend& be, int, const launch_fn& launch) {
            return run_get_rows(be, launch, a, host_random(a, {5, n}, 11), {4, 1});
        };
        cases.push_back(s);
    }

    void rope_case() {
        int64_t nh = c.n_head, nkv = c.n_head_kv, hd = c.head_dim;
        int32_t last = int32_t(std::max<int64_t>(1, c.max_position) - 1);
        tensor inv = rope_inv_freq(rope_params_of(c.rope), hd);
        dtype a = act;
        op_case k;
        k.op = "rope";
        k.label = strfmt("rope %lldx%lld", (long long)nh, (long long)hd);
        k.what = strfmt("rope q[3, %lld, %lld] k[3, %lld, %lld] %s, positions {0, 7, %d}", (long long)nh, (long long)hd,
                        (long long)nkv, (long long)hd, dtype_name(a), last);
        k.tol = tolerance("rope", a);
        k.run = [=](backend& be, int, const launch_fn& launch) {
            rope_args g;
            g.act = a, g.q = be.upload(host_random(a, {3, nh, hd}, 21));
            g.k = be.upload(host_random(a, {3, nkv, hd}, 22));
            g.positions = be.upload(host_i32({0, 7, last}, {3}));
            g.inv_freq = be.upload(inv);
            g.align = ptr_align({&g.q, &g.k, &g.positions, &g.inv_freq});
            return launch_read(be, launch, g, {&g.q, &g.k});
        };
        cases.push_back(k);
    }

    // The fused attention input stage (model/layers.cpp uses it when a kernel is eligible): 3 tokens
    // of fused q|k|v rows, the model's q/k norm weights, positions {0, 7, last}, slots {17, 3, -1}.
    void qkv_rope_store_case() {
        const int64_t nh = c.n_head, nkv = c.n_head_kv, hd = c.head_dim, H = nh + 2 * nkv;
        const int32_t last = int32_t(std::max<int64_t>(1, c.max_position) - 1);
        const tensor inv = rope_inv_freq(rope_params_of(c.rope), hd);
        const dtype a = act;
        const float eps = c.rms_norm_eps;
        tensor qn, kn;
        if (c.qk_norm) qn = w.get("model.layers.0.self_attn.q_norm.weight"), kn = w.get("model.layers.0.self_attn.k_norm.weight");
        op_case k;
        k.op = "qkv_rope_store";
        k.optional = true;
        k.label = strfmt("qkv_rope_store %lld+2x%lld heads x%lld", (long long)nh, (long long)nkv, (long long)hd);
        k.what = strfmt("qkv_rope_store qkv[3, %lld, %lld] %s%s, positions {0, 7, %d}, slots {17, 3, -1}", (long long)H,
                        (long long)hd, dtype_name(a), c.qk_norm ? " with q/k norm" : "", last);
        k.tol = tolerance("qkv_rope_store", a);
        k.run = [=](backend& be, int, const launch_fn& launch) {
            qkv_rope_store_args g;
            g.act = a, g.eps = eps, g.qkv = be.upload(host_random(a, {3, H, hd}, 41));
            if (!qn.empty()) g.q_norm = be.upload(qn), g.k_norm = be.upload(kn);
            g.positions = be.upload(host_i32({0, 7, last}, {3}));
            g.inv_freq = be.upload(inv);
            g.q_out = be.upload(host_random(a, {3, nh, hd}, 42));
            g.k_cache = be.upload(host_random(a, {4, 16, nkv, hd}, 43));
            g.v_cache = be.upload(host_random(a, {4, 16, nkv, hd}, 44));
            g.slot_mapping = be.upload(host_i32({17, 3, -1}, {3}));
            g.align = ptr_align({&g.qkv, &g.q_out, &g.k_cache, &g.v_cache});
            return launch_read(be, launch, g, {&g.q_out, &g.k_cache, &g.v_cache});
        };
        cases.push_back(k);
    }

    // kv caches: [4 blocks, 16, n_head_kv, head_dim], random (the attention reads them).
    void kv_cases() {
        int64_t nkv = c.n_head_kv, hd = c.head_dim, nh = c.n_head;
        dtype a = act;
        op_case s;
        s.op = "kv_store";
        s.label = strfmt("kv_store %lldx%lld", (long long)nkv, (long long)hd);
        s.what = strfmt("kv_store k,v[3, %lld, %lld] %s into [4, 16, %lld, %lld], slots {17, 3, -1}", (long long)nkv,
                        (long long)hd, dtype_name(a), (long long)nkv, (long long)hd);
        s.tol = 0;
        s.run = [=](backend& be, int, const launch_fn& launch) {
            kv_store_args g;
            g.act = a, g.k = be.upload(host_random(a, {3, nkv, hd}, 31));
            g.v = be.upload(host_random(a, {3, nkv, hd}, 32));
            g.k_cache = be.upload(host_random(a, {4, 16, nkv, hd}, 33));
            g.v_cache = be.upload(host_random(a, {4, 16, nkv, hd}, 34));
            g.slot_mapping = be.upload(host_i32({17, 3, -1}, {3}));
            g.align = ptr_align({&g.k, &g.v, &g.k_cache, &g.v_cache, &g.slot_mapping});
            return launch_read(be, launch, g, {&g.k_cache, &g.v_cache});
        };
        cases.push_back(s);
        // Decode: two sequences, one query token each (kv lengths 37 and 5); prefill: one chunk of
        // 7 query tokens at positions 10..16 over a cached prefix (kv length 17).
        for (int prefill = 0; prefill < 2; ++prefill) {
            op_case k;
            k.op = "attention";
            k.label = strfmt("attention %s %lld/%lldx%lld", prefill ? "prefill" : "decode", (long long)nh,
                             (long long)nkv, (long long)hd);
            k.what = prefill ? strfmt("attention prefill q[7, %lld, %lld] %s, kv 17 over blocks {3, 1}", (long long)nh,
                                      (long long)hd, dtype_name(a))
                             : strfmt("attention decode q[2, %lld, %lld] %s, kv lengths {37, 5}", (long long)nh,
                                      (long long)hd, dtype_name(a));
            k.tol = tolerance("attention", a);
            k.run = [=](backend& be, int, const launch_fn& launch) {
                int64_t n_tok = prefill ? 7 : 2;
                attention_args g;
                g.act = a, g.q = be.upload(host_random(a, {n_tok, nh, hd}, 41 + prefill));
                g.k_cache = be.upload(host_random(a, {4, 16, nkv, hd}, 43));
                g.v_cache = be.upload(host_random(a, {4, 16, nkv, hd}, 44));
                g.out = be.alloc(a, {n_tok, nh * hd});
                g.scale = 1.0f / std::sqrt(float(hd));
                attn_metadata& m = g.meta;
                m.block_size = 16;
                if (prefill) {
                    m.n_seqs = 1, m.max_seqlen_q = 7, m.max_seqlen_kv = 17;
                    m.cu_seqlens_q = be.upload(host_i32({0, 7}, {2}));
                    m.seq_lens_kv = be.upload(host_i32({17}, {1}));
                    m.positions = be.upload(host_i32({10, 11, 12, 13, 14, 15, 16}, {7}));
                    m.block_tables = be.upload(host_i32({3, 1}, {1, 2}));
                    m.slot_mapping = be.upload(host_i32({-1, -1, -1, -1, -1, -1, -1}, {7}));
                } else {
                    m.n_seqs = 2, m.max_seqlen_q = 1, m.max_seqlen_kv = 37;
                    m.cu_seqlens_q = be.upload(host_i32({0, 1, 2}, {3}));
                    m.seq_lens_kv = be.upload(host_i32({37, 5}, {2}));
                    m.positions = be.upload(host_i32({36, 4}, {2}));
                    m.block_tables = be.upload(host_i32({2, 0, 3, 1, 0, 0}, {2, 3}));
                    m.slot_mapping = be.upload(host_i32({-1, -1}, {2}));
                }
                g.align = ptr_align({&g.q, &g.k_cache, &g.v_cache, &g.out});
                return launch_read(be, launch, g, {&g.out});
            };
            cases.push_back(k);
        }
    }

    // Device sampling (the serving engine samples on the backend when it is not the CPU): three rows
    // of the model's vocabulary — greedy; T 0.7, top-k 50, top-p 0.9 with repetition/frequency/
    // presence penalties; T 1.3, min-p 0.05 with a suppressed (min_tokens) id — tokens bit-exact.
    // Then the output guard's row statistics of the same logits (f64 sums: order-only differences).
    void sampling_cases() {
        const int64_t nv = c.n_vocab;
        const dtype a = act;
        std::vector<sample_row> rows(3);
        rows[0].temperature = 0.0f;
        rows[1].temperature = 0.7f, rows[1].top_k = 50, rows[1].top_p = 0.9f, rows[1].repetition_penalty = 1.1f;
        rows[1].frequency_penalty = 0.3f, rows[1].presence_penalty = 0.2f, rows[1].entry0 = 0, rows[1].n_entries = 2;
        rows[2].temperature = 1.3f, rows[2].min_p = 0.05f, rows[2].entry0 = 2, rows[2].n_entries = 1;
        for (int i = 0; i < 3; ++i) rows[size_t(i)].seed = 1234 + uint64_t(i), rows[size_t(i)].step = 5 * i;
        std::vector<sample_entry> ents(3);
        ents[0].id = int32_t(std::min<int64_t>(7, nv - 1)), ents[0].prompt_count = 2, ents[0].output_count = 1;
        ents[1].id = int32_t(nv - 1), ents[1].output_count = 3;
        ents[2].id = 0, ents[2].suppress = 1;
        tensor rows_t = tensor::alloc(dtype::I32, {3, sample_row_words}), ents_t = tensor::alloc(dtype::I32, {3, 4});
        std::memcpy(rows_t.data, rows.data(), rows_t.nbytes()), std::memcpy(ents_t.data, ents.data(), ents_t.nbytes());
        op_case k;
        k.op = "sample_rows";
        k.label = strfmt("sample_rows vocab=%lld", (long long)nv);
        k.what = strfmt("sample_rows logits[3, %lld] %s: greedy; T 0.7 top-k 50 top-p 0.9 + penalties; T 1.3 min-p 0.05",
                        (long long)nv, dtype_name(a));
        k.tol = tolerance("sample_rows", a);
        k.run = [=](backend& be, int, const launch_fn& launch) {
            sample_rows_args g;
            g.act = a, g.logits = be.upload(host_random(a, {3, nv}, 51, 3.0f));
            g.rows = be.upload(rows_t), g.entries = be.upload(ents_t), g.out = be.alloc(dtype::I32, {3});
            g.n_rows = 3, g.n_vocab = nv, g.n_entries = 3;
            g.align = ptr_align({&g.logits, &g.rows, &g.entries, &g.out});
            return launch_read(be, launch, g, {&g.out});
        };
        cases.push_back(k);
        op_case st;
        st.op = "sample_guard_stats";
        st.label = strfmt("sample_guard_stats vocab=%lld", (long long)nv);
        st.what = strfmt("sample_guard_stats logits[3, %lld] %s", (long long)nv, dtype_name(a));
        st.tol = tolerance("sample_guard_stats", a);
        st.run = [=](backend& be, int, const launch_fn& launch) {
            sample_guard_stats_args g;
            g.act = a, g.logits = be.upload(host_random(a, {3, nv}, 52, 3.0f));
            g.stats = be.alloc(dtype::I32, {3, guard_stats_words});
            g.n_rows = 3, g.n_vocab = nv;
            g.align = ptr_align({&g.logits, &g.stats});
            launch(g);
            std::vector<guard_row_stats> h(3);
            be.download(g.stats, h.data());
            std::vector<float> r;
            for (const guard_row_stats& x : h)
                r.insert(r.end(), {float(x.sum), float(x.sum_sq), x.x0, x.lo, x.hi, float(x.first_bad)});
            return r;
        };
        cases.push_back(st);
    }

    void elementwise_cases() {
        int64_t nf = c.n_ff;
        dtype a = act;
        op_case k;
        k.op = "silu_mul";
        k.label = "silu_mul n=" + std::to_string(nf);
        k.what = strfmt("silu_mul gate,up[3, %lld] %s (|x| ≤ 8)", (long long)nf, dtype_name(a));
        k.tol = tolerance("silu_mul", a);
        k.run = [=](backend& be, int, const launch_fn& launch) {
            silu_mul_args g;
            g.act = a, g.gate = be.upload(host_random(a, {3, nf}, 51, 8.0f));
            g.up = be.upload(host_random(a, {3, nf}, 52));
            g.out = be.alloc(a, {3, nf});
            g.align = ptr_align({&g.gate, &g.up, &g.out});
            return launch_read(be, launch, g, {&g.out});
        };
        cases.push_back(k);
        if (a == dtype::F32) return;  // the runner casts logits to f32 only when the activations are not f32
        int64_t nv = c.n_vocab;
        op_case t;
        t.op = "cast";
        t.label = "cast logits n=" + std::to_string(nv);
        t.what = strfmt("cast [3, %lld] %s → f32 (|x| ≤ 40)", (long long)nv, dtype_name(a));
        t.tol = 0;
        t.run = [=](backend& be, int, const launch_fn& launch) {
            cast_args g;
            g.act = a, g.src = be.upload(host_random(a, {3, nv}, 61, 40.0f)), g.out = be.alloc(dtype::F32, {3, nv});
            g.align = ptr_align({&g.src, &g.out});
            return launch_read(be, launch, g, {&g.out});
        };
        cases.push_back(t);
    }

    void matmul_cases();
    void matmul_silu_case();  // the fused gate/up + silu of the first dense layer (model/mlp.cpp)
    void quantize_case(const linear_weight& lw, const std::string& module);
    void moe_cases();  // route, permute, combine and grouped matmuls of the first MoE layer
    void moe_combine_cases(int il, int64_t nt);
    void moe_front_case(int il);
    void moe_matmul_case(const std::string& proj, int il);
    void moe_matmul_silu_case(int il);  // the experts' fused gate/up + silu (model/moe.cpp)
};

// The M values of a matmul-like case. Probes (where the kernel choice is looked up): 1, 2, 3, 4, 8,
// 16, 64 up to max_tokens, then 1024 (the prefill chunks below a larger max_tokens: e.g. the fused
// large-M W4A16 kernels' range on sm_90a) and max_tokens when they are above 64. Test sizes (a
// kernel is tested at the first it accepts), each M once, ascending: m_small, 16, 64, 1024 and
// max_tokens up to max_tokens, each with n_small rows and with all n rows.
std::vector<int64_t> probe_ms(int64_t max_tokens) {
    std::vector<int64_t> ms;
    for (int64_t m : {1, 2, 3, 4, 8, 16, 64})
        if (m <= max_tokens) ms.push_back(m);
    if (max_tokens > 1024) ms.push_back(1024);
    if (max_tokens > 64) ms.push_back(max_tokens);
    return ms;
}

std::vector<std::pair<int64_t, int64_t>> test_sizes(int64_t max_tokens, int64_t m_small, int64_t n_small, int64_t n) {
    std::vector<std::pair<int64_t, int64_t>> sizes = {{m_small, n_small}, {m_small, n}};
    for (int64_t m : {int64_t(16), int64_t(64), int64_t(1024), max_tokens})
        if (m <= max_tokens && m > sizes.back().first) sizes.push_back({m, n_small}), sizes.push_back({m, n});
    return sizes;
}

// The mode a case runs lw in: dense for a dense weight; AUTO → W4A4 with an input scale, else W4A16.
matmul_mode case_mode(const linear_weight& lw, matmul_mode mode) {
    if (lw.kind == linear_kind::DENSE) return matmul_mode::DENSE;
    if (mode == matmul_mode::AUTO) return lw.has_input_scale ? matmul_mode::W4A4 : matmul_mode::W4A16;
    return mode;
}

const char* matmul_op(const linear_weight& lw, matmul_mode mode) {
    if (lw.kind == linear_kind::DENSE) return "matmul_dense";
    return case_mode(lw, mode) == matmul_mode::W4A4 ? "matmul_nvfp4_w4a4" : "matmul_nvfp4_w4a16";
}

// Rows [0, n) of a host canonical linear weight (views).
linear_weight linear_rows(const linear_weight& lw, int64_t n) {
    linear_weight s = lw;
    s.n_out = n;
    if (lw.kind == linear_kind::DENSE) {
        s.dense = tensor_rows(lw.dense, 0, n);
    } else {
        s.codes = tensor_rows(lw.codes, 0, n);
        s.scales = tensor_rows(lw.scales, 0, n);
    }
    return s;
}

// One case per (op, shape) over every layer's linears (an excluded layer is dense: its own case),
// the first layer holding it supplying the weight rows; classes of one shape share the case.
void case_builder::matmul_cases() {
    struct cls { std::string module, name; int il; bool dense_ok; };
    std::vector<cls> classes;
    for (int il = 0; il < int(c.n_layer); ++il) {
        std::vector<std::pair<const char*, bool>> names = {
            {"self_attn.q_proj", false}, {"self_attn.k_proj", false}, {"self_attn.v_proj", false},
            {"self_attn.o_proj", false}};
        if (!c.is_moe_layer(il)) {
            names.insert(names.end(), {{"mlp.gate_proj", false}, {"mlp.up_proj", false}, {"mlp.down_proj", false}});
        } else {  // routed experts run through moe_matmul (moe_cases); router and shared expert are matmuls
            names.push_back({"mlp.gate", true});
            if (c.n_ff_shexp > 0)
                names.insert(names.end(), {{"mlp.shared_expert.gate_proj", false}, {"mlp.shared_expert.up_proj", false},
                                           {"mlp.shared_expert.down_proj", false}, {"mlp.shared_expert_gate", true}});
        }
        for (const auto& n : names)
            classes.push_back({"model.layers." + std::to_string(il) + "." + n.first, n.first, il, n.second});
    }
    classes.push_back({c.tie_word_embeddings ? "model.embed_tokens" : "lm_head", "lm_head", -1, true});
    std::map<std::string, size_t> by_key;             // (op, shape) → case index
    std::map<size_t, std::vector<std::string>> names;  // case index → its classes
    bool quantize_added = false;
    for (const cls& cl : classes) {
        const linear_weight& lw = w.linear(cl.module, cl.dense_ok);
        std::string op = matmul_op(lw, mode);
        std::string kind = lw.kind == linear_kind::DENSE ? std::string("dense ") + dtype_name(lw.dense.type) : "nvfp4";
        std::string key = strfmt("linear %s %lldx%lld", kind.c_str(), (long long)lw.n_out, (long long)lw.n_in);
        auto it = by_key.find(op + key);
        if (it != by_key.end()) {
            std::vector<std::string>& have = names[it->second];
            if (std::find(have.begin(), have.end(), cl.name) == have.end()) have.push_back(cl.name);
            continue;
        }
        names[cases.size()] = {cl.name};
        if (op == "matmul_nvfp4_w4a4" && !quantize_added) quantize_case(lw, cl.module), quantize_added = true;
        by_key[op + key] = cases.size();
        op_case k;
        k.op = op;
        k.label = key;
        k.classes = cl.name;
        k.tol = tolerance(op, act);
        std::string where = cl.il >= 0 ? strfmt("%s layer %d", cl.name.c_str(), cl.il) : cl.name;
        // Test sizes: (M, N) from small to the real shape; a kernel is tested at the first it accepts.
        int64_t n_small = std::min<int64_t>(lw.n_out, 64), m_small = std::min<int64_t>(3, max_tokens);
        std::vector<std::pair<int64_t, int64_t>> sizes = test_sizes(max_tokens, m_small, n_small, lw.n_out);
        k.n_sizes = int(sizes.size());
        for (auto& s : sizes)
            k.size_strs.push_back(strfmt("%s (%s rows [0, %lld)): M=%lld N=%lld K=%lld %s", op.c_str(), where.c_str(),
                                         (long long)s.second, (long long)s.first, (long long)s.second,
                                         (long long)lw.n_in, dtype_name(act)));
        k.what = k.size_strs[0];
        // W4A4: activations sized so the block scales G·amax/6 land mid-range in e4m3 (≈ 64).
        float xs = lw.has_input_scale && lw.input_global_quant > 0 ? 384.0f / lw.input_global_quant : 1.0f;
        dtype a = act;
        linear_weight host = lw;
        k.run = [=](backend& be, int size, const launch_fn& launch) {
            int64_t m = sizes[size_t(size)].first, n = sizes[size_t(size)].second;
            linear_weight pw = be.prepare_linear(linear_rows(host, n));
            matmul_args g;
            g.act = a, g.x = be.upload(host_random(a, {m, host.n_in}, 71, xs)), g.out = be.alloc(a, {m, n});
            g.w = &pw, g.m = m, g.n = n, g.k = host.n_in;
            const tensor& wt = pw.kind == linear_kind::DENSE ? pw.dense : pw.codes;
            g.align = ptr_align({&g.x, &g.out, &wt});
            return launch_read(be, launch, g, {&g.out});
        };
        // Selection at the real shape [M, n_in] x [n_out, n_in] with the whole weight prepared for
        // the backend (a kernel's accepts() may check the prepared layout); x and out are shape-only
        // (accepts() reads their shapes and dtypes, never their data). Prepared once per case.
        auto prepared = std::make_shared<std::unique_ptr<linear_weight>>();
        k.probe = [=](backend& be, int64_t m, const launch_fn& select) {
            if (!*prepared) *prepared = std::make_unique<linear_weight>(be.prepare_linear(host));
            const linear_weight& pw = **prepared;
            matmul_args g;
            g.act = a, g.x.type = a, g.x.shape = {m, host.n_in}, g.out.type = a, g.out.shape = {m, host.n_out};
            g.x.device = g.out.device = be.device().kind;
            g.w = &pw, g.m = m, g.n = host.n_out, g.k = host.n_in;
            g.align = ptr_align({pw.kind == linear_kind::DENSE ? &pw.dense : &pw.codes});
            select(g);
        };
        k.probe_m = probe_ms(max_tokens);
        cases.push_back(k);
    }
    for (auto& kv : names) {
        std::string& out = cases[kv.first].classes;
        out.clear();
        for (const std::string& n : kv.second) out += (out.empty() ? "" : ", ") + n;
    }
}

void case_builder::quantize_case(const linear_weight& lw, const std::string& module) {
    int64_t n = lw.n_in;
    float g_x = lw.input_global_quant, xs = 384.0f / g_x;
    dtype a = act;
    op_case k;
    k.op = "quantize_nvfp4_act";
    k.label = "quantize_nvfp4_act n=" + std::to_string(n);
    k.what = strfmt("quantize_nvfp4_act x[3, %lld] %s, G = %g (%s)", (long long)n, dtype_name(a), double(g_x),
                    module.c_str());
    k.tol = 0;
    k.run = [=](backend& be, int, const launch_fn& launch) {
        quantize_nvfp4_act_args g;
        g.act = a, g.x = be.upload(host_random(a, {3, n}, 81, xs)), g.global_quant = g_x;
        g.codes = be.alloc(dtype::U8, {3, n / 2}), g.scales = be.alloc(dtype::E4M3, {3, n / 16});
        g.align = ptr_align({&g.x, &g.codes, &g.scales});
        return launch_read(be, launch, g, {&g.codes, &g.scales});
    };
    cases.push_back(k);
}

// ---- MoE (models with n_expert > 0): the four MoE ops on the first MoE layer's shapes ------------

// moe_route_permute's args on `be` for logits [n_tokens, n_expert] (the outputs allocated there).
moe_route_permute_args route_permute_args_on(backend& be, const tensor& logits, int64_t k, bool norm) {
    const int64_t nt = logits.dim(0), ne = logits.dim(1);
    moe_route_permute_args g;
    moe_route_args& q = g.route;
    q.act = logits.type, q.logits = logits;
    q.topk_ids = be.alloc(dtype::I32, {nt, k}), q.topk_weights = be.alloc(dtype::F32, {nt, k});
    q.n_tokens = nt, q.n_expert = ne, q.k = k, q.norm_topk_prob = norm;
    moe_permute_args& u = g.permute;
    u.act = dtype::I32, u.topk_ids = q.topk_ids;
    u.expert_counts = be.alloc(dtype::I32, {ne}), u.expert_offsets = be.alloc(dtype::I32, {ne + 1});
    u.sorted_tokens = be.alloc(dtype::I32, {nt * k}), u.dest_rows = be.alloc(dtype::I32, {nt, k});
    u.n_tokens = nt, u.n_expert = ne, u.k = k;
    g.act = logits.type;
    return g;
}

// Token t's k distinct experts: a deterministic scramble (t·5 + s·3 + s²) mod n_expert, skipping
// repeats. ids: [n_tokens·k]
std::vector<int32_t> moe_test_ids(int64_t n_tokens, int64_t k, int64_t ne) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t s = 0, e = t * 5; s < k; ++e) {
            int32_t id = int32_t((e + s * 3 + s * s) % ne);
            if (std::find(ids.end() - s, ids.end(), id) == ids.end()) ids.push_back(id), ++s;
        }
    return ids;
}

void case_builder::moe_cases() {
    int il = -1;
    for (int i = 0; i < int(c.n_layer) && il < 0; ++i)
        if (c.is_moe_layer(i)) il = i;
    if (il < 0) return;
    const int64_t ne = c.n_expert, k = c.n_expert_used, nt = 5;
    const bool norm = c.norm_topk_prob;
    dtype a = act;
    op_case r;
    r.op = "moe_route";
    r.label = strfmt("moe_route %lld experts top %lld", (long long)ne, (long long)k);
    r.what = strfmt("moe_route logits[%lld, %lld] %s (|x| ≤ 4), k %lld%s", (long long)nt, (long long)ne, dtype_name(a),
                    (long long)k, norm ? ", renormalized" : "");
    r.tol = tolerance(r.op, a);
    r.run = [=](backend& be, int, const launch_fn& launch) {
        moe_route_args g;
        g.act = a, g.logits = be.upload(host_random(a, {nt, ne}, 91, 4.0f));
        g.topk_ids = be.alloc(dtype::I32, {nt, k}), g.topk_weights = be.alloc(dtype::F32, {nt, k});
        g.n_tokens = nt, g.n_expert = ne, g.k = k, g.norm_topk_prob = norm;
        g.align = ptr_align({&g.logits, &g.topk_ids, &g.topk_weights});
        return launch_read(be, launch, g, {&g.topk_ids, &g.topk_weights});
    };
    cases.push_back(r);
    op_case p = r;
    p.op = "moe_permute";
    p.label = strfmt("moe_permute %lld experts top %lld", (long long)ne, (long long)k);
    p.what = strfmt("moe_permute %lld tokens × %lld of %lld experts", (long long)nt, (long long)k, (long long)ne);
    p.tol = 0;
    std::vector<int32_t> ids = moe_test_ids(nt, k, ne);
    p.run = [=](backend& be, int, const launch_fn& launch) {
        moe_permute_args g;
        g.act = dtype::I32, g.topk_ids = be.upload(host_i32(ids, {nt, k}));
        g.expert_counts = be.alloc(dtype::I32, {ne}), g.expert_offsets = be.alloc(dtype::I32, {ne + 1});
        g.sorted_tokens = be.alloc(dtype::I32, {nt * k}), g.dest_rows = be.alloc(dtype::I32, {nt, k});
        g.n_tokens = nt, g.n_expert = ne, g.k = k;
        g.align = ptr_align({&g.topk_ids, &g.expert_counts, &g.expert_offsets, &g.sorted_tokens, &g.dest_rows});
        return launch_read(be, launch, g, {&g.expert_counts, &g.expert_offsets, &g.sorted_tokens, &g.dest_rows});
    };
    cases.push_back(p);
    op_case rp = r;  // the router and the permutation in one op (model/moe.cpp runs this one)
    rp.op = "moe_route_permute";
    rp.label = strfmt("moe_route_permute %lld experts top %lld", (long long)ne, (long long)k);
    rp.what = strfmt("moe_route_permute logits[%lld, %lld] %s (|x| ≤ 4), k %lld%s", (long long)nt, (long long)ne,
                     dtype_name(a), (long long)k, norm ? ", renormalized" : "");
    rp.run = [=](backend& be, int, const launch_fn& launch) {
        moe_route_permute_args g = route_permute_args_on(be, be.upload(host_random(a, {nt, ne}, 96, 4.0f)), k, norm);
        moe_route_args& q = g.route;
        moe_permute_args& u = g.permute;
        g.align = q.align = u.align = ptr_align({&q.logits, &q.topk_ids, &q.topk_weights, &u.expert_counts,
                                                 &u.expert_offsets, &u.sorted_tokens, &u.dest_rows});
        return launch_read(be, launch, g, {&q.topk_ids, &q.topk_weights, &u.expert_counts, &u.expert_offsets,
                                           &u.sorted_tokens, &u.dest_rows});
    };
    cases.push_back(rp);
    moe_front_case(il);
    moe_combine_cases(il, nt);
    // the experts' fused gate/up output: silu_mul on the two halves of each row (model/moe.cpp)
    const int64_t nf = c.n_ff_exp;
    op_case f;
    f.op = "silu_mul";
    f.label = strfmt("silu_mul gate_up n=%lld", (long long)nf);
    f.what = strfmt("silu_mul gate_up[3, %lld] %s (|x| ≤ 8) → [3, %lld]", (long long)(2 * nf), dtype_name(a), (long long)nf);
    f.tol = tolerance("silu_mul", a);
    f.run = [=](backend& be, int, const launch_fn& launch) {
        silu_mul_args g;
        g.act = a, g.gate = be.upload(host_random(a, {3, 2 * nf}, 97, 8.0f)), g.out = be.alloc(a, {3, nf});
        g.n_ff = nf;
        g.align = ptr_align({&g.gate, &g.out});
        return launch_read(be, launch, g, {&g.out});
    };
    cases.push_back(f);
    for (const char* proj : {"gate_proj", "down_proj"}) moe_matmul_case(proj, il);  // up_proj: gate_proj's shape
    moe_matmul_silu_case(il);
}


// moe_route_permute with its front (the model's MoE layers at every step: the post-attention
// add_rms_norm and the router matmul folded in, moe_route_front) on one n_embd-wide row. The inputs make
// every sum exact in f32 whatever its order, so the device's kernel (on sm_90+ the one cluster
// kernel) must equal the CPU bit for bit, norm, logits and route included: x and the residual are
// multiples of 1/8 in [-2, 2] (their sum and squares exact, Σ squares < 2^24 · 2^-6), the norm weight
// is 1/2, 1 or 2, and each router row holds four entries ±1, ±1/2 (a logit: four bf16 terms within
// 2^9 of each other).
void case_builder::moe_front_case(int il) {
    const int64_t ne = c.n_expert, k = c.n_expert_used, n = c.n_embd;
    const int64_t nt = 1;  // a decode step at batch 1: the one-launch kernel's case (more tokens run the parts)
    const bool norm = c.norm_topk_prob;
    const float eps = c.rms_norm_eps;
    const dtype a = act;
    op_case f;
    f.op = "moe_route_permute";
    f.label = strfmt("moe_route_permute + add_rms_norm + router n=%lld, %lld experts top %lld", (long long)n,
                     (long long)ne, (long long)k);
    f.what = strfmt("add_rms_norm x[%lld, %lld] %s (multiples of 1/8), router [%lld, %lld] (4 entries ±1, ±1/2 a "
                    "row), route top %lld%s, layer %d's shapes", (long long)nt, (long long)n, dtype_name(a),
                    (long long)ne, (long long)n, (long long)k, norm ? ", renormalized" : "", il);
    f.tol = 0;  // exact inputs: bit-equal
    f.run = [=](backend& be, int, const launch_fn& launch) {
        auto eighths = [](int64_t i, int64_t mul, int64_t add) { return float((i * mul + add) % 33 - 16) / 8.0f; };
        linear_weight host;
        host.n_out = ne, host.n_in = n;
        host.dense = host_exact(a, {ne, n}, [&](int64_t i) {  // row e: vals[j] at column (7e + 131j + 17j²) mod n
            const float vals[4] = {1.0f, -1.0f, 0.5f, -0.5f};
            const int64_t e = i / n, col = i % n;
            float v = 0.0f;
            for (int64_t j = 0; j < 4; ++j)
                if ((e * 7 + j * 131 + j * j * 17) % n == col) v = vals[j];  // a later entry wins a shared column
            return v;
        });
        const linear_weight rw = be.prepare_linear(host);
        moe_route_permute_args g = route_permute_args_on(be, be.alloc(a, {nt, ne}), k, norm);
        moe_route_args& q = g.route;
        moe_permute_args& u = g.permute;
        moe_route_front& fr = g.front;
        fr.x = be.upload(host_exact(a, {nt, n}, [&](int64_t i) { return eighths(i, 37, 11); }));
        fr.residual = be.upload(host_exact(a, {nt, n}, [&](int64_t i) { return eighths(i, 53, 5); }));
        fr.w = be.upload(host_exact(a, {n}, [](int64_t i) { return i % 3 == 0 ? 0.5f : i % 3 == 1 ? 1.0f : 2.0f; }));
        fr.h = be.alloc(a, {nt, n}), fr.eps = eps, fr.router = &rw, fr.mode = matmul_mode::DENSE;
        g.align = q.align = u.align = ptr_align({&q.logits, &q.topk_ids, &q.topk_weights, &u.expert_counts,
                                                 &u.expert_offsets, &u.sorted_tokens, &u.dest_rows, &fr.x,
                                                 &fr.residual, &fr.h, &rw.dense});
        return launch_read(be, launch, g, {&fr.residual, &fr.h, &q.logits, &q.topk_ids, &q.topk_weights,
                                           &u.expert_counts, &u.expert_offsets, &u.sorted_tokens, &u.dest_rows});
    };
    cases.push_back(f);
}

// moe_combine alone and with the next add_rms_norm folded in, on nt tokens of the MoE layer il's
// shapes (model/moe.cpp, model/layers.cpp).
void case_builder::moe_combine_cases(int il, int64_t nt) {
    const int64_t k = c.n_expert_used, n = c.n_embd;
    const bool shared = c.n_ff_shexp > 0;
    dtype a = act;
    op_case m;
    m.op = "moe_combine";
    m.label = strfmt("moe_combine n=%lld top %lld%s", (long long)n, (long long)k, shared ? " + shared expert" : "");
    m.what = strfmt("moe_combine y[%lld, %lld] %s → %lld tokens%s", (long long)(nt * k + 2), (long long)n,
                    dtype_name(a), (long long)nt, shared ? ", gated shared expert" : "");
    m.tol = tolerance(m.op, a);
    // y rows through dest (a fixed permutation-like pattern per `step`), weights, the optional gated
    // shared expert: the combine's inputs from seeds seed .. seed + 3
    auto combine_args = [=](backend& be, int64_t step, uint64_t seed) {
        std::vector<int32_t> dest;
        for (int64_t i = 0; i < nt * k; ++i) dest.push_back(int32_t((i * step + 1) % (nt * k + 2)));
        moe_combine_args g;
        g.act = a, g.y = be.upload(host_random(a, {nt * k + 2, n}, seed));
        g.dest_rows = be.upload(host_i32(dest, {nt, k}));
        g.topk_weights = be.upload(host_random(dtype::F32, {nt, k}, seed + 1));
        g.out = be.alloc(a, {nt, n});
        if (shared)
            g.shared = be.upload(host_random(a, {nt, n}, seed + 2)),
            g.shared_gate = be.upload(host_random(a, {nt, 1}, seed + 3, 3.0f));
        g.n_tokens = nt, g.k = k, g.n = n;
        return g;
    };
    m.run = [=](backend& be, int, const launch_fn& launch) {
        moe_combine_args g = combine_args(be, 7, 92);
        g.align = ptr_align({&g.y, &g.dest_rows, &g.topk_weights, &g.out});
        return launch_read(be, launch, g, {&g.out});
    };
    cases.push_back(m);
    // the combine with the next layer's add_rms_norm folded in (moe_combine_norm, model/layers.cpp):
    // out, the updated residual and h (its own kernel path on CUDA)
    const std::string nw_name = "model.layers." + std::to_string(il + 1 < int(c.n_layer) ? il + 1 : 0) +
                                ".input_layernorm.weight";
    op_case mn = m;
    mn.label = m.label + " + add_rms_norm";
    mn.what = m.what + ", then add_rms_norm w = " + nw_name;
    tensor nwt = w.get(nw_name);
    const float eps = c.rms_norm_eps;
    mn.run = [=](backend& be, int, const launch_fn& launch) {
        moe_combine_args g = combine_args(be, 5, 96);
        g.norm.residual = be.upload(host_random(a, {nt, n}, 101, 4.0f)), g.norm.w = be.upload(nwt);
        g.norm.h = be.alloc(a, {nt, n}), g.norm.eps = eps;
        g.align = ptr_align({&g.y, &g.dest_rows, &g.topk_weights, &g.out, &g.norm.residual, &g.norm.h});
        return launch_read(be, launch, g, {&g.out, &g.norm.residual, &g.norm.h});
    };
    cases.push_back(mn);
}

// moe_matmul_silu on experts 0..min(n_expert, 4)−1 of layer il, each expert's gate and up rows
// [0, min(n_ff, 32)) stacked as the forward stacks them (when they stack), 7 rows as
// moe_matmul_case. Only out is compared: gu is scratch the fused kernel does not write.
void case_builder::moe_matmul_silu_case(int il) {
    const int64_t n_ex = std::min<int64_t>(c.n_expert, 4), m = 7;
    std::vector<linear_weight> gates, ups;
    for (int64_t e = 0; e < n_ex; ++e) {
        const std::string x = strfmt("model.layers.%d.mlp.experts.%lld.", il, (long long)e);
        gates.push_back(w.linear(x + "gate_proj")), ups.push_back(w.linear(x + "up_proj"));
        if (!stack_rows({&gates.back(), &ups.back()})) return;  // the forward runs two grouped matmuls
    }
    const linear_weight& w0 = gates[0];
    const int64_t n = std::min<int64_t>(w0.n_out, 32), k_in = w0.n_in;
    static const int32_t k_offsets[4][5] = {{0, 7}, {0, 3, 7}, {0, 3, 3, 7}, {0, 3, 3, 5, 7}};
    std::vector<int32_t> offs(k_offsets[n_ex - 1], k_offsets[n_ex - 1] + n_ex + 1);
    const matmul_mode md = case_mode(w0, mode);
    op_case k;
    k.op = "moe_matmul_silu";
    k.label = strfmt("experts silu %s 2x%lldx%lld", w0.kind == linear_kind::DENSE ? "dense" : "nvfp4",
                     (long long)w0.n_out, (long long)k_in);
    k.classes = "mlp.experts.gate_proj + up_proj";
    k.what = strfmt("moe_matmul_silu (experts 0..%lld of layer %d, gate/up rows [0, %lld) each): M=%lld, N=2x%lld K=%lld %s",
                    (long long)(n_ex - 1), il, (long long)n, (long long)m, (long long)n, (long long)k_in,
                    dtype_name(act));
    k.tol = tolerance(k.op, act);
    float xs = w0.has_input_scale && w0.input_global_quant > 0 ? 384.0f / w0.input_global_quant : 1.0f;
    dtype a = act;
    k.run = [=](backend& be, int, const launch_fn& launch) {
        auto pw = std::make_shared<std::vector<linear_weight>>();
        for (int64_t e = 0; e < n_ex; ++e) {
            linear_weight lg = linear_rows(gates[size_t(e)], n), lu = linear_rows(ups[size_t(e)], n);
            pw->push_back(be.prepare_linear(*stack_rows({&lg, &lu})));
        }
        moe_matmul_silu_args g;
        g.act = a, g.mode = md, g.n_ff = n, g.out = be.alloc(a, {m, n});
        g.mm.act = a, g.mm.x = be.upload(host_random(a, {m, k_in}, 98, xs)), g.mm.out = be.alloc(a, {m, 2 * n});
        g.mm.expert_offsets = be.upload(host_i32(offs, {n_ex + 1}));
        g.mm.experts = pw.get(), g.mm.n_rows = m, g.mm.n = 2 * n, g.mm.k = k_in;
        const tensor& wt = (*pw)[0].kind == linear_kind::DENSE ? (*pw)[0].dense : (*pw)[0].codes;
        g.mm.align = ptr_align({&g.mm.x, &g.mm.out, &wt});
        g.align = ptr_align({&g.mm.x, &g.mm.out, &g.mm.expert_offsets, &g.out, &wt});
        return launch_read(be, launch, g, {&g.out});
    };
    cases.push_back(k);
}

// Experts 0..min(n_expert, 4)-1 of layer il (rows [0, min(n_out, 64)) each), 7 rows split over
// them with expert 1 empty: the grouped matmul the forward launches, on the real weights.
void case_builder::moe_matmul_case(const std::string& proj, int il) {
    const int64_t n_ex = std::min<int64_t>(c.n_expert, 4), m = 7;
    std::vector<linear_weight> host;
    for (int64_t e = 0; e < n_ex; ++e)
        host.push_back(w.linear(strfmt("model.layers.%d.mlp.experts.%lld.%s", il, (long long)e, proj.c_str())));
    const linear_weight& w0 = host[0];
    int64_t rows = std::min<int64_t>(w0.n_out, 64), k_in = w0.n_in;
    static const int32_t k_offsets[4][5] = {{0, 7}, {0, 3, 7}, {0, 3, 3, 7}, {0, 3, 3, 5, 7}};
    std::vector<int32_t> offs(k_offsets[n_ex - 1], k_offsets[n_ex - 1] + n_ex + 1);
    std::string offs_str;
    for (int32_t o : offs) offs_str += (offs_str.empty() ? "" : ", ") + std::to_string(o);
    op_case k;
    k.op = std::string("moe_") + matmul_op(w0, mode);
    std::string kind = w0.kind == linear_kind::DENSE ? std::string("dense ") + dtype_name(w0.dense.type) : "nvfp4";
    k.label = strfmt("experts %s %lldx%lld", kind.c_str(), (long long)w0.n_out, (long long)k_in);
    k.classes = "mlp.experts." + proj;
    k.what = strfmt("%s (experts 0..%lld of layer %d, rows [0, %lld)): M=%lld, offsets {%s}, N=%lld K=%lld %s",
                    k.op.c_str(), (long long)(n_ex - 1), il, (long long)rows, (long long)m, offs_str.c_str(),
                    (long long)rows, (long long)k_in, dtype_name(act));
    k.tol = tolerance(k.op, act);
    float xs = w0.has_input_scale && w0.input_global_quant > 0 ? 384.0f / w0.input_global_quant : 1.0f;
    dtype a = act;
    k.run = [=](backend& be, int, const launch_fn& launch) {
        std::vector<linear_weight> pw;
        for (const linear_weight& h : host) pw.push_back(be.prepare_linear(linear_rows(h, rows)));
        moe_matmul_args g;
        g.act = a, g.x = be.upload(host_random(a, {m, k_in}, 96, xs)), g.out = be.alloc(a, {m, rows});
        g.expert_offsets = be.upload(host_i32(offs, {n_ex + 1}));
        g.experts = &pw, g.n_rows = m, g.n = rows, g.k = k_in;
        const tensor& wt = pw[0].kind == linear_kind::DENSE ? pw[0].dense : pw[0].codes;
        g.align = ptr_align({&g.x, &g.out, &wt});
        return launch_read(be, launch, g, {&g.out});
    };
    cases.push_back(k);
}

}  // namespace

tensor host_random(dtype t, std::vector<int64_t> shape, uint64_t seed, float scale) {
    rng r(seed);
    return host_exact(t, std::move(shape), [&](int64_t) { return scale * r.uniform(); });  // elements in order
}

// matmul_silu on the first dense layer's stacked [gate; up] weight, as the forward runs it when
// the pair stacks (model/mlp.cpp): sizes (M, n) use gate and up rows [0, n) each. Only out is
// compared: gu is scratch the fused kernels do not write.
void case_builder::matmul_silu_case() {
    int il = 0;
    while (il < int(c.n_layer) && c.is_moe_layer(il)) ++il;
    if (il == int(c.n_layer)) return;
    const std::string p = "model.layers." + std::to_string(il) + ".mlp.";
    const linear_weight& g = w.linear(p + "gate_proj"), &u = w.linear(p + "up_proj");
    if (!stack_rows({&g, &u})) return;  // the forward runs matmul + silu_mul (their own cases)
    const int64_t n_ff = g.n_out;
    const std::string op = "matmul_silu";
    const matmul_mode md = case_mode(g, mode);
    op_case k;
    k.op = op;
    k.label = strfmt("matmul_silu %s 2x%lldx%lld", g.kind == linear_kind::DENSE ? "dense" : "nvfp4", (long long)n_ff,
                     (long long)g.n_in);
    k.classes = "mlp.gate_proj + mlp.up_proj";
    k.tol = tolerance(op, act);
    int64_t n_small = std::min<int64_t>(n_ff, 32), m_small = std::min<int64_t>(3, max_tokens);
    std::vector<std::pair<int64_t, int64_t>> sizes = test_sizes(max_tokens, m_small, n_small, n_ff);
    k.n_sizes = int(sizes.size());
    for (auto& sz : sizes)
        k.size_strs.push_back(strfmt("matmul_silu (layer %d gate/up rows [0, %lld)): M=%lld n_ff=%lld K=%lld %s", il,
                                     (long long)sz.second, (long long)sz.first, (long long)sz.second,
                                     (long long)g.n_in, dtype_name(act)));
    k.what = k.size_strs[0];
    float xs = g.has_input_scale && g.input_global_quant > 0 ? 384.0f / g.input_global_quant : 1.0f;
    dtype a = act;
    linear_weight hg = g, hu = u;
    auto args_of = [=](const linear_weight* w2, int64_t m, int64_t n) {
        matmul_silu_args r;
        r.act = a, r.mode = md, r.n_ff = n;
        r.mm.act = a, r.mm.w = w2, r.mm.m = m, r.mm.n = 2 * n, r.mm.k = hg.n_in;
        return r;
    };
    k.run = [=](backend& be, int size, const launch_fn& launch) {
        int64_t m = sizes[size_t(size)].first, n = sizes[size_t(size)].second;
        linear_weight lg = linear_rows(hg, n), lu = linear_rows(hu, n);
        linear_weight pw = be.prepare_linear(*stack_rows({&lg, &lu}));
        matmul_silu_args r = args_of(&pw, m, n);
        r.mm.x = be.upload(host_random(a, {m, hg.n_in}, 73, xs));
        r.mm.out = be.alloc(a, {m, 2 * n}), r.out = be.alloc(a, {m, n});
        const tensor& wt = pw.kind == linear_kind::DENSE ? pw.dense : pw.codes;
        r.mm.align = ptr_align({&r.mm.x, &r.mm.out, &wt});
        r.align = ptr_align({&r.mm.x, &r.mm.out, &r.out, &wt});
        return launch_read(be, launch, r, {&r.out});
    };
    auto prepared = std::make_shared<std::unique_ptr<linear_weight>>();
    k.probe = [=](backend& be, int64_t m, const launch_fn& select) {
        if (!*prepared) *prepared = std::make_unique<linear_weight>(be.prepare_linear(*stack_rows({&hg, &hu})));
        const linear_weight& pw = **prepared;
        matmul_silu_args r = args_of(&pw, m, n_ff);
        r.mm.x.type = r.mm.out.type = r.out.type = a;
        r.mm.x.shape = {m, hg.n_in}, r.mm.out.shape = {m, 2 * n_ff}, r.out.shape = {m, n_ff};
        r.mm.x.device = r.mm.out.device = r.out.device = be.device().kind;
        r.mm.align = r.align = ptr_align({pw.kind == linear_kind::DENSE ? &pw.dense : &pw.codes});
        select(r);
    };
    k.probe_m = probe_ms(max_tokens);
    cases.push_back(k);
}

std::vector<op_case> build_cases(const model_config& c, model_weights& w, dtype act, const selftest_options& o) {
    case_builder b{c, w, act, std::max<int64_t>(1, o.max_tokens), o.mode, {}};
    b.get_rows_cases();
    b.norm_case("rms_norm", "model.layers.0.input_layernorm.weight", c.n_embd, 1);
    if (c.qk_norm) b.norm_case("rms_norm", "model.layers.0.self_attn.q_norm.weight", c.head_dim, 2);
    b.norm_case("add_rms_norm", "model.layers.0.post_attention_layernorm.weight", c.n_embd, 3);
    b.matmul_cases();
    b.matmul_silu_case();
    b.rope_case();
    b.kv_cases();
    b.qkv_rope_store_case();
    b.elementwise_cases();
    b.sampling_cases();
    b.moe_cases();
    return std::move(b.cases);
}

}  // namespace selftest_detail
}  // namespace tetra

// make_dummy_weights (dummy_weights.h): the tensor plan of the architecture, then each tensor
// generated row-parallel from dummy_fill's counter-based normals. NVFP4 linears take two passes
// over their rows (the values are regenerated, never stored in f32): the amax of every member of
// the fused group (q/k/v, gate/up share one weight_scale_2, as ModelOpt exports them), then the
// block quantization with S = amax / (6·448). Memory is written once, by the thread that fills it.
#include "io/dummy_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/dummy_fill.h"
#include "io/exclude.h"
#include "io/quantize.h"
#include "nvfp4/nvfp4.h"

namespace tetra {

namespace {

// A CPU tensor whose bytes are left for the generator to write (tensor::alloc zero-fills serially,
// which would cost a single-threaded pass over tens of GB at 70B).
tensor alloc_unfilled(dtype t, std::vector<int64_t> shape) {
    tensor x;
    x.type = t;
    x.shape = std::move(shape);
    size_t padded = (x.nbytes() + 63) / 64 * 64 + 64;
    void* p = std::aligned_alloc(64, padded);
    TETRA_CHECK(p != nullptr, "dummy weights: out of host memory allocating %zu bytes for a %s %s tensor", padded,
                dtype_name(t), x.shape_str().c_str());
    x.owner = std::shared_ptr<void>(p, std::free);
    x.data = p;
    return x;
}

// [rows, cols] (or [cols]) bf16 with values bf16(mean + sigma·z).
tensor make_bf16(const dummy_options& opt, const std::string& name, const std::vector<int64_t>& shape, float mean) {
    tensor t = alloc_unfilled(dtype::BF16, shape);
    const int64_t cols = shape.back(), rows = t.numel() / std::max<int64_t>(cols, 1);
    const uint64_t key = dummy_tensor_key(opt.seed, name);
    uint16_t* out = t.ptr<uint16_t>();
    parallel_for(rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> buf(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
            dummy_normal_row(key, r, cols, k_dummy_sigma, mean, buf.data(), opt.simd);
            for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = uint16_t(f32_bits(buf[size_t(j)]) >> 16);  // exact
        }
    });
    return t;
}

// max |w| of a linear's (bf16-exact) values, regenerated row by row.
float linear_amax(const dummy_options& opt, const std::string& weight_name, int64_t rows, int64_t cols) {
    const uint64_t key = dummy_tensor_key(opt.seed, weight_name);
    std::vector<float> row_amax(size_t(rows), 0.0f);
    parallel_for(rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> buf(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
            dummy_normal_row(key, r, cols, k_dummy_sigma, 0.0f, buf.data(), opt.simd);
            float m = 0.0f;
            for (float v : buf) m = std::max(m, std::fabs(v));
            row_amax[size_t(r)] = m;
        }
    });
    return *std::max_element(row_amax.begin(), row_amax.end());
}

linear_weight make_nvfp4(const dummy_options& opt, const std::string& weight_name, int64_t rows, int64_t cols,
                         float scale_global) {
    linear_weight lw;
    lw.kind = linear_kind::NVFP4;
    lw.n_out = rows;
    lw.n_in = cols;
    lw.codes = alloc_unfilled(dtype::U8, {rows, cols / 2});
    lw.scales = alloc_unfilled(dtype::E4M3, {rows, cols / 16});
    lw.scale_global = scale_global;  // W4A16: no input scale (has_input_scale false)
    const uint64_t key = dummy_tensor_key(opt.seed, weight_name);
    uint8_t *codes = lw.codes.ptr<uint8_t>(), *scales = lw.scales.ptr<uint8_t>();
    parallel_for(rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> buf(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
            dummy_normal_row(key, r, cols, k_dummy_sigma, 0.0f, buf.data(), opt.simd);
            dummy_quantize_row_modelopt(buf.data(), cols, scale_global, codes + r * (cols / 2),
                                        scales + r * (cols / 16), opt.simd);
        }
    });
    return lw;
}

void check_config(const model_config& c) {
    const std::string& p = c.path;
    for (auto f : {std::make_pair("hidden_size", c.n_embd), std::make_pair("intermediate_size", c.n_ff),
                   std::make_pair("num_attention_heads", c.n_head), std::make_pair("num_key_value_heads", c.n_head_kv),
                   std::make_pair("head_dim", c.head_dim), std::make_pair("num_hidden_layers", c.n_layer),
                   std::make_pair("vocab_size", c.n_vocab)})
        TETRA_CHECK(f.second > 0, "dummy weights: %s: %s is %lld; expected > 0", p.c_str(), f.first, (long long)f.second);
    TETRA_CHECK(c.architecture == "LlamaForCausalLM" || c.architecture == "Qwen3ForCausalLM" ||
                    c.architecture == "Qwen3MoeForCausalLM",
                "dummy weights: %s: architecture '%s' has no dummy tensor plan; supported: LlamaForCausalLM, "
                "Qwen3ForCausalLM, Qwen3MoeForCausalLM", p.c_str(), c.architecture.c_str());
}

}  // namespace

std::vector<dummy_tensor> dummy_plan(const model_config& c) {
    check_config(c);
    std::vector<dummy_tensor> plan;
    auto linear = [&](const std::string& m, int64_t n_out, int64_t n_in) {
        plan.push_back({m, {n_out, n_in}, dummy_kind::LINEAR});
    };
    auto vec = [&](const std::string& n, int64_t len, dummy_kind k) { plan.push_back({n, {len}, k}); };
    const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
    plan.push_back({"model.embed_tokens.weight", {c.n_vocab, c.n_embd}, dummy_kind::EMBEDDING});
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        vec(p + "input_layernorm.weight", c.n_embd, dummy_kind::NORM);
        vec(p + "post_attention_layernorm.weight", c.n_embd, dummy_kind::NORM);
        if (c.qk_norm) {  // Qwen3
            vec(p + "self_attn.q_norm.weight", c.head_dim, dummy_kind::NORM);
            vec(p + "self_attn.k_norm.weight", c.head_dim, dummy_kind::NORM);
        }
        linear(p + "self_attn.q_proj", q_dim, c.n_embd);
        linear(p + "self_attn.k_proj", kv_dim, c.n_embd);
        linear(p + "self_attn.v_proj", kv_dim, c.n_embd);
        linear(p + "self_attn.o_proj", c.n_embd, q_dim);
        if (c.attention_bias)
            for (auto qkv : {std::make_pair("q", q_dim), std::make_pair("k", kv_dim), std::make_pair("v", kv_dim)})
                vec(p + "self_attn." + qkv.first + "_proj.bias", qkv.second, dummy_kind::BIAS);
        if (c.is_moe_layer(il)) {  // router (kept bf16 by the default exclusions), experts, shared expert
            linear(p + "mlp.gate", c.n_expert, c.n_embd);
            for (int64_t e = 0; e < c.n_expert; ++e) {
                const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
                linear(x + "gate_proj", c.n_ff_exp, c.n_embd);
                linear(x + "up_proj", c.n_ff_exp, c.n_embd);
                linear(x + "down_proj", c.n_embd, c.n_ff_exp);
            }
            if (c.n_ff_shexp > 0) {
                linear(p + "mlp.shared_expert.gate_proj", c.n_ff_shexp, c.n_embd);
                linear(p + "mlp.shared_expert.up_proj", c.n_ff_shexp, c.n_embd);
                linear(p + "mlp.shared_expert.down_proj", c.n_embd, c.n_ff_shexp);
                linear(p + "mlp.shared_expert_gate", 1, c.n_embd);
            }
            continue;
        }
        linear(p + "mlp.gate_proj", c.n_ff, c.n_embd);
        linear(p + "mlp.up_proj", c.n_ff, c.n_embd);
        linear(p + "mlp.down_proj", c.n_embd, c.n_ff);
    }
    vec("model.norm.weight", c.n_embd, dummy_kind::NORM);
    if (!c.tie_word_embeddings) linear("lm_head", c.n_vocab, c.n_embd);
    return plan;
}

model_weights make_dummy_weights(const model_config& cfg, const dummy_options& opt) {
    TETRA_CHECK(opt.quant == "nvfp4" || opt.quant == "bf16",
                "dummy weights: quant '%s' is not supported; expected nvfp4 (ModelOpt W4A16_NVFP4) or bf16",
                opt.quant.c_str());
    const std::vector<dummy_tensor> plan = dummy_plan(cfg);
    const bool nvfp4 = opt.quant == "nvfp4";
    model_weights w;
    w.format = "dummy";
    w.dir = strfmt("dummy:%s seed=%llu quant=%s", cfg.architecture.c_str(), (unsigned long long)opt.seed,
                   opt.quant.c_str());
    w.quant_algo = nvfp4 ? "W4A16_NVFP4" : "";
    // NVFP4 linears by fused group ("" = alone: a group of its own name).
    std::map<std::string, std::vector<const dummy_tensor*>> groups;
    exclude_matcher defaults(quantize_default_exclude(), exclude_syntax::MODELOPT);
    for (const dummy_tensor& t : plan) {
        const bool quantize = nvfp4 && t.kind == dummy_kind::LINEAR && !defaults.matches(t.name) && t.shape[1] % 16 == 0;
        if (quantize) {
            std::string g = quantize_fused_group(t.name);
            groups[g.empty() ? t.name : g].push_back(&t);
            continue;
        }
        const bool is_linear = t.kind == dummy_kind::LINEAR;
        const std::string name = is_linear ? t.name + ".weight" : t.name;
        w.tensors[name] = make_bf16(opt, name, t.shape, t.kind == dummy_kind::NORM ? 1.0f : 0.0f);
        if (is_linear && nvfp4) w.exclude.push_back(t.name);  // kept dense, as the config would list it
    }
    for (const auto& g : groups) {
        float amax = 0.0f;
        for (const dummy_tensor* t : g.second)
            amax = std::max(amax, linear_amax(opt, t->name + ".weight", t->shape[0], t->shape[1]));
        const float s = nvfp4_scale_global_modelopt(amax);  // weight_scale_2, shared by the group
        for (const dummy_tensor* t : g.second)
            w.linears[t->name] = make_nvfp4(opt, t->name + ".weight", t->shape[0], t->shape[1], s);
    }
    return w;
}

}  // namespace tetra

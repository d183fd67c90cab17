#include "model/layers.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "backend/ops.h"
#include "core/error.h"

namespace tetra {

namespace {

void check_shape(const std::string& name, const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                 const std::string& dir) {
    TETRA_CHECK(got == want, "%s: tensor '%s' has shape %s; expected %s from config.json", dir.c_str(), name.c_str(),
                shape_str(got).c_str(), shape_str(want).c_str());
}

tensor load_vec(model_weights& w, backend& be, const std::string& name, int64_t n) {
    const tensor& t = w.get(name);
    check_shape(name, t.shape, {n}, w.dir);
    return be.upload(t);
}

}  // namespace

const linear_weight& host_linear(model_weights& w, const std::string& module, int64_t n_out, int64_t n_in,
                                 bool dense_ok) {
    const linear_weight& l = w.linear(module, dense_ok);
    TETRA_CHECK(l.n_out == n_out && l.n_in == n_in, "%s: linear '%s' is [%lld, %lld]; expected [%lld, %lld] from config.json",
                w.dir.c_str(), module.c_str(), (long long)l.n_out, (long long)l.n_in, (long long)n_out, (long long)n_in);
    return l;
}

linear_weight load_linear(model_weights& w, backend& be, const std::string& module, int64_t n_out, int64_t n_in,
                          bool dense_ok) {
    return be.prepare_linear(host_linear(w, module, n_out, n_in, dense_ok));
}


// layers.h
std::optional<linear_weight> stack_rows(const std::vector<const linear_weight*>& ls) {
    const linear_weight& a = *ls.front();
    int64_t n = 0;
    for (const linear_weight* l : ls) {
        if (l->kind != a.kind || l->n_in != a.n_in) return std::nullopt;
        if (a.kind == linear_kind::NVFP4) {
            if (f32_bits(l->scale_global) != f32_bits(a.scale_global) || l->has_input_scale != a.has_input_scale ||
                f32_bits(l->input_scale) != f32_bits(a.input_scale) ||
                f32_bits(l->input_global_quant) != f32_bits(a.input_global_quant) || l->scales.type != a.scales.type ||
                l->codes.device != device_kind::CPU || l->scales.device != device_kind::CPU)
                return std::nullopt;
        } else if (l->dense.type != a.dense.type || l->dense.device != device_kind::CPU) {
            return std::nullopt;
        }
        n += l->n_out;
    }
    auto cat = [&](tensor linear_weight::*member, int64_t cols, dtype t) {
        tensor out = tensor::alloc(t, {n, cols});
        size_t off = 0;
        for (const linear_weight* l : ls) {
            const tensor& src = l->*member;
            std::memcpy(out.ptr<uint8_t>() + off, src.data, src.nbytes());
            off += src.nbytes();
        }
        TETRA_ASSERT(off == out.nbytes());
        return out;
    };
    linear_weight f = a;
    f.n_out = n;
    if (a.kind == linear_kind::NVFP4) {
        f.codes = cat(&linear_weight::codes, a.n_in / 2, dtype::U8);
        f.scales = cat(&linear_weight::scales, a.n_in / 16, a.scales.type);
    } else {
        f.dense = cat(&linear_weight::dense, a.n_in, a.dense.type);
    }
    return f;
}

namespace {

// i32 [n_rows · per]: for token t, entry t·per + j = t·stride + first + j (the rows of one part of
// a fused output, viewed as [n_rows · stride, width] rows, for get_rows). Uploaded once.
tensor part_rows(backend& be, int64_t n_rows, int64_t per, int64_t stride, int64_t first) {
    tensor ids = tensor::alloc(dtype::I32, {n_rows * per});
    for (int64_t t = 0; t < n_rows; ++t)
        for (int64_t j = 0; j < per; ++j) ids.ptr<int32_t>()[t * per + j] = int32_t(t * stride + first + j);
    return be.upload(ids);
}

// The forward pass. Buffers for max_tokens rows are allocated once; each step uses the first
// n_tokens rows (tensor_rows views), so the op sequence is identical for every step.
class dense_decoder final : public causal_lm {
  public:
    dense_decoder(const model_config& c, decoder_weights w, backend& be, const model_options& opt)
        : causal_lm(c, be, opt.max_tokens,
                    opt.act ? *opt.act : default_act_type(be.device())),
          w_(std::move(w)), mode_(opt.mode) {
        int64_t n = max_tokens_, q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
        residual_ = be.alloc(act_, {n, c.n_embd});
        h_ = be.alloc(act_, {n, c.n_embd});
        q_ = be.alloc(act_, {n, c.n_head, c.head_dim});
        k_ = be.alloc(act_, {n, c.n_head_kv, c.head_dim});
        v_ = be.alloc(act_, {n, c.n_head_kv, c.head_dim});
        attn_ = be.alloc(act_, {n, q_dim});
        proj_ = be.alloc(act_, {n, c.n_embd});
        bool any_dense_ffn = false, any_split_gu = false;  // MoE layers and fused gate/up need neither buffer
        for (const auto& L : w_.layers) any_dense_ffn |= !L.moe, any_split_gu |= !L.moe && !L.mlp.fused;
        if (any_dense_ffn) gate_ = be.alloc(act_, {n, c.n_ff});
        if (any_split_gu) up_ = be.alloc(act_, {n, c.n_ff});
        last_ = be.alloc(act_, {n, c.n_embd});
        logits_ = be.alloc(act_, {n, c.n_vocab});
        inv_freq_ = be.upload(rope_inv_freq(rope_params_of(c.rope), c.head_dim));
        if (c.n_expert > 0) moe_ = std::make_unique<moe_ffn>(c, be, n, act_);
        bool any_qkv = false, any_gu = false;
        for (const auto& L : w_.layers) any_qkv |= L.fused_qkv, any_gu |= !L.moe && L.mlp.fused;
        const int64_t heads = c.n_head + 2 * c.n_head_kv;
        if (any_qkv) {  // [n, q | k | v]; split by head rows when n > 1
            qkv_ = be.alloc(act_, {n, heads * c.head_dim});
            q_ids_ = part_rows(be, n, c.n_head, heads, 0);
            k_ids_ = part_rows(be, n, c.n_head_kv, heads, c.n_head);
            v_ids_ = part_rows(be, n, c.n_head_kv, heads, c.n_head + c.n_head_kv);
        }
        if (any_gu) gu_ = be.alloc(act_, {n, 2 * c.n_ff});  // [n, gate | up], read by silu_mul_gate_up
        (void)kv_dim;
    }

    const tensor& forward(const forward_batch& b, kv_cache& kv) override {
        const model_config& c = cfg_;
        int64_t n = b.n_tokens;
        TETRA_CHECK(n >= 1 && n <= max_tokens_, "forward: %lld tokens; this model was set up for 1..%lld per step",
                    (long long)n, (long long)max_tokens_);
        TETRA_CHECK(int64_t(kv.k.size()) == c.n_layer, "forward: kv cache has %zu layers; model has %lld", kv.k.size(),
                    (long long)c.n_layer);
        tensor residual = tensor_rows(residual_, 0, n), h = tensor_rows(h_, 0, n), q = tensor_rows(q_, 0, n),
               k = tensor_rows(k_, 0, n), v = tensor_rows(v_, 0, n), attn = tensor_rows(attn_, 0, n),
               proj = tensor_rows(proj_, 0, n);
        tensor gate = gate_.data ? tensor_rows(gate_, 0, n) : tensor{}, up = up_.data ? tensor_rows(up_, 0, n) : tensor{};
        float scale = 1.0f / std::sqrt(float(c.head_dim));
        ops_.begin_step();
        auto run = [&](step_op o) { return ops_.run(o); };
        if (run(step_op::EMBEDDING)) be_.embedding(w_.embed, b.ids, residual);
        tap("embd", -1, residual);
        bool normed = false;  // the previous MoE layer's combine already ran this norm (moe_combine_norm)
        const bool stacked = n == 1 && decode_stack(b, kv, residual, proj, h, q, attn, gate);
        for (int il = stacked ? int(c.n_layer) : 0; il < int(c.n_layer); ++il) {
            const decoder_layer_weights& L = w_.layers[size_t(il)];
            if (run(step_op::ATTN_NORM) && !normed) {
                if (il == 0) be_.rms_norm(residual, L.attn_norm, c.rms_norm_eps, h);
                else be_.add_rms_norm(residual, proj, L.attn_norm, c.rms_norm_eps, h);
            }
            tap("attn_norm", il, h);
            if (L.fused_qkv && fused_stage(L, kv.k[size_t(il)])) {
                // One matmul and one op: q/k norm, rope, q out, k/v into the cache.
                tensor qkv = tensor_reshape(tensor_rows(qkv_, 0, n), {n, c.n_head + 2 * c.n_head_kv, c.head_dim});
                if (run(step_op::QKV))
                    be_.matmul(h, L.qkv, tensor_reshape(qkv, {n, (c.n_head + 2 * c.n_head_kv) * c.head_dim}), mode_);
                if (run(step_op::ROPE_KV))
                    be_.qkv_rope_store(qkv, c.qk_norm ? L.q_norm : tensor{}, c.qk_norm ? L.k_norm : tensor{},
                                       c.rms_norm_eps, b.meta.positions, inv_freq_, q, kv.k[size_t(il)],
                                       kv.v[size_t(il)], b.meta.slot_mapping);
                tap("q", il, q);
            } else {
                if (run(step_op::QKV)) {
                    if (L.fused_qkv) {
                        qkv_proj(L, h, n, q, k, v);
                    } else {
                        be_.matmul(h, L.q, tensor_reshape(q, {n, c.n_head * c.head_dim}), mode_);
                        be_.matmul(h, L.k, tensor_reshape(k, {n, c.n_head_kv * c.head_dim}), mode_);
                        be_.matmul(h, L.v, tensor_reshape(v, {n, c.n_head_kv * c.head_dim}), mode_);
                    }
                }
                const bool rope_kv = run(step_op::ROPE_KV);
                if (rope_kv && c.qk_norm) {
                    tensor qr = tensor_reshape(q, {n * c.n_head, c.head_dim});
                    tensor kr = tensor_reshape(k, {n * c.n_head_kv, c.head_dim});
                    be_.rms_norm(qr, L.q_norm, c.rms_norm_eps, qr);
                    be_.rms_norm(kr, L.k_norm, c.rms_norm_eps, kr);
                }
                if (rope_kv) be_.rope(q, k, b.meta.positions, inv_freq_);
                tap("q", il, q);
                if (rope_kv) be_.kv_store(k, v, kv.k[size_t(il)], kv.v[size_t(il)], b.meta.slot_mapping);
            }
            if (run(step_op::ATTENTION)) be_.attention(q, kv.k[size_t(il)], kv.v[size_t(il)], b.meta, scale, attn);
            tap("attn_out", il, attn);
            if (run(step_op::O_PROJ)) be_.matmul(attn, L.o, proj, mode_);
            // An MoE layer's ffn_norm runs inside its route op (moe_route_front: at decode one CUDA launch
            // for the norm, the router and the route), unless a class of the three is skipped or a tap
            // must see h before the route.
            const bool front = L.moe && !tap_ && ops_.runs(step_op::FFN_NORM) && ops_.runs(step_op::ROUTER) &&
                               ops_.runs(step_op::ROUTE);
            if (run(step_op::FFN_NORM) && !front) be_.add_rms_norm(residual, proj, L.ffn_norm, c.rms_norm_eps, h);
            tap("ffn_norm", il, h);
            normed = false;
            if (L.moe) {
                // the next norm (attn_norm of layer il + 1, or the output norm) in the combine's kernel
                const bool last = il + 1 == int(c.n_layer);
                const tensor& next_w = last ? w_.norm : w_.layers[size_t(il) + 1].attn_norm;
                moe_combine_norm next{residual, next_w, h, c.rms_norm_eps};
                const bool fold = ops_.runs(last ? step_op::OUTPUT_NORM : step_op::ATTN_NORM);
                moe_route_front fr{residual, proj, L.ffn_norm, h, c.rms_norm_eps};
                normed = moe_->forward(*L.moe, h, proj, mode_, ops_, fold ? &next : nullptr, front ? &fr : nullptr);
                tap("moe_ids", il, moe_->topk_ids(n));
            } else {
                if (run(step_op::GATE_UP))
                    gate_up_silu(be_, L.mlp, h, gu_.data ? tensor_rows(gu_, 0, n) : tensor{}, up, gate, mode_);
                if (run(step_op::DOWN)) be_.matmul(gate, L.down, proj, mode_);
            }
            tap("ffn_out", il, proj);
        }
        if (run(step_op::OUTPUT_NORM) && !normed) be_.add_rms_norm(residual, proj, w_.norm, c.rms_norm_eps, h);
        tap("norm", -1, h);
        tensor last = tensor_rows(last_, 0, b.n_logits);
        logits_view_ = tensor_rows(logits_, 0, b.n_logits);
        if (run(step_op::LM_HEAD)) {
            be_.get_rows(h, b.logit_rows, last);
            be_.matmul(last, w_.lm_head, logits_view_, mode_);
        }
        tap("logits", -1, logits_view_);
        return logits_view_;
    }

  private:
    // Whether the backend has a fused qkv_rope_store kernel for this model's shapes (asked once;
    // dtypes, head_dim and alignment do not change between steps). CPU: the composition kernel, so
    // the result is the unfused path's bit for bit.
    bool fused_stage(const decoder_layer_weights& L, const tensor& k_cache) {
        if (fused_stage_ < 0) {
            const model_config& c = cfg_;
            tensor qkv = tensor_reshape(qkv_, {qkv_.dim(0), c.n_head + 2 * c.n_head_kv, c.head_dim});
            fused_stage_ = be_.has_qkv_rope_store(qkv, c.qk_norm ? L.q_norm : tensor{}, c.qk_norm ? L.k_norm : tensor{},
                                                  inv_freq_, q_, k_cache);
        }
        return fused_stage_ == 1;
    }
    // A batch-1 decode step's layers as one op (backend::decode_layers) where every layer is dense
    // with fused qkv and gate/up, nothing observes the layers (no tap, no skipped op class) and the
    // backend would run a fused kernel for it (has_decode_layers; today the persistent CUDA kernel,
    // when TETRA_KERNEL forces it: docs/cuda-backend.md); false: the caller runs the layers op by op,
    // which is what the op's composition kernels run too. The model's conditions and the backend's
    // answer are asked once, as fused_stage() asks its own (shapes, dtypes, buffers and TETRA_KERNEL
    // do not change between steps): a step that will not stack builds no arguments.
    bool decode_stack(const forward_batch& b, kv_cache& kv, const tensor& residual, const tensor& proj,
                      const tensor& h, const tensor& q, const tensor& attn, const tensor& gate) {
        const model_config& c = cfg_;
        if (tap_ || ops_.skip != 0 || b.meta.n_seqs != 1 || stack_ == 0) return false;
        if (stack_ < 0) {
            bool ok = gu_.data && qkv_.data;
            for (const auto& L : w_.layers) ok = ok && !L.moe && L.fused_qkv && L.mlp.fused;
            if (!ok || !fused_stage(w_.layers[0], kv.k[0])) {
                stack_ = 0;
                return false;
            }
        }
        decode_layers_args a;
        for (size_t il = 0; il < w_.layers.size(); ++il) {
            const decoder_layer_weights& L = w_.layers[il];
            decode_layer_ref r;
            r.attn_norm = L.attn_norm, r.ffn_norm = L.ffn_norm;
            if (c.qk_norm) r.q_norm = L.q_norm, r.k_norm = L.k_norm;
            r.qkv = &L.qkv, r.o = &L.o, r.gate_up = &L.mlp.gate_up, r.down = &L.down;
            r.k_cache = kv.k[il], r.v_cache = kv.v[il];
            a.layers.push_back(r);
        }
        const int64_t heads = c.n_head + 2 * c.n_head_kv;
        a.residual = residual, a.proj = proj, a.first_plain = true, a.h = h;
        a.qkv = tensor_reshape(tensor_rows(qkv_, 0, 1), {1, heads, c.head_dim}), a.q = q, a.attn = attn;
        a.gu = tensor_rows(gu_, 0, 1), a.gate = gate, a.inv_freq = inv_freq_, a.meta = b.meta;
        a.eps = c.rms_norm_eps, a.scale = 1.0f / std::sqrt(float(c.head_dim)), a.mode = mode_;
        a.n_head = c.n_head, a.n_head_kv = c.n_head_kv, a.head_dim = c.head_dim, a.n_embd = c.n_embd, a.n_ff = c.n_ff;
        if (stack_ < 0) stack_ = be_.has_decode_layers(a) ? 1 : 0;
        if (stack_ == 0) return false;
        for (int64_t il = 0; il < c.n_layer; ++il)  // the classes the op stands for, as the loop counts them
            for (step_op o : {step_op::ATTN_NORM, step_op::QKV, step_op::ROPE_KV, step_op::ATTENTION, step_op::O_PROJ,
                              step_op::FFN_NORM, step_op::GATE_UP, step_op::DOWN})
                ops_.run(o);
        be_.decode_layers(a);
        ++stacked_forwards_;
        return true;
    }
    // One matmul into [n, q | k | v]. One row (batch-1 decode): q, k, v become views of it (no
    // copy). More rows: the parts are gathered by head rows into the q/k/v buffers (get_rows).
    void qkv_proj(const decoder_layer_weights& L, const tensor& h, int64_t n, tensor& q, tensor& k, tensor& v) {
        const model_config& c = cfg_;
        const int64_t hd = c.head_dim, qd = c.n_head * hd, kvd = c.n_head_kv * hd;
        tensor qkv = tensor_rows(qkv_, 0, n);
        be_.matmul(h, L.qkv, qkv, mode_);
        if (n == 1) {
            tensor flat = tensor_reshape(qkv, {qd + 2 * kvd});
            q = tensor_reshape(tensor_rows(flat, 0, qd), {1, c.n_head, hd});
            k = tensor_reshape(tensor_rows(flat, qd, kvd), {1, c.n_head_kv, hd});
            v = tensor_reshape(tensor_rows(flat, qd + kvd, kvd), {1, c.n_head_kv, hd});
            return;
        }
        tensor heads = tensor_reshape(qkv, {n * (c.n_head + 2 * c.n_head_kv), hd});
        be_.get_rows(heads, tensor_rows(q_ids_, 0, n * c.n_head), tensor_reshape(q, {n * c.n_head, hd}));
        be_.get_rows(heads, tensor_rows(k_ids_, 0, n * c.n_head_kv), tensor_reshape(k, {n * c.n_head_kv, hd}));
        be_.get_rows(heads, tensor_rows(v_ids_, 0, n * c.n_head_kv), tensor_reshape(v, {n * c.n_head_kv, hd}));
    }
    void tap(const char* name, int il, const tensor& t) {
        if (tap_) tap_(name, il, t);
    }
    decoder_weights w_;
    matmul_mode mode_;
    int fused_stage_ = -1;  // fused_stage(): -1 not asked yet
    int stack_ = -1;        // decode_stack(): -1 not asked yet, 0 never, 1 every batch-1 step
    tensor residual_, h_, q_, k_, v_, attn_, proj_, gate_, up_, last_, logits_, logits_view_, inv_freq_;
    tensor qkv_, gu_, q_ids_, k_ids_, v_ids_;  // fused projections (see qkv_proj)
    std::unique_ptr<moe_ffn> moe_;  // buffers of the MoE layers (models with n_expert > 0)
};

}  // namespace

decoder_weights load_decoder_weights(const model_config& c, model_weights& w, backend& be,
                                     const std::function<void(int64_t, int64_t)>& progress, bool fuse) {
    decoder_weights d;
    int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
    const tensor& embed = w.get("model.embed_tokens.weight");
    check_shape("model.embed_tokens.weight", embed.shape, {c.n_vocab, c.n_embd}, w.dir);
    d.embed = be.upload(embed);
    for (int64_t il = 0; il < c.n_layer; ++il) {
        std::string p = "model.layers." + std::to_string(il) + ".";
        decoder_layer_weights L;
        L.attn_norm = load_vec(w, be, p + "input_layernorm.weight", c.n_embd);
        L.ffn_norm = load_vec(w, be, p + "post_attention_layernorm.weight", c.n_embd);
        if (c.qk_norm) {
            L.q_norm = load_vec(w, be, p + "self_attn.q_norm.weight", c.head_dim);
            L.k_norm = load_vec(w, be, p + "self_attn.k_norm.weight", c.head_dim);
        }
        {
            const linear_weight& q = host_linear(w, p + "self_attn.q_proj", q_dim, c.n_embd);
            const linear_weight& k = host_linear(w, p + "self_attn.k_proj", kv_dim, c.n_embd);
            const linear_weight& v = host_linear(w, p + "self_attn.v_proj", kv_dim, c.n_embd);
            if (auto f = fuse ? stack_rows({&q, &k, &v}) : std::nullopt) {
                L.qkv = be.prepare_linear(*f);
                L.fused_qkv = true;
            } else {
                L.q = be.prepare_linear(q), L.k = be.prepare_linear(k), L.v = be.prepare_linear(v);
            }
        }
        L.o = load_linear(w, be, p + "self_attn.o_proj", c.n_embd, q_dim);
        if (c.is_moe_layer(il)) {
            L.moe = std::make_shared<const moe_layer_weights>(load_moe_layer(c, w, be, p, fuse));
        } else {
            L.mlp = load_gate_up_weights(w, be, p + "mlp.", c.n_ff, c.n_embd, fuse);
            L.down = load_linear(w, be, p + "mlp.down_proj", c.n_embd, c.n_ff);
        }
        d.layers.push_back(std::move(L));
        if (progress) progress(il + 1, c.n_layer);
    }
    d.norm = load_vec(w, be, "model.norm.weight", c.n_embd);
    // Tied: the output projection is the embedding matrix (HF ties them; no lm_head tensor needed).
    d.lm_head = load_linear(w, be, c.tie_word_embeddings ? "model.embed_tokens" : "lm_head", c.n_vocab, c.n_embd,
                            /*dense_ok=*/true);
    return d;
}

std::unique_ptr<causal_lm> make_dense_decoder(const model_config& c, decoder_weights w, backend& be,
                                              const model_options& opt) {
    return std::make_unique<dense_decoder>(c, std::move(w), be, opt);
}

}  // namespace tetra

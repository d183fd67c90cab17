#include "model/layers.h"

#include <cmath>

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

linear_weight load_linear(model_weights& w, backend& be, const std::string& module, int64_t n_out, int64_t n_in,
                          bool dense_ok = false) {
    const linear_weight& l = w.linear(module, dense_ok);
    TETRA_CHECK(l.n_out == n_out && l.n_in == n_in, "%s: linear '%s' is [%lld, %lld]; expected [%lld, %lld] from config.json",
                w.dir.c_str(), module.c_str(), (long long)l.n_out, (long long)l.n_in, (long long)n_out, (long long)n_in);
    return be.prepare_linear(l);
}

// The forward pass. Buffers for max_tokens rows are allocated once; each step uses the first
// n_tokens rows (tensor_rows views), so the op sequence is identical for every step.
class dense_decoder final : public causal_lm {
  public:
    dense_decoder(const model_config& c, decoder_weights w, backend& be, const model_options& opt)
        : causal_lm(c, be, opt.max_tokens,
                    opt.act ? *opt.act : be.device().kind == device_kind::CPU ? dtype::F32 : dtype::BF16),
          w_(std::move(w)), mode_(opt.mode) {
        int64_t n = max_tokens_, q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
        residual_ = be.alloc(act_, {n, c.n_embd});
        h_ = be.alloc(act_, {n, c.n_embd});
        q_ = be.alloc(act_, {n, c.n_head, c.head_dim});
        k_ = be.alloc(act_, {n, c.n_head_kv, c.head_dim});
        v_ = be.alloc(act_, {n, c.n_head_kv, c.head_dim});
        attn_ = be.alloc(act_, {n, q_dim});
        proj_ = be.alloc(act_, {n, c.n_embd});
        gate_ = be.alloc(act_, {n, c.n_ff});
        up_ = be.alloc(act_, {n, c.n_ff});
        last_ = be.alloc(act_, {n, c.n_embd});
        logits_ = be.alloc(act_, {n, c.n_vocab});
        rope_params rp;
        rp.theta = c.rope.theta;
        if (c.rope.type == "llama3") {
            rp.scaling = rope_scaling_type::LLAMA3;
            rp.factor = c.rope.factor;
            rp.low_freq_factor = c.rope.low_freq_factor;
            rp.high_freq_factor = c.rope.high_freq_factor;
            rp.original_max_position_embeddings = c.rope.original_max_position;
        }
        inv_freq_ = be.upload(rope_inv_freq(rp, c.head_dim));
        if (c.n_expert > 0) moe_ = std::make_unique<moe_ffn>(c, be, n, act_);
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
               proj = tensor_rows(proj_, 0, n), gate = tensor_rows(gate_, 0, n), up = tensor_rows(up_, 0, n);
        float scale = 1.0f / std::sqrt(float(c.head_dim));
        be_.embedding(w_.embed, b.ids, residual);
        tap("embd", -1, residual);
        for (int il = 0; il < int(c.n_layer); ++il) {
            const decoder_layer_weights& L = w_.layers[size_t(il)];
            if (il == 0) be_.rms_norm(residual, L.attn_norm, c.rms_norm_eps, h);
            else be_.add_rms_norm(residual, proj, L.attn_norm, c.rms_norm_eps, h);
            tap("attn_norm", il, h);
            be_.matmul(h, L.q, tensor_reshape(q, {n, c.n_head * c.head_dim}), mode_);
            be_.matmul(h, L.k, tensor_reshape(k, {n, c.n_head_kv * c.head_dim}), mode_);
            be_.matmul(h, L.v, tensor_reshape(v, {n, c.n_head_kv * c.head_dim}), mode_);
            if (c.qk_norm) {
                tensor qr = tensor_reshape(q, {n * c.n_head, c.head_dim});
                tensor kr = tensor_reshape(k, {n * c.n_head_kv, c.head_dim});
                be_.rms_norm(qr, L.q_norm, c.rms_norm_eps, qr);
                be_.rms_norm(kr, L.k_norm, c.rms_norm_eps, kr);
            }
            be_.rope(q, k, b.meta.positions, inv_freq_);
            tap("q", il, q);
            be_.kv_store(k, v, kv.k[size_t(il)], kv.v[size_t(il)], b.meta.slot_mapping);
            be_.attention(q, kv.k[size_t(il)], kv.v[size_t(il)], b.meta, scale, attn);
            tap("attn_out", il, attn);
            be_.matmul(attn, L.o, proj, mode_);
            be_.add_rms_norm(residual, proj, L.ffn_norm, c.rms_norm_eps, h);
            tap("ffn_norm", il, h);
            if (L.moe) {
                moe_->forward(*L.moe, h, proj, mode_);
            } else {
                be_.matmul(h, L.gate, gate, mode_);
                be_.matmul(h, L.up, up, mode_);
                be_.silu_mul(gate, up, gate);
                be_.matmul(gate, L.down, proj, mode_);
            }
            tap("ffn_out", il, proj);
        }
        be_.add_rms_norm(residual, proj, w_.norm, c.rms_norm_eps, h);
        tap("norm", -1, h);
        tensor last = tensor_rows(last_, 0, b.n_logits);
        be_.get_rows(h, b.logit_rows, last);
        logits_view_ = tensor_rows(logits_, 0, b.n_logits);
        be_.matmul(last, w_.lm_head, logits_view_, mode_);
        tap("logits", -1, logits_view_);
        return logits_view_;
    }

  private:
    void tap(const char* name, int il, const tensor& t) {
        if (tap_) tap_(name, il, t);
    }
    decoder_weights w_;
    matmul_mode mode_;
    tensor residual_, h_, q_, k_, v_, attn_, proj_, gate_, up_, last_, logits_, logits_view_, inv_freq_;
    std::unique_ptr<moe_ffn> moe_;  // buffers of the MoE layers (models with n_expert > 0)
};

}  // namespace

decoder_weights load_decoder_weights(const model_config& c, model_weights& w, backend& be,
                                     const std::function<void(int64_t, int64_t)>& progress) {
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
        L.q = load_linear(w, be, p + "self_attn.q_proj", q_dim, c.n_embd);
        L.k = load_linear(w, be, p + "self_attn.k_proj", kv_dim, c.n_embd);
        L.v = load_linear(w, be, p + "self_attn.v_proj", kv_dim, c.n_embd);
        L.o = load_linear(w, be, p + "self_attn.o_proj", c.n_embd, q_dim);
        if (c.is_moe_layer(il)) {
            L.moe = std::make_shared<const moe_layer_weights>(load_moe_layer(c, w, be, p));
        } else {
            L.gate = load_linear(w, be, p + "mlp.gate_proj", c.n_ff, c.n_embd);
            L.up = load_linear(w, be, p + "mlp.up_proj", c.n_ff, c.n_embd);
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

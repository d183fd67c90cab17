#include "model/footprint.h"

#include <string>

namespace tetra {

namespace {

int64_t linear_bytes(const linear_weight& l) {
    if (l.kind == linear_kind::NVFP4) return l.n_out * l.n_in / 2 + l.n_out * l.n_in / 16;
    return l.n_out * l.n_in * int64_t(dtype_size(l.dense.type));
}

}  // namespace

model_footprint decode_footprint(const model_config& c, model_weights& w, int kv_dtype_bytes) {
    model_footprint f;
    // Adds share × the module's bytes and parameters (to the total and to op's class); returns the
    // module's bytes.
    auto add = [&](step_op op, const std::string& module, bool dense_ok, int64_t share = 1) {
        const linear_weight& l = w.linear(module, dense_ok);
        f.weight_bytes += linear_bytes(l) * share;
        f.op_bytes[size_t(op)] += linear_bytes(l) * share;
        f.n_params += l.n_out * l.n_in * share;
        return linear_bytes(l);
    };
    static const char* const qkv[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"};
    f.expert_bytes.assign(size_t(c.n_layer), 0);
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        for (const char* m : qkv) add(step_op::QKV, p + m, false);
        add(step_op::O_PROJ, p + "self_attn.o_proj", false);
        if (!c.is_moe_layer(il)) {
            add(step_op::GATE_UP, p + "mlp.gate_proj", false);
            add(step_op::GATE_UP, p + "mlp.up_proj", false);
            add(step_op::DOWN, p + "mlp.down_proj", false);
            continue;
        }
        // MoE: the router, n_expert_used of the n_expert experts (all experts have the same size, so
        // expert 0 stands for each), and the shared expert with its gate.
        add(step_op::ROUTER, p + "mlp.gate", true);
        const std::string e = p + "mlp.experts.0.";
        f.expert_bytes[size_t(il)] += add(step_op::EXPERT_GATE_UP, e + "gate_proj", false, c.n_expert_used);
        f.expert_bytes[size_t(il)] += add(step_op::EXPERT_GATE_UP, e + "up_proj", false, c.n_expert_used);
        f.expert_bytes[size_t(il)] += add(step_op::EXPERT_DOWN, e + "down_proj", false, c.n_expert_used);
        if (c.n_ff_shexp > 0) {
            for (const char* m : {"gate_proj", "up_proj", "down_proj"})
                add(step_op::SHARED_EXPERT, p + "mlp.shared_expert." + m, false);
            add(step_op::SHARED_EXPERT, p + "mlp.shared_expert_gate", true);
        }
    }
    const linear_weight& head = w.linear(c.tie_word_embeddings ? "model.embed_tokens" : "lm_head", true);
    f.lm_head_bytes = linear_bytes(head);
    f.weight_bytes += f.lm_head_bytes;
    f.op_bytes[size_t(step_op::LM_HEAD)] = f.lm_head_bytes;
    f.n_params += head.n_out * head.n_in;
    f.kv_bytes_per_token = 2 * c.n_layer * c.n_head_kv * c.head_dim * int64_t(kv_dtype_bytes);
    return f;
}

}  // namespace tetra

// MoE feed-forward block (moe.h): weight loading with config shape checks, and the forward as a
// fixed sequence of backend ops over buffers sized for max_tokens (views of the first n rows).
#include "model/moe.h"

#include "backend/moe.h"
#include "core/error.h"

namespace tetra {

namespace {

linear_weight load(model_weights& w, backend& be, const std::string& module, int64_t n_out, int64_t n_in,
                   bool dense_ok = false) {
    const linear_weight& l = w.linear(module, dense_ok);
    TETRA_CHECK(l.n_out == n_out && l.n_in == n_in,
                "%s: linear '%s' is [%lld, %lld]; expected [%lld, %lld] from config.json", w.dir.c_str(),
                module.c_str(), (long long)l.n_out, (long long)l.n_in, (long long)n_out, (long long)n_in);
    return be.prepare_linear(l);
}

}  // namespace

moe_layer_weights load_moe_layer(const model_config& c, model_weights& w, backend& be, const std::string& p) {
    moe_layer_weights L;
    // Routers and the shared-expert gate are never Linear quantization targets (ModelOpt and
    // compressed-tensors keep them dense): dense_ok, and an NVFP4 one is taken as the checkpoint says.
    L.router = load(w, be, p + "mlp.gate", c.n_expert, c.n_embd, /*dense_ok=*/true);
    for (int64_t e = 0; e < c.n_expert; ++e) {
        std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        L.gate.push_back(load(w, be, x + "gate_proj", c.n_ff_exp, c.n_embd));
        L.up.push_back(load(w, be, x + "up_proj", c.n_ff_exp, c.n_embd));
        L.down.push_back(load(w, be, x + "down_proj", c.n_embd, c.n_ff_exp));
    }
    for (const auto* v : {&L.gate, &L.up, &L.down})
        for (const linear_weight& e : *v)
            TETRA_CHECK(e.kind == (*v)[0].kind,
                        "%s: the experts of '%smlp.experts' mix NVFP4 and dense weights; expected one kind per projection",
                        w.dir.c_str(), p.c_str());
    L.has_shared = c.n_ff_shexp > 0;
    if (L.has_shared) {
        L.shared_gate = load(w, be, p + "mlp.shared_expert.gate_proj", c.n_ff_shexp, c.n_embd);
        L.shared_up = load(w, be, p + "mlp.shared_expert.up_proj", c.n_ff_shexp, c.n_embd);
        L.shared_down = load(w, be, p + "mlp.shared_expert.down_proj", c.n_embd, c.n_ff_shexp);
        L.shared_expert_gate = load(w, be, p + "mlp.shared_expert_gate", 1, c.n_embd, /*dense_ok=*/true);
    }
    return L;
}

moe_ffn::moe_ffn(const model_config& c, backend& be, int64_t n, dtype act) : c_(c), be_(be) {
    int64_t k = c.n_expert_used, rows = n * k;
    logits_ = be.alloc(act, {n, c.n_expert});
    ids_ = be.alloc(dtype::I32, {n, k});
    weights_ = be.alloc(dtype::F32, {n, k});
    counts_ = be.alloc(dtype::I32, {c.n_expert});
    offsets_ = be.alloc(dtype::I32, {c.n_expert + 1});
    sorted_ = be.alloc(dtype::I32, {rows});
    dest_ = be.alloc(dtype::I32, {n, k});
    xs_ = be.alloc(act, {rows, c.n_embd});
    g_ = be.alloc(act, {rows, c.n_ff_exp});
    u_ = be.alloc(act, {rows, c.n_ff_exp});
    ys_ = be.alloc(act, {rows, c.n_embd});
    if (c.n_ff_shexp > 0) {
        sh_g_ = be.alloc(act, {n, c.n_ff_shexp});
        sh_u_ = be.alloc(act, {n, c.n_ff_shexp});
        sh_y_ = be.alloc(act, {n, c.n_embd});
        sh_gate_ = be.alloc(act, {n, 1});
    }
}

void moe_ffn::forward(const moe_layer_weights& L, const tensor& h, const tensor& out, matmul_mode mode) {
    int64_t n = h.dim(0), k = c_.n_expert_used, rows = n * k;
    tensor logits = tensor_rows(logits_, 0, n), ids = tensor_rows(ids_, 0, n), wts = tensor_rows(weights_, 0, n);
    tensor sorted = tensor_rows(sorted_, 0, rows), dest = tensor_rows(dest_, 0, n);
    tensor xs = tensor_rows(xs_, 0, rows), g = tensor_rows(g_, 0, rows), u = tensor_rows(u_, 0, rows);
    tensor ys = tensor_rows(ys_, 0, rows);
    be_.matmul(h, L.router, logits, mode);
    moe_route(be_, logits, c_.norm_topk_prob, ids, wts);
    moe_permute(be_, ids, c_.n_expert, counts_, offsets_, sorted, dest);
    be_.get_rows(h, sorted, xs);
    moe_matmul(be_, xs, L.gate, offsets_, g, mode);
    moe_matmul(be_, xs, L.up, offsets_, u, mode);
    be_.silu_mul(g, u, g);
    moe_matmul(be_, g, L.down, offsets_, ys, mode);
    if (!L.has_shared) {
        moe_combine(be_, ys, dest, wts, out);
        return;
    }
    tensor sg = tensor_rows(sh_g_, 0, n), su = tensor_rows(sh_u_, 0, n), sy = tensor_rows(sh_y_, 0, n);
    tensor gate = tensor_rows(sh_gate_, 0, n);
    be_.matmul(h, L.shared_gate, sg, mode);
    be_.matmul(h, L.shared_up, su, mode);
    be_.silu_mul(sg, su, sg);
    be_.matmul(sg, L.shared_down, sy, mode);
    be_.matmul(h, L.shared_expert_gate, gate, mode);
    moe_combine(be_, ys, dest, wts, out, sy, gate);
}

}  // namespace tetra

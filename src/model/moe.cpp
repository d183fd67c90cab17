// MoE feed-forward block (moe.h): weight loading with config shape checks (each expert's gate/up
// stacked into one weight where exact), and the forward as a fixed sequence of backend ops over
// buffers sized for max_tokens (views of the first n rows).
#include "model/moe.h"

#include <optional>

#include "backend/moe.h"
#include "core/error.h"
#include "model/layers.h"

namespace tetra {

namespace {

// Every expert's gate/up pair stacked (moe_layer_weights::gate_up), or empty when one pair does not
// stack exactly (the layer then keeps the separate projections).
std::vector<linear_weight> load_gate_up(const model_config& c, model_weights& w, backend& be, const std::string& p) {
    std::vector<linear_weight> gu;
    for (int64_t e = 0; e < c.n_expert; ++e) {
        std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        const linear_weight& g = host_linear(w, x + "gate_proj", c.n_ff_exp, c.n_embd);
        const linear_weight& u = host_linear(w, x + "up_proj", c.n_ff_exp, c.n_embd);
        std::optional<linear_weight> f = stack_rows({&g, &u});
        if (!f) return {};
        gu.push_back(be.prepare_linear(*f));
    }
    return gu;
}

}  // namespace

moe_layer_weights load_moe_layer(const model_config& c, model_weights& w, backend& be, const std::string& p,
                                 bool fuse) {
    moe_layer_weights L;
    // Routers and the shared-expert gate are never Linear quantization targets (ModelOpt and
    // compressed-tensors keep them dense): dense_ok, and an NVFP4 one is taken as the checkpoint says.
    L.router = load_linear(w, be, p + "mlp.gate", c.n_expert, c.n_embd, /*dense_ok=*/true);
    if (fuse) L.gate_up = load_gate_up(c, w, be, p);
    L.fused_gate_up = !L.gate_up.empty();
    for (int64_t e = 0; e < c.n_expert; ++e) {
        std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        if (!L.fused_gate_up) {
            L.gate.push_back(load_linear(w, be, x + "gate_proj", c.n_ff_exp, c.n_embd));
            L.up.push_back(load_linear(w, be, x + "up_proj", c.n_ff_exp, c.n_embd));
        }
        L.down.push_back(load_linear(w, be, x + "down_proj", c.n_embd, c.n_ff_exp));
    }
    for (const auto* v : {&L.gate, &L.up, &L.gate_up, &L.down})
        for (const linear_weight& e : *v)
            TETRA_CHECK(e.kind == (*v)[0].kind,
                        "%s: the experts of '%smlp.experts' mix NVFP4 and dense weights; expected one kind per projection",
                        w.dir.c_str(), p.c_str());
    L.has_shared = c.n_ff_shexp > 0;
    if (L.has_shared) {
        L.shared = load_gate_up_weights(w, be, p + "mlp.shared_expert.", c.n_ff_shexp, c.n_embd, fuse);
        L.shared_down = load_linear(w, be, p + "mlp.shared_expert.down_proj", c.n_embd, c.n_ff_shexp);
        L.shared_expert_gate = load_linear(w, be, p + "mlp.shared_expert_gate", 1, c.n_embd, /*dense_ok=*/true);
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
    gu_ = be.alloc(act, {rows, 2 * c.n_ff_exp});
    g_ = be.alloc(act, {rows, c.n_ff_exp});
    ys_ = be.alloc(act, {rows, c.n_embd});
    if (c.n_ff_shexp > 0) {
        sh_gu_ = be.alloc(act, {n, 2 * c.n_ff_shexp});
        sh_g_ = be.alloc(act, {n, c.n_ff_shexp});
        sh_y_ = be.alloc(act, {n, c.n_embd});
        sh_gate_ = be.alloc(act, {n, 1});
    }
}

namespace {

// An [n, ff] view of the first n·ff elements of buf (the fused gate/up buffer, where the unfused
// path puts its up output: same allocation, same alignment as a buffer of its own).
tensor front(const tensor& buf, int64_t n, int64_t ff) {
    return tensor_reshape(tensor_rows(tensor_reshape(buf, {buf.numel()}), 0, n * ff), {n, ff});
}

}  // namespace

bool moe_ffn::forward(const moe_layer_weights& L, const tensor& h, const tensor& out, matmul_mode mode, step_ops& ops,
                      const moe_combine_norm* norm, const moe_route_front* rf) {
    int64_t n = h.dim(0), k = c_.n_expert_used, rows = n * k;
    tensor logits = tensor_rows(logits_, 0, n), ids = tensor_rows(ids_, 0, n), wts = tensor_rows(weights_, 0, n);
    tensor sorted = tensor_rows(sorted_, 0, rows), dest = tensor_rows(dest_, 0, n);
    tensor xs = tensor_rows(xs_, 0, rows), g = tensor_rows(g_, 0, rows), ys = tensor_rows(ys_, 0, rows);
    // With a front, the caller's add_rms_norm, the router and the route are one op (the CUDA decode
    // kernel: one launch for the three; moe_route_front_sm90.cu).
    moe_route_front f;
    if (rf) f = *rf, f.router = &L.router, f.mode = mode;
    const bool router = ops.run(step_op::ROUTER);  // with a front: inside the route op (the caller checked it runs)
    if (router && !rf) be_.matmul(h, L.router, logits, mode);
    // The grouped matmuls run at least two launches after the permutation wrote the offsets (the
    // gather is between): offsets_early lets their kernels find their work before the previous
    // kernel ends (moe_matmul_args::offsets_early). `early` stays false only where a skipped class
    // (bench --breakdown) would leave no launch between the permutation and the matmul.
    bool early = true;
    if (ops.run(step_op::ROUTE)) {
        moe_route_permute(be_, logits, c_.norm_topk_prob, ids, wts, counts_, offsets_, sorted, dest, rf ? &f : nullptr);
        early = false;
    }
    if (ops.run(step_op::GATHER)) {
        be_.get_rows(h, sorted, xs);
        early = true;
    }
    // moe_route gives a token k distinct experts: an expert has at most one row per token.
    const int64_t per_expert = n;
    const bool gate_up = ops.run(step_op::EXPERT_GATE_UP);
    if (gate_up && L.fused_gate_up) {  // one grouped matmul over [gate; up] with silu (gu: scratch; one CUDA kernel)
        moe_matmul_silu(be_, xs, L.gate_up, offsets_, tensor_rows(gu_, 0, rows), g, mode, early, per_expert);
    } else if (gate_up) {
        tensor u = front(gu_, rows, c_.n_ff_exp);
        moe_matmul(be_, xs, L.gate, offsets_, g, mode, early, per_expert);
        moe_matmul(be_, xs, L.up, offsets_, u, mode, true, per_expert);
        be_.silu_mul(g, u, g);
    }
    if (ops.run(step_op::EXPERT_DOWN)) moe_matmul(be_, g, L.down, offsets_, ys, mode, early || gate_up, per_expert);
    if (!L.has_shared) {
        if (!ops.run(step_op::COMBINE)) return false;
        moe_combine(be_, ys, dest, wts, out, tensor(), tensor(), norm);
        return norm != nullptr;
    }
    tensor sg = tensor_rows(sh_g_, 0, n), sy = tensor_rows(sh_y_, 0, n), gate = tensor_rows(sh_gate_, 0, n);
    if (ops.run(step_op::SHARED_EXPERT)) {
        gate_up_silu(be_, L.shared, h, tensor_rows(sh_gu_, 0, n), front(sh_gu_, n, c_.n_ff_shexp), sg, mode);
        be_.matmul(sg, L.shared_down, sy, mode);
        be_.matmul(h, L.shared_expert_gate, gate, mode);
    }
    if (!ops.run(step_op::COMBINE)) return false;
    moe_combine(be_, ys, dest, wts, out, sy, gate, norm);
    return norm != nullptr;
}

}  // namespace tetra

// MoE op wrappers (moe.h): validate every argument once (shapes, dtypes, device), fill the op's args
// struct and launch the kernel the registry selects — the pattern of backend.cpp. Nothing here reads
// tensor contents (they may live on a device): ids/offsets are range-checked by the kernels.
#include "backend/moe.h"

#include <cmath>
#include <initializer_list>

#include "backend/op_checks.h"
#include "core/error.h"

namespace tetra {

using namespace op_checks;

namespace {

matmul_mode resolve_mode(const linear_weight& w, matmul_mode mode) {
    if (w.kind == linear_kind::DENSE) return matmul_mode::DENSE;
    if (mode != matmul_mode::AUTO) return mode;
    return w.has_input_scale ? matmul_mode::W4A4 : matmul_mode::W4A16;
}

// Expert e of a grouped weight: same kind and shape as expert 0, and usable in `mode`.
void check_expert(const backend& b, const linear_weight& w, size_t e, const linear_weight& w0, matmul_mode mode) {
    const char* op = "moe_matmul";
    TETRA_CHECK(w.kind == w0.kind && w.n_out == w0.n_out && w.n_in == w0.n_in,
                "%s: expert %zu is %s [%lld, %lld]; expected %s [%lld, %lld] like expert 0 (all experts of one "
                "projection must share kind and shape)",
                op, e, w.kind == linear_kind::DENSE ? "dense" : "nvfp4", (long long)w.n_out, (long long)w.n_in,
                w0.kind == linear_kind::DENSE ? "dense" : "nvfp4", (long long)w0.n_out, (long long)w0.n_in);
    if (mode == matmul_mode::DENSE) {
        check_on(b, w.dense, op, "expert.dense"), check_act(w.dense, op, "expert.dense");
        check_shape(w.dense, {w.n_out, w.n_in}, op, "expert.dense");
        return;
    }
    TETRA_CHECK(w.kind == linear_kind::NVFP4, "%s: mode %s needs NVFP4 experts; expert %zu is dense", op,
                matmul_mode_name(mode), e);
    TETRA_CHECK(w.n_in % 16 == 0, "%s: expert %zu has n_in %lld; expected a multiple of 16", op, e, (long long)w.n_in);
    check_on(b, w.codes, op, "expert.codes"), check_on(b, w.scales, op, "expert.scales");
    check_dtype(w.codes, dtype::U8, op, "expert.codes"), check_shape(w.codes, {w.n_out, w.n_in / 2}, op, "expert.codes");
    TETRA_CHECK(w.scales.type == dtype::E4M3 || w.scales.type == dtype::U8,
                "%s: expert %zu scales have dtype %s; expected e4m3", op, e, dtype_name(w.scales.type));
    check_shape(w.scales, {w.n_out, w.n_in / 16}, op, "expert.scales");
    TETRA_CHECK(std::isfinite(w.scale_global), "%s: expert %zu scale_global %g is not finite", op, e,
                double(w.scale_global));
    if (mode == matmul_mode::W4A4)
        TETRA_CHECK(w.has_input_scale && std::isfinite(w.input_global_quant) && w.input_global_quant > 0,
                    "%s: mode w4a4 needs every expert's activation global scale; expert %zu has has_input_scale=%d "
                    "input_global_quant=%g",
                    op, e, int(w.has_input_scale), double(w.input_global_quant));
}

// The operands of an add_rms_norm folded into an op (moe_combine_norm, moe_route_front): residual and
// h [n_tokens, n] of dtype act on be, the norm weight w [n] of an activation dtype.
void check_folded_norm(const backend& be, const char* op, const tensor& residual, const tensor& w, const tensor& h,
                       dtype act, int64_t n_tokens, int64_t n) {
    check_on(be, residual, op, "residual"), check_on(be, w, op, "norm w"), check_on(be, h, op, "h");
    check_dtype(residual, act, op, "residual"), check_dtype(h, act, op, "h"), check_act(w, op, "norm w");
    check_shape(residual, {n_tokens, n}, op, "residual"), check_shape(h, {n_tokens, n}, op, "h");
    check_shape(w, {n}, op, "norm w");
}

moe_route_args route_args(backend& be, const tensor& logits, bool norm_topk_prob, const tensor& topk_ids,
                          const tensor& topk_weights) {
    const char* op = "moe_route";
    check_on(be, logits, op, "logits"), check_on(be, topk_ids, op, "topk_ids");
    check_on(be, topk_weights, op, "topk_weights");
    check_rank(logits, 2, op, "logits"), check_act(logits, op, "logits");
    check_rank(topk_ids, 2, op, "topk_ids"), check_dtype(topk_ids, dtype::I32, op, "topk_ids");
    int64_t n_tokens = logits.dim(0), n_expert = logits.dim(1), k = topk_ids.dim(1);
    TETRA_CHECK(topk_ids.dim(0) == n_tokens, "%s: 'topk_ids' %s has %lld rows; logits %s has %lld tokens", op,
                topk_ids.shape_str().c_str(), (long long)topk_ids.dim(0), logits.shape_str().c_str(),
                (long long)n_tokens);
    TETRA_CHECK(k >= 1 && k <= n_expert, "%s: k = %lld experts per token; expected 1..n_expert = %lld", op,
                (long long)k, (long long)n_expert);
    check_dtype(topk_weights, dtype::F32, op, "topk_weights"), check_shape(topk_weights, {n_tokens, k}, op, "topk_weights");
    moe_route_args a;
    a.act = logits.type, a.logits = logits, a.topk_ids = topk_ids, a.topk_weights = topk_weights;
    a.n_tokens = n_tokens, a.n_expert = n_expert, a.k = k, a.norm_topk_prob = norm_topk_prob;
    return a;
}

moe_permute_args permute_args(backend& be, const tensor& topk_ids, int64_t n_expert, const tensor& expert_counts,
                              const tensor& expert_offsets, const tensor& sorted_tokens, const tensor& dest_rows) {
    const char* op = "moe_permute";
    for (auto p : {std::make_pair(&topk_ids, "topk_ids"), {&expert_counts, "expert_counts"},
                   {&expert_offsets, "expert_offsets"}, {&sorted_tokens, "sorted_tokens"}, {&dest_rows, "dest_rows"}}) {
        check_on(be, *p.first, op, p.second);
        check_dtype(*p.first, dtype::I32, op, p.second);
    }
    check_rank(topk_ids, 2, op, "topk_ids");
    int64_t n_tokens = topk_ids.dim(0), k = topk_ids.dim(1);
    TETRA_CHECK(n_expert >= 1 && k >= 1 && k <= n_expert, "%s: n_expert %lld, k %lld: expected 1 <= k <= n_expert", op,
                (long long)n_expert, (long long)k);
    TETRA_CHECK(n_tokens * k < (int64_t(1) << 31), "%s: %lld assignments overflow i32 row indices", op,
                (long long)(n_tokens * k));
    check_shape(expert_counts, {n_expert}, op, "expert_counts");
    check_shape(expert_offsets, {n_expert + 1}, op, "expert_offsets");
    check_shape(sorted_tokens, {n_tokens * k}, op, "sorted_tokens");
    check_shape(dest_rows, {n_tokens, k}, op, "dest_rows");
    moe_permute_args a;
    a.act = dtype::I32, a.topk_ids = topk_ids, a.expert_counts = expert_counts, a.expert_offsets = expert_offsets;
    a.sorted_tokens = sorted_tokens, a.dest_rows = dest_rows, a.n_tokens = n_tokens, a.n_expert = n_expert, a.k = k;
    return a;
}

}  // namespace

void moe_route(backend& be, const tensor& logits, bool norm_topk_prob, const tensor& topk_ids,
               const tensor& topk_weights) {
    moe_route_args a = route_args(be, logits, norm_topk_prob, topk_ids, topk_weights);
    run_op(be, "moe_route", a, {&logits, &topk_ids, &topk_weights});
}

void moe_permute(backend& be, const tensor& topk_ids, int64_t n_expert, const tensor& expert_counts,
                 const tensor& expert_offsets, const tensor& sorted_tokens, const tensor& dest_rows) {
    moe_permute_args a = permute_args(be, topk_ids, n_expert, expert_counts, expert_offsets, sorted_tokens, dest_rows);
    run_op(be, "moe_permute", a, {&topk_ids, &expert_counts, &expert_offsets, &sorted_tokens, &dest_rows});
}

void moe_route_permute(backend& be, const tensor& logits, bool norm_topk_prob, const tensor& topk_ids,
                       const tensor& topk_weights, const tensor& expert_counts, const tensor& expert_offsets,
                       const tensor& sorted_tokens, const tensor& dest_rows, const moe_route_front* front) {
    moe_route_permute_args a;
    a.route = route_args(be, logits, norm_topk_prob, topk_ids, topk_weights);
    a.permute = permute_args(be, topk_ids, logits.dim(1), expert_counts, expert_offsets, sorted_tokens, dest_rows);
    a.act = logits.type;
    if (!front) {
        run_op(be, "moe_route_permute", a,
               {&logits, &topk_ids, &topk_weights, &expert_counts, &expert_offsets, &sorted_tokens, &dest_rows});
        return;
    }
    const char* op = "moe_route_permute";
    const moe_route_front& f = *front;
    TETRA_CHECK(f.router, "%s: the front has no router weight", op);
    const linear_weight& r = *f.router;
    const int64_t n_tokens = a.route.n_tokens, n_expert = a.route.n_expert;
    check_on(be, f.residual, op, "residual"), check_rank(f.residual, 2, op, "residual");
    const int64_t n = f.residual.dim(1);
    check_folded_norm(be, op, f.residual, f.w, f.h, logits.type, n_tokens, n);
    check_on(be, f.x, op, "x"), check_dtype(f.x, logits.type, op, "x"), check_shape(f.x, {n_tokens, n}, op, "x");
    TETRA_CHECK(r.n_out == n_expert && r.n_in == n,
                "%s: the router weight is [%lld, %lld]; expected [n_expert, n_embd] = [%lld, %lld]", op,
                (long long)r.n_out, (long long)r.n_in, (long long)n_expert, (long long)n);
    bool apart = disjoint(f.h, f.residual) && disjoint(f.h, f.x) && disjoint(f.residual, f.x);
    for (const tensor* t : {&logits, &topk_ids, &topk_weights, &expert_counts, &expert_offsets, &sorted_tokens,
                            &dest_rows})
        apart = apart && disjoint(f.h, *t) && disjoint(f.residual, *t) && disjoint(f.x, *t);
    TETRA_CHECK(apart, "%s: 'residual', 'x', 'h', the logits and the route's outputs must not overlap", op);
    a.front = f;
    const tensor& wt = r.kind == linear_kind::DENSE ? r.dense : r.codes;
    run_op(be, "moe_route_permute", a,  // dest_rows last, as without a front: the op profile's key
           {&f.residual, &f.x, &f.w, &f.h, &wt, &logits, &topk_ids, &topk_weights, &expert_counts, &expert_offsets,
            &sorted_tokens, &dest_rows});
}

void moe_route_front_before(backend& be, const moe_route_permute_args& a) {
    const moe_route_front& f = a.front;
    if (!f.router) return;
    be.add_rms_norm(f.residual, f.x, f.w, f.eps, f.h);
    be.matmul(f.h, *f.router, a.route.logits, f.mode);
}

namespace {

// moe_matmul's checks and args (op: the name errors carry); mode resolved in place.
moe_matmul_args matmul_args(backend& be, const char* op, const tensor& x, const std::vector<linear_weight>& experts,
                            const tensor& expert_offsets, const tensor& out, matmul_mode& mode,
                            int64_t rows_per_expert_max) {
    TETRA_CHECK(!experts.empty(), "%s: no experts", op);
    TETRA_CHECK(rows_per_expert_max >= 0, "%s: rows_per_expert_max = %lld; expected >= 0 (0: no bound)", op,
                (long long)rows_per_expert_max);
    const linear_weight& w0 = experts[0];
    mode = resolve_mode(w0, mode);
    check_on(be, x, op, "x"), check_on(be, out, op, "out"), check_on(be, expert_offsets, op, "expert_offsets");
    check_rank(x, 2, op, "x"), check_act(x, op, "x"), check_dtype(out, x.type, op, "out");
    TETRA_CHECK(x.dim(1) == w0.n_in, "%s: x %s has K = %lld; the experts expect n_in = %lld", op, x.shape_str().c_str(),
                (long long)x.dim(1), (long long)w0.n_in);
    check_shape(out, {x.dim(0), w0.n_out}, op, "out");
    check_dtype(expert_offsets, dtype::I32, op, "expert_offsets");
    check_shape(expert_offsets, {int64_t(experts.size()) + 1}, op, "expert_offsets");
    for (size_t e = 0; e < experts.size(); ++e) check_expert(be, experts[e], e, w0, mode);
    moe_matmul_args a;
    a.act = x.type, a.x = x, a.expert_offsets = expert_offsets, a.out = out, a.experts = &experts;
    a.n_rows = x.dim(0), a.n = w0.n_out, a.k = w0.n_in;
    a.rows_per_expert_max = rows_per_expert_max;
    return a;
}

}  // namespace

void moe_matmul(backend& be, const tensor& x, const std::vector<linear_weight>& experts, const tensor& expert_offsets,
                const tensor& out, matmul_mode mode, bool offsets_early, int64_t rows_per_expert_max) {
    moe_matmul_args a = matmul_args(be, "moe_matmul", x, experts, expert_offsets, out, mode, rows_per_expert_max);
    a.offsets_early = offsets_early;
    const char* name = mode == matmul_mode::DENSE   ? "moe_matmul_dense"
                       : mode == matmul_mode::W4A16 ? "moe_matmul_nvfp4_w4a16"
                                                    : "moe_matmul_nvfp4_w4a4";
    const tensor& wt = mode == matmul_mode::DENSE ? experts[0].dense : experts[0].codes;
    run_op(be, name, a, {&x, &out, &wt});
}

void moe_matmul_silu(backend& be, const tensor& x, const std::vector<linear_weight>& gate_up,
                     const tensor& expert_offsets, const tensor& gu, const tensor& out, matmul_mode mode,
                     bool offsets_early, int64_t rows_per_expert_max) {
    const char* op = "moe_matmul_silu";
    moe_matmul_silu_args a;
    a.mm = matmul_args(be, op, x, gate_up, expert_offsets, gu, mode, rows_per_expert_max);
    a.mm.offsets_early = offsets_early;
    TETRA_CHECK(a.mm.n % 2 == 0, "%s: the experts' gate_up weights have %lld rows; expected an even number (the stacked "
                "gate and up halves)", op, (long long)a.mm.n);
    a.n_ff = a.mm.n / 2, a.mode = mode, a.out = out, a.act = x.type;
    check_on(be, out, op, "out"), check_dtype(out, x.type, op, "out"), check_shape(out, {x.dim(0), a.n_ff}, op, "out");
    TETRA_CHECK(disjoint(out, gu) && disjoint(out, x) && disjoint(gu, x), "%s: 'x', 'gu' and 'out' must not overlap", op);
    const tensor& wt = mode == matmul_mode::DENSE ? gate_up[0].dense : gate_up[0].codes;
    a.mm.align = op_checks::ptr_align({&x, &gu, &wt});
    run_op(be, op, a, {&x, &gu, &expert_offsets, &out, &wt});
}

void moe_matmul_silu_two_step(backend& be, const moe_matmul_silu_args& a) {
    moe_matmul(be, a.mm.x, *a.mm.experts, a.mm.expert_offsets, a.mm.out, a.mode, a.mm.offsets_early,
               a.mm.rows_per_expert_max);
    be.silu_mul_gate_up(a.mm.out, a.out);
}

void moe_combine(backend& be, const tensor& y, const tensor& dest_rows, const tensor& topk_weights, const tensor& out,
                 const tensor& shared, const tensor& shared_gate, const moe_combine_norm* norm) {
    const char* op = "moe_combine";
    check_on(be, y, op, "y"), check_on(be, dest_rows, op, "dest_rows"), check_on(be, topk_weights, op, "topk_weights");
    check_on(be, out, op, "out");
    check_rank(y, 2, op, "y"), check_act(y, op, "y"), check_dtype(out, y.type, op, "out");
    check_rank(dest_rows, 2, op, "dest_rows"), check_dtype(dest_rows, dtype::I32, op, "dest_rows");
    int64_t n_tokens = dest_rows.dim(0), k = dest_rows.dim(1), n = y.dim(1);
    check_dtype(topk_weights, dtype::F32, op, "topk_weights"), check_shape(topk_weights, {n_tokens, k}, op, "topk_weights");
    check_shape(out, {n_tokens, n}, op, "out");
    TETRA_CHECK(shared_gate.empty() || !shared.empty(), "%s: 'shared_gate' given without 'shared'", op);
    if (!shared.empty()) {
        check_on(be, shared, op, "shared"), check_dtype(shared, y.type, op, "shared");
        check_shape(shared, {n_tokens, n}, op, "shared");
    }
    if (!shared_gate.empty()) {
        check_on(be, shared_gate, op, "shared_gate"), check_dtype(shared_gate, y.type, op, "shared_gate");
        check_shape(shared_gate, {n_tokens, 1}, op, "shared_gate");
    }
    moe_combine_args a;
    a.act = y.type, a.y = y, a.dest_rows = dest_rows, a.topk_weights = topk_weights, a.out = out;
    a.shared = shared, a.shared_gate = shared_gate, a.n_tokens = n_tokens, a.k = k, a.n = n;
    if (norm) {
        const moe_combine_norm& nm = *norm;
        check_folded_norm(be, op, nm.residual, nm.w, nm.h, y.type, n_tokens, n);
        bool apart = disjoint(nm.h, out) && disjoint(nm.h, nm.residual) && disjoint(nm.residual, out);
        for (const tensor* t : {&y, &shared, &shared_gate})
            apart = apart && disjoint(nm.h, *t) && disjoint(nm.residual, *t);
        TETRA_CHECK(apart, "%s: 'h', 'residual', 'out', 'y' and the shared expert's rows must not overlap", op);
        a.norm = nm;
        run_op(be, op, a, {&y, &dest_rows, &topk_weights, &nm.residual, &nm.w, &nm.h, &out});
        return;
    }
    run_op(be, op, a, {&y, &dest_rows, &topk_weights, &out});
}

void moe_combine_norm_after(backend& be, const moe_combine_args& a) {
    if (a.norm.residual.data) be.add_rms_norm(a.norm.residual, a.out, a.norm.w, a.norm.eps, a.norm.h);
}

}  // namespace tetra

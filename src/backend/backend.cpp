// Op wrappers of the backend interface: validate every argument once (shapes, dtypes, device),
// fill the op's args struct and launch the kernel the registry selects. Also tensor views and
// the HF-exact rope inverse frequencies.
#include "backend/backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

#include <cmath>
#include <initializer_list>

#include "backend/op_checks.h"
#include "backend/ops.h"
#include "core/error.h"

namespace tetra {

tensor tensor_reshape(const tensor& t, std::vector<int64_t> shape) {
    tensor v = t;
    v.shape = std::move(shape);
    TETRA_CHECK(v.numel() == t.numel(), "tensor_reshape: %s has %lld elements; new shape %s has %lld",
                t.shape_str().c_str(), (long long)t.numel(), v.shape_str().c_str(), (long long)v.numel());
    return v;
}

tensor tensor_rows(const tensor& t, int64_t row0, int64_t n_rows) {
    TETRA_CHECK(t.rank() >= 1 && row0 >= 0 && n_rows >= 0 && row0 + n_rows <= t.dim(0),
                "tensor_rows: rows [%lld, %lld) out of range for %s", (long long)row0,
                (long long)(row0 + n_rows), t.shape_str().c_str());
    tensor v = t;
    int64_t row_elems = t.dim(0) ? t.numel() / t.dim(0) : 0;
    v.shape[0] = n_rows;
    v.data = static_cast<char*>(t.data) + size_t(row0 * row_elems) * dtype_size(t.type);
    return v;
}

const char* matmul_mode_name(matmul_mode m) {
    switch (m) {
        case matmul_mode::AUTO: return "auto";
        case matmul_mode::DENSE: return "dense";
        case matmul_mode::W4A16: return "w4a16";
        case matmul_mode::W4A4: return "w4a4";
    }
    return "?";
}

// HF transformers computes these in f32 torch ops; each step below is one f32 op in the same
// order (Python scalars become f32 operands; `s / t` on a tensor is reciprocal(t) · s). pow is
// evaluated in double and rounded, so it may differ from torch's powf by an ulp.
tensor rope_inv_freq(const rope_params& p, int64_t head_dim) {
    int64_t dim = p.n_rot ? p.n_rot : head_dim;
    TETRA_CHECK(dim > 0 && dim % 2 == 0 && dim <= head_dim,
                "rope: rotary dims %lld must be even and in (0, head_dim=%lld]", (long long)dim, (long long)head_dim);
    TETRA_CHECK(p.theta > 0, "rope: rope_theta must be > 0, got %g", double(p.theta));
    tensor out = tensor::alloc(dtype::F32, {dim / 2});
    float* f = out.ptr<float>();
    for (int64_t i = 0; i < dim / 2; ++i) {
        float e = float(2 * i) / float(dim);
        float b = float(std::pow(double(p.theta), double(e)));
        f[i] = 1.0f / b;
    }
    if (p.scaling == rope_scaling_type::LLAMA3) {
        TETRA_CHECK(p.factor > 0 && p.high_freq_factor != p.low_freq_factor && p.low_freq_factor > 0 &&
                        p.high_freq_factor > 0 && p.original_max_position_embeddings > 0,
                    "rope llama3 scaling: invalid parameters factor=%g low_freq_factor=%g high_freq_factor=%g "
                    "original_max_position_embeddings=%lld",
                    double(p.factor), double(p.low_freq_factor), double(p.high_freq_factor),
                    (long long)p.original_max_position_embeddings);
        double old_ctx = double(p.original_max_position_embeddings);
        float low_wl = float(old_ctx / p.low_freq_factor), high_wl = float(old_ctx / p.high_freq_factor);
        float two_pi = float(2 * M_PI), factor = p.factor, f_old = float(old_ctx);
        float lo = p.low_freq_factor, span = float(double(p.high_freq_factor) - double(p.low_freq_factor));
        for (int64_t i = 0; i < dim / 2; ++i) {
            float inv = f[i];
            float wavelen = (1.0f / inv) * two_pi;
            float llama = wavelen > low_wl ? inv / factor : inv;
            float smooth = ((1.0f / wavelen) * f_old - lo) / span;
            float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
            bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
            f[i] = medium ? smoothed : llama;
        }
    }
    return out;
}

// ---- validation helpers ----------------------------------------------------------------------

static bool is_float_act(dtype t) { return t == dtype::F32 || t == dtype::BF16 || t == dtype::F16; }

namespace op_checks {

void check_on(const backend& b, const tensor& t, const char* op, const char* name) {
    TETRA_CHECK(t.device == b.device().kind, "%s: tensor '%s' %s lives on %s; the backend runs on %s", op, name,
                t.shape_str().c_str(), t.device == device_kind::CPU ? "cpu" : "cuda",
                b.device().kind == device_kind::CPU ? "cpu" : "cuda");
    TETRA_CHECK(t.data != nullptr || t.numel() == 0, "%s: tensor '%s' %s has no data", op, name,
                t.shape_str().c_str());
}

void check_act(const tensor& t, const char* op, const char* name) {
    TETRA_CHECK(is_float_act(t.type), "%s: '%s' has dtype %s; expected f32|bf16|f16", op, name, dtype_name(t.type));
}

void check_dtype(const tensor& t, dtype want, const char* op, const char* name) {
    TETRA_CHECK(t.type == want, "%s: '%s' has dtype %s; expected %s", op, name, dtype_name(t.type), dtype_name(want));
}

void check_shape(const tensor& t, const std::vector<int64_t>& want, const char* op, const char* name) {
    TETRA_CHECK(t.shape == want, "%s: '%s' has shape %s; expected %s", op, name, t.shape_str().c_str(),
                shape_str(want).c_str());
}

void check_rank(const tensor& t, int rank, const char* op, const char* name) {
    TETRA_CHECK(t.rank() == rank, "%s: '%s' has shape %s; expected rank %d", op, name, t.shape_str().c_str(), rank);
}

bool disjoint(const tensor& a, const tensor& b) {
    const uint8_t *a0 = static_cast<const uint8_t*>(a.data), *b0 = static_cast<const uint8_t*>(b.data);
    return a.numel() == 0 || b.numel() == 0 || a0 + a.nbytes() <= b0 || b0 + b.nbytes() <= a0;
}

int64_t ptr_align(std::initializer_list<const tensor*> ts) {
    uintptr_t bits = 256;
    for (const tensor* t : ts) bits |= reinterpret_cast<uintptr_t>(t->data);
    return int64_t(bits & (~bits + 1));  // lowest set bit, capped at 256
}

}  // namespace op_checks

using namespace op_checks;

namespace {
std::atomic<bool> g_profiling{false};
std::mutex g_profile_mu;
std::map<std::string, op_profile_entry> g_profile;
}  // namespace

void set_op_profiling(bool on) { g_profiling = on; }

std::vector<op_profile_entry> op_profile() {
    std::lock_guard<std::mutex> lk(g_profile_mu);
    std::vector<op_profile_entry> v;
    for (const auto& e : g_profile) v.push_back(e.second);
    std::sort(v.begin(), v.end(), [](const op_profile_entry& x, const op_profile_entry& y) { return x.ms > y.ms; });
    return v;
}

void reset_op_profile() {
    std::lock_guard<std::mutex> lk(g_profile_mu);
    g_profile.clear();
}

double backend::time_op(const std::function<void()>& fn) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The tensors in `ts` are the op's operands (the last is the output or, for matmul, the weight):
// the profile key is the kernel and the last operand's shape.
void op_checks::run_op(backend& b, const char* op, op_args& a, std::initializer_list<const tensor*> ts) {
    a.align = ptr_align(ts);
    const kernel_entry& k = kernel_registry::instance().select(op, b.device(), a);
    if (!g_profiling) {
        k.launch(b, a);
        return;
    }
    double ms = b.time_op([&] { k.launch(b, a); });
    std::string key = k.name + " " + (ts.size() ? (*(ts.end() - 1))->shape_str() : std::string());
    std::lock_guard<std::mutex> lk(g_profile_mu);
    op_profile_entry& e = g_profile[key];
    e.kernel = key;
    e.calls += 1;
    e.ms += ms;
}

// ---- ops ---------------------------------------------------------------------------------------

void backend::embedding(const tensor& table, const tensor& ids, const tensor& out) { get_rows(table, ids, out); }

void backend::get_rows(const tensor& src, const tensor& ids, const tensor& out) {
    const char* op = "get_rows";
    check_on(*this, src, op, "src"), check_on(*this, ids, op, "ids"), check_on(*this, out, op, "out");
    check_rank(src, 2, op, "src"), check_act(src, op, "src");
    check_rank(ids, 1, op, "ids"), check_dtype(ids, dtype::I32, op, "ids");
    check_act(out, op, "out"), check_shape(out, {ids.dim(0), src.dim(1)}, op, "out");
    get_rows_args a;
    a.act = out.type, a.src = src, a.ids = ids, a.out = out;
    run_op(*this, op, a, {&src, &ids, &out});
}

static int64_t last_dim(const tensor& t) { return t.rank() ? t.dim(-1) : 0; }

void backend::rms_norm(const tensor& x, const tensor& w, float eps, const tensor& out) {
    const char* op = "rms_norm";
    check_on(*this, x, op, "x"), check_on(*this, w, op, "w"), check_on(*this, out, op, "out");
    check_act(x, op, "x"), check_act(w, op, "w"), check_dtype(out, x.type, op, "out");
    TETRA_CHECK(x.rank() >= 1, "%s: 'x' must have rank >= 1", op);
    check_shape(w, {last_dim(x)}, op, "w"), check_shape(out, x.shape, op, "out");
    rms_norm_args a;
    a.act = x.type, a.x = x, a.w = w, a.out = out, a.eps = eps;
    run_op(*this, op, a, {&x, &w, &out});
}

void backend::add_rms_norm(const tensor& residual, const tensor& x, const tensor& w, float eps, const tensor& out) {
    const char* op = "add_rms_norm";
    check_on(*this, residual, op, "residual"), check_on(*this, x, op, "x");
    check_on(*this, w, op, "w"), check_on(*this, out, op, "out");
    check_act(residual, op, "residual"), check_act(w, op, "w");
    check_dtype(x, residual.type, op, "x"), check_dtype(out, residual.type, op, "out");
    TETRA_CHECK(residual.rank() >= 1, "%s: 'residual' must have rank >= 1", op);
    check_shape(x, residual.shape, op, "x"), check_shape(out, residual.shape, op, "out");
    check_shape(w, {last_dim(residual)}, op, "w");
    add_rms_norm_args a;
    a.act = residual.type, a.residual = residual, a.x = x, a.w = w, a.out = out, a.eps = eps;
    run_op(*this, op, a, {&residual, &x, &w, &out});
}

void backend::rope(const tensor& q, const tensor& k, const tensor& positions, const tensor& inv_freq) {
    const char* op = "rope";
    check_on(*this, q, op, "q"), check_on(*this, k, op, "k");
    check_on(*this, positions, op, "positions"), check_on(*this, inv_freq, op, "inv_freq");
    check_rank(q, 3, op, "q"), check_rank(k, 3, op, "k"), check_act(q, op, "q"), check_dtype(k, q.type, op, "k");
    TETRA_CHECK(k.dim(0) == q.dim(0) && k.dim(2) == q.dim(2), "%s: q %s and k %s disagree on n_tokens/head_dim", op,
                q.shape_str().c_str(), k.shape_str().c_str());
    check_shape(positions, {q.dim(0)}, op, "positions"), check_dtype(positions, dtype::I32, op, "positions");
    check_rank(inv_freq, 1, op, "inv_freq"), check_dtype(inv_freq, dtype::F32, op, "inv_freq");
    TETRA_CHECK(inv_freq.dim(0) >= 1 && 2 * inv_freq.dim(0) <= q.dim(2),
                "%s: inv_freq has %lld entries; expected 1..head_dim/2 = %lld", op, (long long)inv_freq.dim(0),
                (long long)(q.dim(2) / 2));
    rope_args a;
    a.act = q.type, a.q = q, a.k = k, a.positions = positions, a.inv_freq = inv_freq;
    run_op(*this, op, a, {&q, &k, &positions, &inv_freq});
}

void backend::kv_store(const tensor& k, const tensor& v, const tensor& k_cache, const tensor& v_cache,
                       const tensor& slot_mapping) {
    const char* op = "kv_store";
    check_on(*this, k, op, "k"), check_on(*this, v, op, "v"), check_on(*this, k_cache, op, "k_cache");
    check_on(*this, v_cache, op, "v_cache"), check_on(*this, slot_mapping, op, "slot_mapping");
    check_rank(k, 3, op, "k"), check_act(k, op, "k"), check_dtype(v, k.type, op, "v"), check_shape(v, k.shape, op, "v");
    check_rank(k_cache, 4, op, "k_cache"), check_act(k_cache, op, "k_cache");
    check_dtype(v_cache, k_cache.type, op, "v_cache"), check_shape(v_cache, k_cache.shape, op, "v_cache");
    TETRA_CHECK(k_cache.dim(2) == k.dim(1) && k_cache.dim(3) == k.dim(2),
                "%s: k_cache %s does not match k %s in n_head_kv/head_dim", op, k_cache.shape_str().c_str(),
                k.shape_str().c_str());
    check_shape(slot_mapping, {k.dim(0)}, op, "slot_mapping"), check_dtype(slot_mapping, dtype::I32, op, "slot_mapping");
    kv_store_args a;
    a.act = k.type, a.k = k, a.v = v, a.k_cache = k_cache, a.v_cache = v_cache, a.slot_mapping = slot_mapping;
    run_op(*this, op, a, {&k, &v, &k_cache, &v_cache, &slot_mapping});
}

static qkv_rope_store_args qkv_rope_store_checked(const backend& b, const tensor& qkv, const tensor& q_norm,
                                                  const tensor& k_norm, float eps, const tensor& positions,
                                                  const tensor& inv_freq, const tensor& q_out, const tensor& k_cache,
                                                  const tensor& v_cache, const tensor& slot_mapping) {
    const char* op = "qkv_rope_store";
    for (auto p : {std::make_pair(&qkv, "qkv"), {&positions, "positions"}, {&inv_freq, "inv_freq"}, {&q_out, "q_out"},
                   {&k_cache, "k_cache"}, {&v_cache, "v_cache"}, {&slot_mapping, "slot_mapping"}})
        check_on(b, *p.first, op, p.second);
    check_rank(qkv, 3, op, "qkv"), check_act(qkv, op, "qkv"), check_rank(q_out, 3, op, "q_out");
    check_dtype(q_out, qkv.type, op, "q_out"), check_rank(k_cache, 4, op, "k_cache"), check_act(k_cache, op, "k_cache");
    check_dtype(v_cache, k_cache.type, op, "v_cache"), check_shape(v_cache, k_cache.shape, op, "v_cache");
    const int64_t n = qkv.dim(0), hd = qkv.dim(2), nh = q_out.dim(1), nkv = k_cache.dim(2);
    TETRA_CHECK(qkv.dim(1) == nh + 2 * nkv && q_out.dim(0) == n && q_out.dim(2) == hd && k_cache.dim(3) == hd,
                "%s: qkv %s must be [n_tokens, n_head + 2·n_head_kv, head_dim] for q_out %s and k_cache %s", op,
                qkv.shape_str().c_str(), q_out.shape_str().c_str(), k_cache.shape_str().c_str());
    for (auto p : {std::make_pair(&q_norm, "q_norm"), {&k_norm, "k_norm"}})
        if (!p.first->empty()) check_on(b, *p.first, op, p.second), check_act(*p.first, op, p.second),
                check_shape(*p.first, {hd}, op, p.second);
    check_shape(positions, {n}, op, "positions"), check_dtype(positions, dtype::I32, op, "positions");
    check_rank(inv_freq, 1, op, "inv_freq"), check_dtype(inv_freq, dtype::F32, op, "inv_freq");
    TETRA_CHECK(inv_freq.dim(0) >= 1 && 2 * inv_freq.dim(0) <= hd,
                "%s: inv_freq has %lld entries; expected 1..head_dim/2 = %lld", op, (long long)inv_freq.dim(0),
                (long long)(hd / 2));
    check_shape(slot_mapping, {n}, op, "slot_mapping"), check_dtype(slot_mapping, dtype::I32, op, "slot_mapping");
    qkv_rope_store_args a;
    a.act = qkv.type, a.qkv = qkv, a.q_norm = q_norm, a.k_norm = k_norm, a.eps = eps, a.positions = positions;
    a.inv_freq = inv_freq, a.q_out = q_out, a.k_cache = k_cache, a.v_cache = v_cache, a.slot_mapping = slot_mapping;
    a.align = ptr_align({&qkv, &q_out, &k_cache, &v_cache});
    return a;
}

void backend::qkv_rope_store(const tensor& qkv, const tensor& q_norm, const tensor& k_norm, float eps,
                             const tensor& positions, const tensor& inv_freq, const tensor& q_out,
                             const tensor& k_cache, const tensor& v_cache, const tensor& slot_mapping) {
    qkv_rope_store_args a = qkv_rope_store_checked(*this, qkv, q_norm, k_norm, eps, positions, inv_freq, q_out,
                                                   k_cache, v_cache, slot_mapping);
    run_op(*this, "qkv_rope_store", a, {&qkv, &q_out, &k_cache, &v_cache});
}

bool backend::has_qkv_rope_store(const tensor& qkv, const tensor& q_norm, const tensor& k_norm,
                                 const tensor& inv_freq, const tensor& q_out, const tensor& k_cache) const {
    // Shapes/dtypes only: positions and slot mapping are per step; stand-ins of the right shape.
    const int64_t n = qkv.dim(0);
    tensor pos = tensor::view(dtype::I32, {n}, qkv.data), sm = pos;
    pos.device = sm.device = qkv.device;
    qkv_rope_store_args a = qkv_rope_store_checked(*this, qkv, q_norm, k_norm, 1e-6f, pos, inv_freq, q_out, k_cache,
                                                   k_cache, sm);
    for (const kernel_candidate& c : kernel_registry::instance().candidates("qkv_rope_store", device(), &a))
        if (c.eligible) return true;
    return false;
}

void backend::attention(const tensor& q, const tensor& k_cache, const tensor& v_cache, const attn_metadata& meta,
                        float scale, const tensor& out, int sliding_window) {
    const char* op = "attention";
    for (auto p : {std::make_pair(&q, "q"), {&k_cache, "k_cache"}, {&v_cache, "v_cache"}, {&out, "out"},
                   {&meta.cu_seqlens_q, "cu_seqlens_q"}, {&meta.seq_lens_kv, "seq_lens_kv"},
                   {&meta.positions, "positions"}, {&meta.block_tables, "block_tables"}})
        check_on(*this, *p.first, op, p.second);
    check_rank(q, 3, op, "q"), check_act(q, op, "q"), check_dtype(out, q.type, op, "out");
    check_rank(k_cache, 4, op, "k_cache"), check_act(k_cache, op, "k_cache");
    check_dtype(v_cache, k_cache.type, op, "v_cache"), check_shape(v_cache, k_cache.shape, op, "v_cache");
    int64_t n_tokens = q.dim(0), n_head = q.dim(1), head_dim = q.dim(2), n_head_kv = k_cache.dim(2);
    TETRA_CHECK(k_cache.dim(3) == head_dim, "%s: k_cache %s head_dim differs from q %s", op,
                k_cache.shape_str().c_str(), q.shape_str().c_str());
    TETRA_CHECK(n_head_kv > 0 && n_head % n_head_kv == 0, "%s: n_head %lld is not a multiple of n_head_kv %lld", op,
                (long long)n_head, (long long)n_head_kv);
    TETRA_CHECK(meta.block_size == k_cache.dim(1), "%s: meta.block_size %d but k_cache %s has block_size %lld", op,
                meta.block_size, k_cache.shape_str().c_str(), (long long)k_cache.dim(1));
    TETRA_CHECK(out.numel() == n_tokens * n_head * head_dim && out.rank() >= 1 && out.dim(0) == n_tokens,
                "%s: 'out' has shape %s; expected [%lld, %lld]", op, out.shape_str().c_str(), (long long)n_tokens,
                (long long)(n_head * head_dim));
    TETRA_CHECK(meta.n_seqs >= 1, "%s: meta.n_seqs %d must be >= 1", op, meta.n_seqs);
    check_shape(meta.cu_seqlens_q, {meta.n_seqs + 1}, op, "cu_seqlens_q");
    check_shape(meta.seq_lens_kv, {meta.n_seqs}, op, "seq_lens_kv");
    check_shape(meta.positions, {n_tokens}, op, "positions");
    check_rank(meta.block_tables, 2, op, "block_tables");
    TETRA_CHECK(meta.block_tables.dim(0) == meta.n_seqs, "%s: block_tables %s has %lld rows; expected n_seqs %d", op,
                meta.block_tables.shape_str().c_str(), (long long)meta.block_tables.dim(0), meta.n_seqs);
    for (auto p : {std::make_pair(&meta.cu_seqlens_q, "cu_seqlens_q"), {&meta.seq_lens_kv, "seq_lens_kv"},
                   {&meta.positions, "positions"}, {&meta.block_tables, "block_tables"}})
        check_dtype(*p.first, dtype::I32, op, p.second);
    TETRA_CHECK(sliding_window >= 0, "%s: sliding_window %d must be >= 0", op, sliding_window);
    attention_args a;
    a.act = q.type, a.q = q, a.k_cache = k_cache, a.v_cache = v_cache, a.out = out, a.meta = meta;
    a.scale = scale, a.sliding_window = sliding_window;
    run_op(*this, op, a, {&q, &k_cache, &v_cache, &out});
}

// AUTO: W4A4 when the checkpoint has an input scale and this device has a W4A4 kernel (native
// FP4 MMA; the CPU oracle), else W4A16 — as vLLM runs NVFP4 checkpoints on pre-Blackwell GPUs
// through its W4A16 (Marlin) path.
static matmul_mode resolve_mode(const backend& b, const linear_weight& w, matmul_mode mode) {
    if (w.kind == linear_kind::DENSE) return matmul_mode::DENSE;  // W4A16/W4A4 apply to NVFP4 weights only
    if (mode != matmul_mode::AUTO) return mode;
    if (!w.has_input_scale) return matmul_mode::W4A16;
    for (const auto& c : kernel_registry::instance().candidates("matmul_nvfp4_w4a4", b.device(), nullptr))
        if (c.eligible) return matmul_mode::W4A4;
    return matmul_mode::W4A16;
}

static void check_linear(const backend& b, const linear_weight& w, matmul_mode mode) {
    const char* op = "matmul";
    if (mode == matmul_mode::DENSE) {
        TETRA_CHECK(w.kind == linear_kind::DENSE, "%s: mode dense needs a dense weight; got an NVFP4 weight [%lld, %lld]",
                    op, (long long)w.n_out, (long long)w.n_in);
        check_on(b, w.dense, op, "w.dense"), check_act(w.dense, op, "w.dense");
        check_shape(w.dense, {w.n_out, w.n_in}, op, "w.dense");
        return;
    }
    TETRA_CHECK(w.kind == linear_kind::NVFP4, "%s: mode %s needs an NVFP4 weight; got a dense weight [%lld, %lld]", op,
                matmul_mode_name(mode), (long long)w.n_out, (long long)w.n_in);
    TETRA_CHECK(w.n_in % 16 == 0, "%s: NVFP4 weight has n_in %lld; expected a multiple of 16", op, (long long)w.n_in);
    check_on(b, w.codes, op, "w.codes"), check_on(b, w.scales, op, "w.scales");
    check_dtype(w.codes, dtype::U8, op, "w.codes"), check_shape(w.codes, {w.n_out, w.n_in / 2}, op, "w.codes");
    TETRA_CHECK(w.scales.type == dtype::E4M3 || w.scales.type == dtype::U8, "%s: 'w.scales' has dtype %s; expected e4m3",
                op, dtype_name(w.scales.type));
    check_shape(w.scales, {w.n_out, w.n_in / 16}, op, "w.scales");
    TETRA_CHECK(std::isfinite(w.scale_global), "%s: NVFP4 scale_global %g is not finite", op, double(w.scale_global));
    if (mode == matmul_mode::W4A4)
        TETRA_CHECK(w.has_input_scale && std::isfinite(w.input_global_quant) && w.input_global_quant > 0,
                    "%s: mode w4a4 needs the weight's activation global scale (input_global_quant > 0); got "
                    "has_input_scale=%d input_global_quant=%g",
                    op, int(w.has_input_scale), double(w.input_global_quant));
}

void backend::matmul(const tensor& x, const linear_weight& w, const tensor& out, matmul_mode mode) {
    const char* op = "matmul";
    mode = resolve_mode(*this, w, mode);
    check_on(*this, x, op, "x"), check_on(*this, out, op, "out");
    check_rank(x, 2, op, "x"), check_act(x, op, "x"), check_dtype(out, x.type, op, "out");
    TETRA_CHECK(x.dim(1) == w.n_in, "%s: x %s has K = %lld; the weight expects n_in = %lld", op,
                x.shape_str().c_str(), (long long)x.dim(1), (long long)w.n_in);
    check_shape(out, {x.dim(0), w.n_out}, op, "out");
    check_linear(*this, w, mode);
    matmul_args a;
    a.act = x.type, a.x = x, a.out = out, a.w = &w, a.m = x.dim(0), a.n = w.n_out, a.k = w.n_in;
    const char* name = mode == matmul_mode::DENSE   ? "matmul_dense"
                       : mode == matmul_mode::W4A16 ? "matmul_nvfp4_w4a16"
                                                    : "matmul_nvfp4_w4a4";
    const tensor& wt = mode == matmul_mode::DENSE ? w.dense : w.codes;
    run_op(*this, name, a, {&x, &out, &wt});
}

// An element-wise op's operands: a, b and out on this backend, a of an activation dtype, b and out
// of a's dtype and shape.
static void check_elementwise(const backend& be, const tensor& a, const tensor& b, const tensor& out, const char* op,
                              const char* a_name, const char* b_name) {
    check_on(be, a, op, a_name), check_on(be, b, op, b_name), check_on(be, out, op, "out");
    check_act(a, op, a_name), check_dtype(b, a.type, op, b_name), check_dtype(out, a.type, op, "out");
    check_shape(b, a.shape, op, b_name), check_shape(out, a.shape, op, "out");
}

void backend::silu_mul(const tensor& gate, const tensor& up, const tensor& out) {
    const char* op = "silu_mul";
    check_elementwise(*this, gate, up, out, op, "gate", "up");
    silu_mul_args a;
    a.act = gate.type, a.gate = gate, a.up = up, a.out = out;
    run_op(*this, op, a, {&gate, &up, &out});
}

void backend::silu_mul_gate_up(const tensor& gate_up, const tensor& out) {
    const char* op = "silu_mul";
    check_on(*this, gate_up, op, "gate_up"), check_on(*this, out, op, "out");
    check_rank(gate_up, 2, op, "gate_up"), check_act(gate_up, op, "gate_up"), check_dtype(out, gate_up.type, op, "out");
    TETRA_CHECK(gate_up.dim(1) % 2 == 0 && gate_up.dim(1) > 0,
                "%s: 'gate_up' %s has %lld columns; expected an even number (the gate and up halves)", op,
                gate_up.shape_str().c_str(), (long long)gate_up.dim(1));
    const int64_t n_ff = gate_up.dim(1) / 2;
    check_shape(out, {gate_up.dim(0), n_ff}, op, "out");
    TETRA_CHECK(disjoint(out, gate_up), "%s: 'out' overlaps 'gate_up'; the fused form needs a separate output", op);
    silu_mul_args a;
    a.act = gate_up.type, a.gate = gate_up, a.out = out, a.n_ff = n_ff;
    run_op(*this, op, a, {&gate_up, &out});
}

void backend::matmul_silu(const tensor& x, const linear_weight& gate_up, const tensor& gu, const tensor& out,
                          matmul_mode mode) {
    const char* op = "matmul_silu";
    mode = resolve_mode(*this, gate_up, mode);
    check_on(*this, x, op, "x"), check_on(*this, gu, op, "gu"), check_on(*this, out, op, "out");
    check_rank(x, 2, op, "x"), check_act(x, op, "x"), check_dtype(gu, x.type, op, "gu"), check_dtype(out, x.type, op, "out");
    TETRA_CHECK(x.dim(1) == gate_up.n_in, "%s: x %s has K = %lld; the gate_up weight expects n_in = %lld", op,
                x.shape_str().c_str(), (long long)x.dim(1), (long long)gate_up.n_in);
    TETRA_CHECK(gate_up.n_out % 2 == 0 && gate_up.n_out > 0,
                "%s: the gate_up weight has %lld rows; expected an even number (the stacked gate and up halves)", op,
                (long long)gate_up.n_out);
    const int64_t n_ff = gate_up.n_out / 2;
    check_shape(gu, {x.dim(0), gate_up.n_out}, op, "gu"), check_shape(out, {x.dim(0), n_ff}, op, "out");
    check_linear(*this, gate_up, mode);
    TETRA_CHECK(disjoint(out, gu) && disjoint(out, x) && disjoint(gu, x), "%s: 'x', 'gu' and 'out' must not overlap", op);
    matmul_silu_args a;
    a.act = x.type, a.mode = mode, a.n_ff = n_ff, a.out = out;
    a.mm.act = x.type, a.mm.x = x, a.mm.out = gu, a.mm.w = &gate_up;
    a.mm.m = x.dim(0), a.mm.n = gate_up.n_out, a.mm.k = gate_up.n_in;
    const tensor& wt = mode == matmul_mode::DENSE ? gate_up.dense : gate_up.codes;
    a.mm.align = op_checks::ptr_align({&x, &gu, &wt});
    run_op(*this, op, a, {&x, &gu, &out, &wt});
}

void matmul_silu_two_step(backend& be, const matmul_silu_args& a) {
    be.matmul(a.mm.x, *a.mm.w, a.mm.out, a.mode);
    be.silu_mul_gate_up(a.mm.out, a.out);
}

// decode_layers: the composition's own ops check every operand when they run; this checks what a fused
// kernel would rely on without them (one token, one sequence, the stack's shapes, norms, caches and
// metadata) and sets all_w4a16 (whether every linear resolves to W4A16 under the requested mode).
static decode_layers_args decode_layers_checked(const backend& b, const decode_layers_args& in) {
    const char* op = "decode_layers";
    decode_layers_args a = in;
    TETRA_CHECK(!a.layers.empty(), "%s: no layers", op);
    check_on(b, a.residual, op, "residual"), check_on(b, a.proj, op, "proj"), check_act(a.residual, op, "residual");
    const int64_t hd = a.head_dim, heads = a.n_head + 2 * a.n_head_kv;
    TETRA_CHECK(a.n_head > 0 && a.n_head_kv > 0 && hd > 0 && a.n_embd > 0 && a.n_ff > 0 && a.n_head % a.n_head_kv == 0,
                "%s: n_head %lld, n_head_kv %lld, head_dim %lld, n_embd %lld, n_ff %lld: expected positive, n_head a "
                "multiple of n_head_kv", op, (long long)a.n_head, (long long)a.n_head_kv, (long long)hd,
                (long long)a.n_embd, (long long)a.n_ff);
    check_shape(a.residual, {1, a.n_embd}, op, "residual"), check_shape(a.proj, {1, a.n_embd}, op, "proj");
    check_shape(a.h, {1, a.n_embd}, op, "h"), check_shape(a.qkv, {1, heads, hd}, op, "qkv");
    check_shape(a.q, {1, a.n_head, hd}, op, "q"), check_shape(a.attn, {1, a.n_head * hd}, op, "attn");
    check_shape(a.gu, {1, 2 * a.n_ff}, op, "gu"), check_shape(a.gate, {1, a.n_ff}, op, "gate");
    for (const tensor* t : {&a.proj, &a.h, &a.qkv, &a.q, &a.attn, &a.gu, &a.gate})
        check_dtype(*t, a.residual.type, op, "scratch");
    TETRA_CHECK(a.meta.n_seqs == 1, "%s: %d sequences; the op takes one decode token of one sequence", op,
                a.meta.n_seqs);
    check_on(b, a.inv_freq, op, "inv_freq"), check_rank(a.inv_freq, 1, op, "inv_freq");
    check_dtype(a.inv_freq, dtype::F32, op, "inv_freq");
    for (const tensor* t : {&a.meta.positions, &a.meta.seq_lens_kv, &a.meta.block_tables, &a.meta.slot_mapping})
        check_on(b, *t, op, "meta"), check_dtype(*t, dtype::I32, op, "meta");
    a.all_w4a16 = true;
    for (size_t il = 0; il < a.layers.size(); ++il) {
        const decode_layer_ref& L = a.layers[il];
        const linear_weight* ws[4] = {L.qkv, L.o, L.gate_up, L.down};
        const int64_t shapes[4][2] = {{heads * hd, a.n_embd}, {a.n_embd, a.n_head * hd}, {2 * a.n_ff, a.n_embd},
                                      {a.n_embd, a.n_ff}};
        for (int j = 0; j < 4; ++j) {
            TETRA_CHECK(ws[j] && ws[j]->n_out == shapes[j][0] && ws[j]->n_in == shapes[j][1],
                        "%s: layer %zu's %s weight is %s; expected [%lld, %lld]", op, il,
                        j == 0 ? "qkv" : j == 1 ? "o" : j == 2 ? "gate_up" : "down",
                        ws[j] ? strfmt("[%lld, %lld]", (long long)ws[j]->n_out, (long long)ws[j]->n_in).c_str()
                              : "missing", (long long)shapes[j][0], (long long)shapes[j][1]);
            a.all_w4a16 &= resolve_mode(b, *ws[j], in.mode) == matmul_mode::W4A16;
        }
        for (const tensor* t : {&L.attn_norm, &L.ffn_norm})
            check_on(b, *t, op, "attn_norm/ffn_norm"), check_shape(*t, {a.n_embd}, op, "attn_norm/ffn_norm");
        for (const tensor* t : {&L.q_norm, &L.k_norm})  // optional (empty: no q/k norm)
            if (!t->empty()) check_on(b, *t, op, "q_norm/k_norm"), check_shape(*t, {hd}, op, "q_norm/k_norm");
        check_on(b, L.k_cache, op, "k_cache"), check_rank(L.k_cache, 4, op, "k_cache");
        check_shape(L.v_cache, L.k_cache.shape, op, "v_cache");
        TETRA_CHECK(L.k_cache.dim(1) == a.meta.block_size && L.k_cache.dim(2) == a.n_head_kv && L.k_cache.dim(3) == hd,
                    "%s: layer %zu's k_cache %s; expected [n_blocks, %d, %lld, %lld] (block_size from the metadata)",
                    op, il, L.k_cache.shape_str().c_str(), a.meta.block_size, (long long)a.n_head_kv, (long long)hd);
    }
    a.act = a.residual.type;
    return a;
}

void decode_layers_composed(backend& be, const decode_layers_args& a) {
    const int64_t heads = a.n_head + 2 * a.n_head_kv;
    const tensor qkv_rows = tensor_reshape(a.qkv, {1, heads * a.head_dim});
    for (size_t il = 0; il < a.layers.size(); ++il) {
        const decode_layer_ref& L = a.layers[il];
        if (il == 0 && a.first_plain) be.rms_norm(a.residual, L.attn_norm, a.eps, a.h);
        else be.add_rms_norm(a.residual, a.proj, L.attn_norm, a.eps, a.h);
        be.matmul(a.h, *L.qkv, qkv_rows, a.mode);
        be.qkv_rope_store(a.qkv, L.q_norm, L.k_norm, a.eps, a.meta.positions, a.inv_freq, a.q, L.k_cache, L.v_cache,
                          a.meta.slot_mapping);
        be.attention(a.q, L.k_cache, L.v_cache, a.meta, a.scale, a.attn);
        be.matmul(a.attn, *L.o, a.proj, a.mode);
        be.add_rms_norm(a.residual, a.proj, L.ffn_norm, a.eps, a.h);
        be.matmul_silu(a.h, *L.gate_up, a.gu, a.gate, a.mode);
        be.matmul(a.gate, *L.down, a.proj, a.mode);
    }
}

void backend::decode_layers(const decode_layers_args& in) {
    decode_layers_args a = decode_layers_checked(*this, in);
    run_op(*this, "decode_layers", a, {&a.residual, &a.proj});
}

bool backend::has_decode_layers(const decode_layers_args& in) const {
    decode_layers_args a = decode_layers_checked(*this, in);
    a.align = ptr_align({&a.residual, &a.proj});  // as run_op computes it
    bool any = false;
    for (const kernel_candidate& c : kernel_registry::instance().candidates("decode_layers", device(), &a))
        any |= c.eligible;
    // The compositions (every backend's, priority 0) are the caller's own sequence of ops: no gain.
    return any && kernel_registry::instance().select("decode_layers", device(), a).priority != 0;
}

void backend::add(const tensor& x, const tensor& y, const tensor& out) {
    const char* op = "add";
    check_elementwise(*this, x, y, out, op, "a", "b");
    add_args a;
    a.act = x.type, a.a = x, a.b = y, a.out = out;
    run_op(*this, op, a, {&x, &y, &out});
}

void backend::argmax(const tensor& x, const tensor& out) {
    const char* op = "argmax";
    check_on(*this, x, op, "x"), check_on(*this, out, op, "out");
    check_rank(x, 2, op, "x"), check_act(x, op, "x");
    TETRA_CHECK(x.dim(1) >= 1, "%s: 'x' %s has empty rows", op, x.shape_str().c_str());
    check_dtype(out, dtype::I32, op, "out"), check_shape(out, {x.dim(0)}, op, "out");
    argmax_args a;
    a.act = x.type, a.x = x, a.out = out;
    run_op(*this, op, a, {&x, &out});
}

void backend::cast(const tensor& src, const tensor& out) {
    const char* op = "cast";
    check_on(*this, src, op, "src"), check_on(*this, out, op, "out");
    check_act(src, op, "src"), check_act(out, op, "out");
    TETRA_CHECK(src.numel() == out.numel(), "%s: src %s and out %s differ in element count", op,
                src.shape_str().c_str(), out.shape_str().c_str());
    cast_args a;
    a.act = src.type, a.src = src, a.out = out;
    run_op(*this, op, a, {&src, &out});
}

void backend::quantize_nvfp4_act(const tensor& x, float global_quant, const tensor& codes, const tensor& scales) {
    const char* op = "quantize_nvfp4_act";
    check_on(*this, x, op, "x"), check_on(*this, codes, op, "codes"), check_on(*this, scales, op, "scales");
    check_rank(x, 2, op, "x"), check_act(x, op, "x");
    TETRA_CHECK(x.dim(1) % 16 == 0, "%s: 'x' %s has n = %lld; expected a multiple of 16", op, x.shape_str().c_str(),
                (long long)x.dim(1));
    check_dtype(codes, dtype::U8, op, "codes"), check_shape(codes, {x.dim(0), x.dim(1) / 2}, op, "codes");
    TETRA_CHECK(scales.type == dtype::E4M3 || scales.type == dtype::U8, "%s: 'scales' has dtype %s; expected e4m3",
                op, dtype_name(scales.type));
    check_shape(scales, {x.dim(0), x.dim(1) / 16}, op, "scales");
    TETRA_CHECK(std::isfinite(global_quant) && global_quant > 0, "%s: global_quant %g must be finite and > 0", op,
                double(global_quant));
    quantize_nvfp4_act_args a;
    a.act = x.type, a.x = x, a.codes = codes, a.scales = scales, a.global_quant = global_quant;
    run_op(*this, op, a, {&x, &codes, &scales});
}

}  // namespace tetra

// Start-up self-test (selftest.h). The op cases (selftest_cases.cpp) rebuild their inputs from a fixed
// seed on every run (several ops write in place), so the device kernel and the CPU oracle see
// identical bytes; the oracle is the plain <op>_cpu kernel of the process registry, launched directly
// (exclusions do not apply to it). Here: selecting the kernels the forward will launch, testing
// them, excluding a failing one and retrying, the report, and the synthetic self-test model.
#include "engine/selftest.h"

#include "engine/selftest_cases.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>

#include "backend/ops.h"
#include "core/error.h"
#include "core/log.h"
#include "model/model.h"

namespace tetra {

using namespace selftest_detail;

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string selftest_device_str(const device_info& d) {
    if (d.kind == device_kind::CPU)
        return strfmt("cpu%s (CPU features %s; compute capability n/a, compiled targets n/a)",
                      d.name == "cpu" ? "" : (" '" + d.name + "'").c_str(), arch_features_str(d.features).c_str());
    return strfmt("%s (compute capability sm_%d, compiled targets [%s], features %s)", d.name.c_str(), d.cc,
                  compiled_targets_str(d.compiled).c_str(), arch_features_str(d.features).c_str());
}

std::string selftest_choice::line() const {
    std::string why = classes.empty() ? reason : classes + "; " + reason;
    return what + " → " + kernel + " (" + why + ")";
}

namespace {

struct tester {
    tester(backend& b, kernel_registry& r, selftest_report& rp, std::vector<op_case> cs)
        : be(b), reg(r), rep(rp), cases(std::move(cs)) {}
    backend& be;
    kernel_registry& reg;
    selftest_report& rep;
    std::vector<op_case> cases;
    std::unique_ptr<backend> cpu = make_cpu_backend();  // the oracle's backend
    std::map<std::pair<size_t, std::string>, size_t> tested;  // (case, kernel) → index in rep.results
    std::map<std::pair<size_t, int>, std::vector<float>> refs;  // (case, size) → oracle output

    const std::vector<float>& ref(size_t ci, int size) {
        auto key = std::make_pair(ci, size);
        auto it = refs.find(key);
        if (it != refs.end()) return it->second;
        const op_case& k = cases[ci];
        const kernel_entry* oracle = kernel_registry::instance().find(k.op + "_cpu");
        TETRA_ASSERT(oracle != nullptr);
        return refs[key] = k.run(*cpu, size, [&](op_args& a) { oracle->launch(*cpu, a); });
    }

    // The kernels the forward will launch for this case: (M range label, kernel), from the registry's
    // own selection (forcing, priorities, exclusions). Throws what select() throws.
    std::vector<std::pair<std::string, const kernel_entry*>> selected(const op_case& k) {
        std::vector<std::pair<std::string, const kernel_entry*>> out;
        const device_info& dev = be.device();
        if (!k.probe) {
            k.run(be, 0, [&](op_args& a) {
                if (k.optional) {  // no eligible kernel: the forward runs the unfused ops
                    bool any = false;
                    for (const kernel_candidate& c : reg.candidates(k.op, dev, &a)) any |= c.eligible;
                    if (!any) return;
                }
                out.push_back({"", &reg.select(k.op, dev, a)});
            });
            return out;
        }
        for (int64_t m : k.probe_m)
            k.probe(be, m, [&](op_args& a) { out.push_back({"M " + std::to_string(m), &reg.select(k.op, dev, a)}); });
        return out;
    }

    selftest_result test(size_t ci, const kernel_entry& e) {
        const op_case& k = cases[ci];
        selftest_result r;
        r.op = k.op, r.kernel = e.name, r.tol = k.tol, r.what = k.what;
        double t0 = now_s();
        std::vector<float> out;
        int size = -1;
        try {
            for (int s = 0; s < k.n_sizes && size < 0; ++s) {
                std::vector<float> o2 = k.run(be, s, [&](op_args& a) {
                    if (!kernel_rejection(e, be.device(), &a).empty()) return;
                    e.launch(be, a);
                    be.synchronize();
                    size = s;
                });
                if (size >= 0) out = std::move(o2);
            }
        } catch (const std::exception& ex) {
            r.error = std::string("launch failed: ") + ex.what();
            r.nmse = INFINITY;
        }
        if (r.error.empty() && size < 0) r.error = "rejects every test size of this case", r.nmse = INFINITY;
        if (r.error.empty()) {
            r.what = k.size_str(size);
            compare(out, ref(ci, size), r);
        }
        r.passed = r.error.empty();
        r.ms = (now_s() - t0) * 1e3;
        return r;
    }

    static void compare(const std::vector<float>& out, const std::vector<float>& ref, selftest_result& r) {
        TETRA_ASSERT(out.size() == ref.size());
        double num = 0, den = 0;
        for (size_t i = 0; i < out.size(); ++i) {
            if (!std::isfinite(out[i]) && std::isfinite(ref[i])) {
                r.nmse = INFINITY;
                r.error = strfmt("non-finite output (%s at element %zu of %zu)", std::isnan(out[i]) ? "NaN" : "Inf", i,
                                 out.size());
                return;
            }
            double d = double(out[i]) - double(ref[i]);
            if (std::isfinite(ref[i])) num += d * d, den += double(ref[i]) * double(ref[i]);
        }
        r.nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
        if (r.tol == 0 && num != 0)
            r.error = strfmt("not bit-exact (NMSE %.3g; this op must match the oracle exactly)", r.nmse);
        else if (r.tol > 0 && !(r.nmse <= r.tol))
            r.error = strfmt("NMSE %.3g > tolerance %.3g", r.nmse, r.tol);
    }

    // Tests kernel e on case ci unless done; on failure excludes it (loudly). Returns whether it passed.
    bool check(size_t ci, const kernel_entry& e) {
        auto key = std::make_pair(ci, e.name);
        auto it = tested.find(key);
        if (it != tested.end()) return rep.results[it->second].passed;
        selftest_result r = test(ci, e);
        tested[key] = rep.results.size();
        rep.results.push_back(r);
        if (r.passed) return true;
        std::string msg = strfmt("self-test: kernel %s (op %s) is wrong on %s: %s on case %s; excluded, the next "
                                 "eligible kernel is tried",
                                 e.name.c_str(), e.op.c_str(), rep.device.c_str(), r.error.c_str(), r.what.c_str());
        TETRA_LOG_ERROR("%s", msg.c_str());
        rep.excluded.push_back(msg);
        reg.exclude(e.op, e.name, strfmt("self-test on %s: %s on case %s", be.device().name.c_str(), r.error.c_str(),
                                         r.what.c_str()));
        return false;
    }

    [[noreturn]] void fail(const op_case& k, const std::string& why) {
        std::string ex;
        for (const std::string& m : rep.excluded) ex += "\n  " + m;
        TETRA_FAIL("self-test: no working kernel for %s (op %s, case %s) on %s, so this model cannot run here: %s%s%s",
                   k.label.c_str(), k.op.c_str(), k.what.c_str(), rep.device.c_str(), why.c_str(),
                   ex.empty() ? "" : "\nexcluded by the self-test:", ex.c_str());
    }

    // Selects and tests until every case's selected kernels pass; returns whether anything was excluded.
    bool settle(size_t ci) {
        bool changed = false;
        for (;;) {
            std::vector<std::pair<std::string, const kernel_entry*>> sel;
            try {
                sel = selected(cases[ci]);
            } catch (const error& e) {
                fail(cases[ci], e.what());
            }
            bool ok = true;
            for (auto& s : sel)
                if (!check(ci, *s.second)) {
                    ok = false;
                    break;
                }
            if (ok) return changed;
            changed = true;
        }
    }

    // tetra doctor: every other eligible kernel of the case too (failures are excluded as well).
    bool test_all(size_t ci) {
        const op_case& k = cases[ci];
        std::vector<const kernel_entry*> eligible;
        k.run(be, 0, [&](op_args& a) {
            for (const kernel_candidate& c : reg.candidates(k.op, be.device(), &a))
                if (c.eligible) eligible.push_back(c.kernel);
        });
        bool excluded = false;
        for (const kernel_entry* e : eligible) excluded |= !check(ci, *e);
        return excluded;
    }

    selftest_choice choice(size_t ci) {
        const op_case& k = cases[ci];
        selftest_choice ch;
        ch.what = k.label, ch.classes = k.classes, ch.op = k.op;
        std::vector<std::pair<std::string, const kernel_entry*>> sel = selected(k);
        if (sel.empty()) {  // an optional fused op with no eligible kernel
            ch.kernel = "none";
            ch.reason = "no eligible kernel: the forward runs the unfused ops";
            return ch;
        }
        std::vector<std::string> names;
        for (size_t i = 0; i < sel.size();) {  // runs of the same kernel over the probed M values
            size_t j = i;
            while (j + 1 < sel.size() && sel[j + 1].second == sel[i].second) ++j;
            std::string range = sel.size() == 1 || (i == 0 && j + 1 == sel.size())
                                    ? ""
                                    : " (" + sel[i].first + (j > i ? ".." + sel[j].first.substr(2) : "") + ")";
            ch.kernel += (ch.kernel.empty() ? "" : ", ") + sel[i].second->name + range;
            names.push_back(sel[i].second->name);
            i = j + 1;
        }
        auto forced = reg.forced_kernels();
        bool is_forced = forced.count(k.op) &&
                         std::count(forced[k.op].begin(), forced[k.op].end(), names.front());
        ch.reason = is_forced ? "forced by TETRA_KERNEL" : "highest-priority eligible";
        for (const std::string& n : names) {
            const selftest_result& r = rep.results[tested.at({ci, n})];
            ch.reason += strfmt("; self-test NMSE %.2g <= %.2g", r.nmse, r.tol);
        }
        for (const kernel_entry* e : reg.kernels(k.op)) {
            std::string ex = reg.exclusion(e->name);
            if (!ex.empty()) ch.reason += "; " + e->name + " excluded";
        }
        return ch;
    }
};

}  // namespace

selftest_report run_selftest(const model_config& c, model_weights& w, backend& be, const selftest_options& o,
                             kernel_registry& reg) {
    selftest_report rep;
    rep.device = selftest_device_str(be.device());
    if (o.skip) {
        rep.skipped = true;
        TETRA_LOG_WARN("self-test skipped (--skip-selftest): kernels run unchecked on %s; a kernel that is wrong on "
                       "this device would produce garbage (the output guard still checks the logits)",
                       rep.device.c_str());
        return rep;
    }
    double t0 = now_s();
    dtype act = o.act ? *o.act : default_act_type(be.device());
    tester t(be, reg, rep, build_cases(c, w, act, o));
    for (bool changed = true; changed;) {  // an exclusion in one case may change another's selection
        changed = false;
        for (size_t ci = 0; ci < t.cases.size(); ++ci) changed |= t.settle(ci);
        if (o.all_kernels)
            for (size_t ci = 0; ci < t.cases.size(); ++ci) changed |= t.test_all(ci);
    }
    for (size_t ci = 0; ci < t.cases.size(); ++ci) {
        rep.chosen.push_back(t.choice(ci));
        if (o.log) TETRA_LOG_INFO("%s", rep.chosen.back().line().c_str());
    }
    rep.seconds = now_s() - t0;
    if (o.log)
        TETRA_LOG_INFO("self-test: %zu kernel runs on %s in %.2f s, %zu excluded", rep.results.size(),
                       rep.device.c_str(), rep.seconds, rep.excluded.size());
    return rep;
}

void make_selftest_model(model_config& c, model_weights& w) {
    if (c.n_embd <= 0) {
        c = model_config();
        c.n_embd = 256, c.n_ff = 512, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 64, c.n_vocab = 1024;
        c.max_position = 4096, c.rms_norm_eps = 1e-5f, c.rope.theta = 10000.0f;
    }
    c.path = "(synthetic self-test model)";
    c.architecture = "LlamaForCausalLM", c.model_type = "llama", c.n_layer = 1;
    w = model_weights();
    w.dir = c.path, w.format = "synthetic", w.quant_algo = "W4A16_NVFP4", w.exclude = {"lm_head"};
    auto nvfp4 = [&](const std::string& m, int64_t n_out, int64_t n_in, uint64_t seed) {
        linear_weight lw;
        lw.kind = linear_kind::NVFP4, lw.n_out = n_out, lw.n_in = n_in, lw.scale_global = 1.0f / 64;
        lw.codes = tensor::alloc(dtype::U8, {n_out, n_in / 2});
        lw.scales = tensor::alloc(dtype::E4M3, {n_out, n_in / 16});
        rng r(seed);
        for (int64_t i = 0; i < lw.codes.numel(); ++i) lw.codes.ptr<uint8_t>()[i] = uint8_t(r.uniform() * 128 + 128);
        // e4m3 bytes 0x30..0x47: 0.5 .. 3.5, every block non-zero
        for (int64_t i = 0; i < lw.scales.numel(); ++i)
            lw.scales.ptr<uint8_t>()[i] = uint8_t(0x30 + int(r.uniform() * 11.5f + 11.5f));
        w.linears[m] = lw;
    };
    const std::string p = "model.layers.0.";
    int64_t q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim;
    nvfp4(p + "self_attn.q_proj", q, c.n_embd, 1), nvfp4(p + "self_attn.k_proj", kv, c.n_embd, 2);
    nvfp4(p + "self_attn.v_proj", kv, c.n_embd, 3), nvfp4(p + "self_attn.o_proj", c.n_embd, q, 4);
    nvfp4(p + "mlp.gate_proj", c.n_ff, c.n_embd, 5), nvfp4(p + "mlp.up_proj", c.n_ff, c.n_embd, 6);
    nvfp4(p + "mlp.down_proj", c.n_embd, c.n_ff, 7);
    // Embedding and lm_head: only the 64 rows at each end hold values (the self-test reads those); the
    // rest stays zero pages, so 8B shapes cost no time.
    for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
        tensor t = tensor::alloc(dtype::BF16, {c.n_vocab, c.n_embd});
        int64_t k = std::min<int64_t>(64, c.n_vocab) * c.n_embd;
        tensor ends = host_random(dtype::BF16, {2 * k}, name[0] == 'l' ? 9 : 8, name[0] == 'l' ? 0.1f : 1.0f);
        std::copy(ends.ptr<uint16_t>(), ends.ptr<uint16_t>() + k, t.ptr<uint16_t>());
        std::copy(ends.ptr<uint16_t>() + k, ends.ptr<uint16_t>() + 2 * k, t.ptr<uint16_t>() + t.numel() - k);
        w.tensors[name] = t;
    }
    tensor norm = host_random(dtype::BF16, {c.n_embd}, 10, 0.25f);
    uint16_t* nw = norm.ptr<uint16_t>();
    for (int64_t i = 0; i < c.n_embd; ++i) nw[i] = f32_to_bf16(1.0f + bf16_to_f32(nw[i]));
    w.tensors[p + "input_layernorm.weight"] = norm;
    w.tensors[p + "post_attention_layernorm.weight"] = norm;
    w.tensors["model.norm.weight"] = norm;
}

}  // namespace tetra

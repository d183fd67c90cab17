// tetra bench: prefill and decode throughput of a model (or a config.json with --load-format dummy)
// on its device, against the roofline. Decode at batch B: B sequences with a prompt of
// --input-len tokens each, then --output-len greedy steps through the engine's model_runner (CUDA
// graphs on the GPU; argmax on the device). Bytes per step = the weights (once per step) + every
// sequence's KV read by attention; % of roofline = (bytes / step time) / the device's read
// bandwidth measured in-process (backend/membw.h). MoE: the weights of every distinct routed expert
// once — at batch 1 the k experts of the token, at batch B the experts the batch was routed to,
// counted per layer in one more (untimed) step after the timed ones. Prefill: one sequence of --input-len tokens in
// --max-num-batched-tokens chunks. Results go to stdout as a table, or JSON with --json.
#include <chrono>
#include <functional>
#include <cstdio>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <optional>

#include "backend/membw.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "common.h"
#include "engine/runner.h"
#include "model/footprint.h"

namespace tetra {

namespace {

struct bench_flags {
    std::string batches = "1";
    int input_len = 128, output_len = 64, warmup = 4;
    bool json = false, no_graphs = false, profile = false, breakdown = false;
    int breakdown_rounds = 2;
};

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t pos = 0;
        long long x = 0;
        try {
            x = std::stoll(item, &pos);
        } catch (const std::exception&) {
            pos = 0;
        }
        if (pos != item.size() || x < 1) throw cli_error("--batch '" + s + "': '" + item + "' is not a positive integer", "e.g. --batch 1,8,32");
        v.push_back(x);
    }
    if (v.empty()) throw cli_error("--batch is empty", "e.g. --batch 1,8,32");
    return v;
}

// Decode steps before the timed ones (--breakdown needs two: a complete one, then the capture).
int warmup_steps(const bench_flags& f) { return f.breakdown ? std::max(f.warmup, 2) : f.warmup; }

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One sequence's prompt through the runner in chunks of the model's max_tokens rows.
void prefill(model_runner& runner, const std::vector<int32_t>& table, const std::vector<int32_t>& prompt) {
    const int64_t n = int64_t(prompt.size()), chunk = runner.model().max_tokens();
    for (int64_t p = 0; p < n; p += chunk)
        runner.run_argmax({seq_chunk{&table, p, prompt.data() + p, std::min<int64_t>(chunk, n - p)}});
}

struct decode_result {
    int64_t batch = 0;
    double step_ms = 0, tok_s = 0, bytes_per_step = 0, roofline_pct = 0;
    double experts_per_layer = 0;  // MoE: distinct routed experts per MoE layer (mean), 0 for dense
};

// MoE: the distinct experts each MoE layer routed the batch to in one step (tap "moe_ids").
std::map<int, int64_t> distinct_experts_of_step(loaded_model& m, const std::function<void()>& step) {
    std::map<int, int64_t> distinct;
    m.model->set_tap([&](const std::string& name, int il, const tensor& t) {
        if (name != "moe_ids") return;
        std::vector<int32_t> ids(size_t(t.numel()));
        m.be->download(t, ids.data());
        std::sort(ids.begin(), ids.end());
        distinct[il] = int64_t(std::unique(ids.begin(), ids.end()) - ids.begin());
    });
    step();
    m.model->set_tap(nullptr);
    return distinct;
}

// B sequences: prefill input_len tokens each (chunked by the model's max_tokens), then timed
// greedy decode steps.
// skip (--breakdown): op classes left out of the decode steps (model/step_ops.h). The prefill and
// the first warm-up step run complete, so a left-out class reuses what a step of this batch left
// (the MoE routing, for one); the other warm-up steps (at least one: the graph's capture) and the
// timed steps run without the classes.
decode_result bench_decode(loaded_model& m, kv_cache& kv, block_pool& pool, const bench_flags& f, int64_t B,
                           const model_footprint& fp, double bw, bool graphs,
                           const std::function<void()>& at_timed_steps = nullptr, uint32_t skip = 0) {
    model_runner runner(*m.model, *m.be, kv);
    runner.set_graphs(graphs);
    std::mt19937 rng(1234);
    // + 1: the MoE routing probe step after the timed ones.
    const int64_t vocab = m.config.n_vocab, total = f.input_len + warmup_steps(f) + f.output_len + 1;
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(B)), prompts(static_cast<size_t>(B));
    for (int64_t s = 0; s < B; ++s) {
        if (!pool.grow(tables[size_t(s)], total, kv.block_size))
            throw cli_error(strfmt("the KV cache is too small for batch %lld × %lld tokens", (long long)B, (long long)total),
                            "lower --batch, --input-len or --output-len");
        for (int i = 0; i < f.input_len; ++i) prompts[size_t(s)].push_back(int32_t(rng() % uint32_t(vocab)));
    }
    for (int64_t s = 0; s < B; ++s) prefill(runner, tables[size_t(s)], prompts[size_t(s)]);
    std::vector<int32_t> next(size_t(B), 1);
    auto decode_step = [&](int64_t pos) {
        std::vector<seq_chunk> cs;
        for (int64_t s = 0; s < B; ++s) cs.push_back(seq_chunk{&tables[size_t(s)], pos, &next[size_t(s)], 1});
        const std::vector<int32_t>& ids = runner.run_argmax(cs);
        for (int64_t s = 0; s < B; ++s) next[size_t(s)] = ids[size_t(s)];
    };
    int64_t pos = f.input_len;
    int warm = warmup_steps(f);  // the same for the full step and every skip mask
    struct skip_guard {      // the mask never outlives this run, even when a step throws
        causal_lm& lm;
        ~skip_guard() { lm.set_skip_ops(0); }
    } guard{*m.model};
    if (skip) {
        decode_step(pos++);
        m.model->set_skip_ops(skip);
        --warm;
    }
    for (int i = 0; i < warm; ++i) decode_step(pos++);
    m.be->synchronize();
    if (at_timed_steps) at_timed_steps();
    double t0 = now_s();
    double kv_tokens = 0;
    for (int i = 0; i < f.output_len; ++i) {
        kv_tokens += double(B) * double(pos + 1);
        decode_step(pos++);
    }
    double dt = now_s() - t0;
    m.model->set_skip_ops(0);  // the MoE routing probe below runs complete
    decode_result r;
    r.batch = B;
    r.step_ms = 1e3 * dt / f.output_len;
    r.tok_s = double(B) * f.output_len / dt;
    r.bytes_per_step = double(fp.weight_bytes) + kv_tokens / f.output_len * double(fp.kv_bytes_per_token);
    const bool moe = std::any_of(fp.expert_bytes.begin(), fp.expert_bytes.end(), [](int64_t b) { return b > 0; });
    if (moe) {  // weight_bytes counts k experts per layer; a batch reads each distinct one once
        const int64_t k = m.config.n_expert_used;
        std::map<int, int64_t> distinct;  // batch 1: the token's k experts, no probe step needed
        if (B > 1) distinct = distinct_experts_of_step(m, [&] { decode_step(pos++); });
        double sum = 0;
        int layers = 0;
        for (size_t il = 0; il < fp.expert_bytes.size(); ++il) {
            if (fp.expert_bytes[il] == 0) continue;
            auto it = distinct.find(int(il));
            TETRA_CHECK(B == 1 || it != distinct.end(), "bench: MoE layer %zu gave no routing (tap moe_ids)", il);
            const int64_t d = it == distinct.end() ? k : it->second;
            r.bytes_per_step += double(d - k) * double(fp.expert_bytes[il]);
            sum += double(d), ++layers;
        }
        r.experts_per_layer = layers ? sum / layers : 0;
    }
    for (auto& t : tables) pool.release(t);
    r.roofline_pct = bw > 0 ? 100.0 * (r.bytes_per_step / (dt / f.output_len)) / bw : 0;
    return r;
}

// Per-kernel device time of decode steps at batch B (graphs off, every launch timed and waited
// for): where a step's time goes. Printed as a table, largest first.
void profile_decode(loaded_model& m, kv_cache& kv, block_pool& pool, const bench_flags& f, int64_t B) {
    bench_flags pf = f;
    pf.output_len = 8;
    pf.warmup = 1;
    bench_decode(m, kv, pool, pf, B, model_footprint{}, 0, false, [] {
        reset_op_profile();
        set_op_profiling(true);
    });
    set_op_profiling(false);
    std::vector<op_profile_entry> v = op_profile();
    double total = 0;
    for (const auto& e : v) total += e.ms;
    std::printf("profile: batch %lld, %d decode steps, kernel time %.3f ms per step (launches timed one by one)\n"
                "  %% time  ms/step  calls/step  avg us  kernel [last operand]\n",
                (long long)B, pf.output_len, total / pf.output_len);
    for (const auto& e : v)
        std::printf("  %5.1f  %7.3f  %10.1f  %7.1f  %s\n", 100 * e.ms / total, e.ms / pf.output_len,
                    double(e.calls) / pf.output_len, 1e3 * e.ms / double(e.calls), e.kernel.c_str());
}

// --breakdown: where a decode step at batch B goes, inside the graph. Each op class of the step
// (model/step_ops.h) is left out in turn and the step is timed again (a new runner: graphs
// captured without the class); the class's marginal cost is the full step minus the step without
// it, so it counts what the class adds to the chain of kernels (its launch, its own time, the
// overlap it prevents) rather than its kernels timed alone. Rounds alternate the full step and the
// steps without each class; each time is the best of the rounds. Outputs are garbage while a class
// is left out (timing only). MoE at B > 1: a class left out can change the routing, hence the
// experts the batch reads — read those rows with care.
struct breakdown_row {
    step_op op;
    int calls = 0;            // per step
    double without_ms = 0;    // step time without the class
    double marginal_ms = 0;   // full − without
    double weight_bytes = 0;  // weights the class reads per step (footprint; one token's experts)
};

struct breakdown_result {
    int64_t batch = 0;
    double full_ms = 0;
    std::vector<breakdown_row> rows;
};

breakdown_result breakdown_decode(loaded_model& m, kv_cache& kv, block_pool& pool, const bench_flags& f, int64_t B,
                                  const model_footprint& fp, bool graphs) {
    breakdown_result br;
    br.batch = B;
    double full = bench_decode(m, kv, pool, f, B, fp, 0, graphs).step_ms;
    const step_ops::counts calls = m.model->ops().calls;  // one decode step's forward
    for (int i = 0; i < k_step_op_count; ++i)
        if (calls[size_t(i)] > 0) {
            breakdown_row r;
            r.op = step_op(i), r.calls = calls[size_t(i)], r.weight_bytes = double(fp.op_bytes[size_t(i)]);
            r.without_ms = 1e300;
            br.rows.push_back(r);
        }
    for (int round = 0; round < f.breakdown_rounds; ++round) {
        if (round > 0) full = std::min(full, bench_decode(m, kv, pool, f, B, fp, 0, graphs).step_ms);
        for (breakdown_row& r : br.rows)
            r.without_ms = std::min(r.without_ms,
                                    bench_decode(m, kv, pool, f, B, fp, 0, graphs, nullptr, 1u << int(r.op)).step_ms);
    }
    br.full_ms = full;
    for (breakdown_row& r : br.rows) r.marginal_ms = full - r.without_ms;
    std::stable_sort(br.rows.begin(), br.rows.end(),
                     [](const breakdown_row& a, const breakdown_row& b) { return a.marginal_ms > b.marginal_ms; });
    return br;
}

void print_breakdown(const breakdown_result& br, double bw, bool graphs) {
    std::printf("breakdown: batch %lld, decode step %.3f ms (graphs %s); each op class left out in turn, best of the "
                "rounds\n  op class         calls/step  step without  marginal ms  us/call  %% of step  weight MB  "
                "us/call at roofline\n",
                (long long)br.batch, br.full_ms, graphs ? "on" : "off");
    double sum = 0;
    for (const breakdown_row& r : br.rows) {
        sum += r.marginal_ms;
        std::printf("  %-15s  %10d  %12.3f  %11.3f  %7.2f  %9.1f", step_op_name(r.op), r.calls, r.without_ms, r.marginal_ms,
                    1e3 * r.marginal_ms / r.calls, 100 * r.marginal_ms / br.full_ms);
        if (r.weight_bytes > 0 && bw > 0)
            std::printf("  %9.1f  %19.2f\n", r.weight_bytes / 1e6, 1e6 * r.weight_bytes / r.calls / bw);
        else
            std::printf("  %9s  %19s\n", "-", "-");
    }
    std::printf("  sum of the marginal costs %.3f ms (%.1f %% of the step); the difference is what two classes "
                "overlap or share\n", sum, 100 * sum / br.full_ms);
}

void bench(const model_flags& mf, const bench_flags& f) {
    std::vector<int64_t> batches = parse_list(f.batches);
    if (f.input_len < 1 || f.output_len < 1) throw cli_error("--input-len and --output-len must be >= 1", "e.g. --input-len 128 --output-len 64");
    model_flags flags = mf;
    int64_t max_b = *std::max_element(batches.begin(), batches.end());
    flags.max_tokens_per_step = std::max<int64_t>(flags.max_tokens_per_step, max_b);
    std::string dir = flags.model.empty() ? default_model_dir() : flags.model;
    load_options opt = flags.options();
    opt.require_tokenizer = false;
    opt.progress = !f.json;
    if (flags.threads > 0) set_num_threads(flags.threads);
    auto m = load_model(dir, opt);
    const model_config& c = m->config;
    const int kv_bytes = int(dtype_size(m->model->act_type()));
    model_footprint fp = decode_footprint(c, m->weights, kv_bytes);
    double bw = measure_read_bandwidth(*m->be);

    const int bs = 16;
    const int64_t per_seq = (f.input_len + warmup_steps(f) + f.output_len + 1 + bs - 1) / bs;  // + the routing probe
    kv_cache kv = kv_cache::create(*m->be, c, per_seq * max_b, bs, m->model->act_type());
    block_pool pool(per_seq * max_b);

    // Prefill: one sequence of input_len tokens.
    double prefill_tok_s = 0;
    {
        model_runner runner(*m->model, *m->be, kv);
        std::vector<int32_t> table, prompt(size_t(f.input_len), 7);
        pool.grow(table, f.input_len, bs);
        prefill(runner, table, prompt);  // warm-up
        double t0 = now_s();
        prefill(runner, table, prompt);
        prefill_tok_s = f.input_len / (now_s() - t0);
        pool.release(table);
    }
    std::vector<decode_result> rs;
    for (int64_t B : batches) rs.push_back(bench_decode(*m, kv, pool, f, B, fp, bw, !f.no_graphs));
    if (f.profile) profile_decode(*m, kv, pool, f, batches.front());
    std::optional<breakdown_result> br;
    if (f.breakdown) br = breakdown_decode(*m, kv, pool, f, batches.front(), fp, !f.no_graphs);

    if (f.json) {
        nlohmann::ordered_json j;
        j["model"] = dir, j["load_format"] = m->weights.format, j["device"] = m->be->device().name;
        j["activations"] = dtype_name(m->model->act_type());
        j["read_bandwidth_gbs"] = bw / 1e9, j["weight_bytes_per_step"] = fp.weight_bytes;
        j["kv_bytes_per_token"] = fp.kv_bytes_per_token, j["input_len"] = f.input_len, j["output_len"] = f.output_len;
        j["graphs"] = !f.no_graphs, j["prefill_tok_s"] = prefill_tok_s;
        for (const auto& r : rs)
            j["decode"].push_back({{"batch", r.batch}, {"ms_per_step", r.step_ms}, {"tok_s", r.tok_s},
                                   {"bytes_per_step", r.bytes_per_step}, {"roofline_pct", r.roofline_pct},
                                   {"moe_experts_per_layer", r.experts_per_layer}});
        if (br) {
            j["breakdown"]["batch"] = br->batch, j["breakdown"]["ms_per_step"] = br->full_ms;
            j["breakdown"]["ops"] = nlohmann::json::array();
            for (const breakdown_row& r : br->rows)
                j["breakdown"]["ops"].push_back({{"op", step_op_name(r.op)}, {"calls_per_step", r.calls},
                                                 {"ms_per_step_without", r.without_ms}, {"marginal_ms", r.marginal_ms},
                                                 {"weight_bytes_per_step", r.weight_bytes}});
        }
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model   %s (%s, %s)\ndevice  %s, measured read bandwidth %.0f GB/s; %s activations\n", dir.c_str(),
                c.architecture.c_str(), m->weights.format.c_str(), m->be->device().name.c_str(), bw / 1e9,
                dtype_name(m->model->act_type()));
    std::printf("weights %.3f GB read per decode step (lm_head %.3f GB); KV %.1f KiB per cached token\n",
                fp.weight_bytes / 1e9, fp.lm_head_bytes / 1e9, fp.kv_bytes_per_token / 1024.0);
    std::printf("prefill %d tokens: %.1f tok/s\n", f.input_len, prefill_tok_s);
    std::printf("decode (context %d..%d, graphs %s):\n  batch   ms/step     tok/s   GB/step   %% roofline\n", f.input_len,
                f.input_len + warmup_steps(f) + f.output_len, f.no_graphs ? "off" : "on");
    for (const auto& r : rs)
        std::printf("  %5lld  %8.3f  %8.1f  %8.3f   %6.1f\n", (long long)r.batch, r.step_ms, r.tok_s, r.bytes_per_step / 1e9,
                    r.roofline_pct);
    if (c.n_expert > 0) {
        std::printf("MoE: GB/step counts each distinct routed expert once (top-%lld of %lld per token); experts per MoE layer:",
                    (long long)c.n_expert_used, (long long)c.n_expert);
        for (const auto& r : rs) std::printf(" batch %lld %.1f%s", (long long)r.batch, r.experts_per_layer, &r == &rs.back() ? "\n" : ",");
    }
    if (br) print_breakdown(*br, bw, !f.no_graphs);
}

}  // namespace

void register_bench(CLI::App& app) {
    auto* cmd = app.add_subcommand("bench", "prefill/decode throughput vs the memory roofline (model dir, or config + --load-format dummy)");
    auto mf = std::make_shared<model_flags>();
    auto f = std::make_shared<bench_flags>();
    mf->add(cmd);
    cmd->add_option("--batch", f->batches, "decode batch sizes, comma-separated (default 1)");
    cmd->add_option("--input-len", f->input_len, "prompt tokens per sequence (default 128)");
    cmd->add_option("--output-len", f->output_len, "timed decode steps (default 64)");
    cmd->add_option("--warmup", f->warmup, "untimed decode steps first (default 4; at least 2 with --breakdown)");
    cmd->add_flag("--json", f->json, "print JSON");
    cmd->add_flag("--no-graphs", f->no_graphs, "decode without CUDA graphs (to see the launch overhead)");
    cmd->add_flag("--profile", f->profile, "per-kernel device time of a few decode steps at the first batch size");
    cmd->add_flag("--breakdown", f->breakdown,
                  "marginal cost of each op class of a decode step at the first batch size (each left out in turn; timing only)");
    cmd->add_option("--breakdown-rounds", f->breakdown_rounds, "rounds of --breakdown, best time of each kept (default 2)")
        ->check(CLI::Range(1, 100));
    cmd->callback([mf, f] { bench(*mf, *f); });
}

}  // namespace tetra

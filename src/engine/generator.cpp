#include "engine/generator.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "engine/output_guard.h"

namespace tetra {

namespace {
double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
constexpr int k_block_size = 16;
}  // namespace

generator::generator(causal_lm& m, backend& be, const tokenizer& tok, int64_t max_model_len)
    : model_(m),
      be_(be),
      tok_(tok),
      max_model_len_(max_model_len),
      kv_(kv_cache::create(be, m.config(), (max_model_len + k_block_size - 1) / k_block_size, k_block_size, m.act_type())),
      pool_(kv_.n_blocks),
      runner_(m, be, kv_) {}

std::vector<float> generator::prefill(const std::vector<int32_t>& tokens, bool all_rows) {
    const int64_t n = int64_t(tokens.size()), chunk = model_.max_tokens(), n_vocab = model_.config().n_vocab;
    TETRA_CHECK(n >= 1, "the prompt is empty");
    TETRA_CHECK(n <= max_model_len_, "the prompt has %lld tokens; this model's maximum context length is %lld tokens",
                (long long)n, (long long)max_model_len_);
    pool_.release(table_);
    TETRA_ASSERT(pool_.grow(table_, n, k_block_size));
    std::vector<float> out;
    for (int64_t p0 = 0; p0 < n; p0 += chunk) {
        seq_chunk c;
        c.block_table = &table_;
        c.pos0 = p0;
        c.tokens = tokens.data() + p0;
        c.n = std::min(chunk, n - p0);
        c.all_logits = all_rows;
        const std::vector<float>& l = runner_.run({c});
        if (all_rows) out.insert(out.end(), l.begin(), l.end());
        else if (p0 + c.n == n) out.assign(l.end() - n_vocab, l.end());
    }
    return out;
}

generation_result generator::generate(const std::vector<int32_t>& prompt, const sampling_params& p,
                                      const std::function<void(const std::string&)>& on_text) {
    p.validate();
    generation_result res;
    res.n_prompt = int64_t(prompt.size());
    const int32_t n_vocab = int32_t(model_.config().n_vocab);
    uint64_t seed = resolve_seed(p);
    token_history hist;
    hist.add_prompt(prompt);
    detokenizer detok = tok_.make_detokenizer(true);
    stop_string_matcher stops(p.stop, p.include_stop_str_in_output);
    auto emit = [&](const std::string& s) {
        if (s.empty()) return;
        res.text += s;
        if (on_text) on_text(s);
    };
    double t0 = now_s();
    std::vector<float> logits = prefill(prompt, false);
    output_guard guard;  // fails the request on NaN/Inf or degenerate logits (docs/no-silent-garbage.md)
    guard.check_step(logits.data(), n_vocab, 1, "prefill",
                     [&] { return first_bad_tap(model_, be_, [&] { prefill(prompt, false); }); });
    res.prefill_s = now_s() - t0;
    t0 = now_s();
    int64_t n_total = res.n_prompt;
    for (int32_t step = 0;; ++step) {
        sample_result s = sampler_.sample(logits.data(), n_vocab, p, hist, seed, step);
        guard.check_token(s.token);
        res.tokens.push_back(s.token);
        hist.add_output(s.token);
        ++n_total;
        res.status = check_stop_token(p, s.token, hist.n_output, n_total, max_model_len_);
        if (!res.status.drop_last_token_text) {
            auto r = stops.feed(detok.push(s.token), hist.n_output >= p.min_tokens);
            emit(r.text);
            if (r.stop) {
                res.status.reason = finish_reason::STOP;
                res.status.stop_str = r.stop;
                break;
            }
        }
        if (res.status.finished()) break;
        if (!pool_.grow(table_, n_total, k_block_size)) {  // cannot happen: pool sized for max_model_len
            res.status.reason = finish_reason::LENGTH;
            break;
        }
        seq_chunk c;
        c.block_table = &table_;
        c.pos0 = n_total - 1;
        c.tokens = &res.tokens.back();
        c.n = 1;
        const std::vector<float>& l = runner_.run({c});
        guard.check_step(l.data(), n_vocab, 1, strfmt("decode step %d", step + 1),
                         [&] { return first_bad_tap(model_, be_, [&] { runner_.run({c}); }); });
        logits.assign(l.begin(), l.end());
    }
    if (!stops.stopped()) emit(stops.feed(detok.finish(), true).text + stops.flush());
    res.decode_s = now_s() - t0;
    pool_.release(table_);
    return res;
}

std::vector<float> generator::all_logits(const std::vector<int32_t>& tokens) {
    std::vector<float> l = prefill(tokens, true);
    pool_.release(table_);
    return l;
}

double generator::mean_nll(const std::vector<int32_t>& tokens) {
    TETRA_CHECK(tokens.size() >= 2, "perplexity needs at least 2 tokens, got %zu", tokens.size());
    const int64_t n_vocab = model_.config().n_vocab;
    std::vector<float> l = all_logits(tokens);
    double nll = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
        const float* row = l.data() + i * size_t(n_vocab);
        double m = row[0];
        for (int64_t j = 1; j < n_vocab; ++j) m = std::max(m, double(row[j]));
        double z = 0;
        for (int64_t j = 0; j < n_vocab; ++j) z += std::exp(double(row[j]) - m);
        nll += (m + std::log(z)) - double(row[tokens[i + 1]]);
    }
    return nll / double(tokens.size() - 1);
}

}  // namespace tetra

// generator: one sequence at a time on a model (the CLI's `run` and `chat`, and perplexity).
// Prefill in chunks of the model's max_tokens, then decode token by token with the sampler;
// text is streamed through the detokenizer and the stop-string matcher. The KV blocks of the
// sequence come from a private block pool sized for max_model_len.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/generation_config.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "tokenizer/tokenizer.h"

namespace tetra {

struct generation_result {
    std::vector<int32_t> tokens;  // output token ids
    std::string text;             // output text (stop strings handled)
    stop_status status;
    int64_t n_prompt = 0;
    double prefill_s = 0, decode_s = 0;  // wall time
};

class generator {
  public:
    generator(causal_lm& m, backend& be, const tokenizer& tok, int64_t max_model_len);
    // on_text receives each newly safe piece of text as it is generated.
    generation_result generate(const std::vector<int32_t>& prompt, const sampling_params& p,
                               const std::function<void(const std::string&)>& on_text = {});
    // Teacher-forced mean negative log-likelihood (nats/token) of tokens[1..] given the prefix;
    // tokens.size() must be in [2, max_model_len]. perplexity = exp(nll).
    double mean_nll(const std::vector<int32_t>& tokens);
    // Raw logits of every position, f32 [tokens.size(), n_vocab] (teacher forcing; for references).
    std::vector<float> all_logits(const std::vector<int32_t>& tokens);
    int64_t max_model_len() const { return max_model_len_; }

  private:
    // Runs the prompt through the model; returns logits rows (last only unless all_rows).
    std::vector<float> prefill(const std::vector<int32_t>& tokens, bool all_rows);
    causal_lm& model_;
    backend& be_;
    const tokenizer& tok_;
    int64_t max_model_len_;
    kv_cache kv_;
    block_pool pool_;
    model_runner runner_;
    std::vector<int32_t> table_;
    sampler sampler_;
};

}  // namespace tetra

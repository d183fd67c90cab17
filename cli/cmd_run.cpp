// `tetra run [MODEL] -p PROMPT`: raw completion (no chat template), streamed to stdout; timing
// and token counts on stderr.
#include <cstdio>

#include "common.h"
#include "engine/generator.h"

namespace tetra {

void register_run(CLI::App& app) {
    auto* cmd = app.add_subcommand("run", "complete a prompt (raw text, no chat template), streaming to stdout");
    auto mf = std::make_shared<model_flags>();
    auto sf = std::make_shared<sampling_flags>();
    auto prompt = std::make_shared<std::string>();
    auto chat = std::make_shared<bool>(false);
    mf->add(cmd);
    sf->add(cmd);
    cmd->add_option("-p,--prompt", *prompt, "the prompt")->required();
    cmd->add_flag("--chat", *chat, "wrap the prompt as one user message with the chat template");
    cmd->callback([=] {
        auto m = mf->load();
        sampling_params p = sf->resolve(*m);
        std::string text = *prompt;
        bool add_special = true;
        if (*chat) {
            text = apply_chat_template(*m, nlohmann::ordered_json::array({{{"role", "user"}, {"content", *prompt}}}), true);
            add_special = false;  // the template already wrote the special tokens
        }
        std::vector<int32_t> ids = m->tok->encode(text, add_special);
        generator gen(*m->model, *m->be, *m->tok, m->max_model_len);
        generation_result r = gen.generate(ids, p, [](const std::string& s) {
            std::fwrite(s.data(), 1, s.size(), stdout);
            std::fflush(stdout);
        });
        std::printf("\n");
        std::fprintf(stderr, "[%lld prompt tokens in %.3f s, %zu generated in %.3f s: %.1f tok/s, finish: %s]\n",
                     (long long)r.n_prompt, r.prefill_s, r.tokens.size(), r.decode_s,
                     r.decode_s > 0 && r.tokens.size() > 1 ? double(r.tokens.size() - 1) / r.decode_s : 0.0,
                     finish_reason_name(r.status.reason) ? finish_reason_name(r.status.reason) : "none");
    });
}

}  // namespace tetra

// `tetra chat [MODEL]`: interactive chat on stdin/stdout with the model's chat template, streaming
// replies. Commands: /reset clears the history, /exit (or end of input) quits.
#include <cstdio>
#include <iostream>

#include "common.h"
#include "engine/generator.h"

namespace tetra {

void register_chat(CLI::App& app) {
    auto* cmd = app.add_subcommand("chat", "interactive chat with the model's chat template");
    auto mf = std::make_shared<model_flags>();
    auto sf = std::make_shared<sampling_flags>();
    auto system = std::make_shared<std::string>();
    mf->add(cmd);
    sf->add(cmd);
    cmd->add_option("--system", *system, "system prompt");
    cmd->callback([=] {
        auto m = mf->load();
        sampling_params p = sf->resolve(*m);
        generator gen(*m->model, *m->be, *m->tok, m->max_model_len);
        nlohmann::ordered_json history = nlohmann::ordered_json::array();
        if (!system->empty()) history.push_back({{"role", "system"}, {"content", *system}});
        std::fprintf(stderr, "tetra chat: %s (%s, loaded in %.2f s). /reset clears, /exit quits.\n", m->dir.c_str(),
                     m->weights.format.c_str(), m->load_s);
        std::string line;
        for (;;) {
            std::fprintf(stderr, "> ");
            if (!std::getline(std::cin, line) || line == "/exit") break;
            if (line == "/reset") {
                history = nlohmann::ordered_json::array();
                if (!system->empty()) history.push_back({{"role", "system"}, {"content", *system}});
                continue;
            }
            if (line.empty()) continue;
            history.push_back({{"role", "user"}, {"content", line}});
            std::string prompt = apply_chat_template(*m, history, true);
            std::vector<int32_t> ids = m->tok->encode(prompt, false);
            generation_result r = gen.generate(ids, p, [](const std::string& s) {
                std::fwrite(s.data(), 1, s.size(), stdout);
                std::fflush(stdout);
            });
            std::printf("\n");
            std::fflush(stdout);
            history.push_back({{"role", "assistant"}, {"content", r.text}});
        }
    });
}

}  // namespace tetra

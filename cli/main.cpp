// `tetra` entry point: validates the environment, dispatches to subcommands, and is the only place
// (with the server) that catches tetra::error: it prints `error: …` and exits 1.
#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "core/env.h"
#include "core/error.h"

// Unknown flags: "did you mean --x?" by edit distance over the flags of the subcommand that was
// given (and the app's), when one is close enough to be a typo (distance ≤ max(2, length/3)).
static void suggest_flags(const CLI::App& app) {
    auto distance = [](const std::string& a, const std::string& b) {
        std::vector<size_t> d(b.size() + 1);
        for (size_t j = 0; j <= b.size(); ++j) d[j] = j;
        for (size_t i = 1; i <= a.size(); ++i) {
            size_t diag = d[0];
            d[0] = i;
            for (size_t j = 1; j <= b.size(); ++j) {
                size_t up = d[j];
                d[j] = std::min({d[j] + 1, d[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
                diag = up;
            }
        }
        return d[b.size()];
    };
    std::vector<const CLI::App*> apps = {&app};
    for (const CLI::App* sub : app.get_subcommands()) apps.push_back(sub);
    for (const std::string& arg : app.remaining(true)) {
        if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
        std::string name = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
        std::string best;
        size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
        for (const CLI::App* a : apps)
            for (const CLI::Option* o : a->get_options())
                for (const std::string& l : o->get_lnames())
                    if (distance(name, l) < best_d) best_d = distance(name, l), best = l;
        if (!best.empty()) std::fprintf(stderr, "hint: unknown flag %s; did you mean --%s?\n", arg.c_str(), best.c_str());
    }
}

int main(int argc, char** argv) {
    CLI::App app{"tetra: NVFP4 inference engine and OpenAI-compatible server"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "help for every subcommand");
    tetra::register_version(app);
    tetra::register_run(app);
    tetra::register_chat(app);
    tetra::register_perplexity(app);
    tetra::register_quantize(app);
    tetra::register_inspect(app);
    tetra::register_doctor(app);
    tetra::register_serve(app);
    tetra::register_bench(app);
    try {
        tetra::env_validate();
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        if (dynamic_cast<const CLI::ExtrasError*>(&e)) suggest_flags(app);
        return rc;
    } catch (const tetra::cli_error& e) {
        std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint.c_str());
        return 1;
    } catch (const tetra::error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}

// `tetra` entry point: validates the environment, dispatches to subcommands, and is the only place
// (with the server) that catches tetra::error: it prints `error: …` and exits 1.
#include <cstdio>

#include "commands.h"
#include "core/env.h"
#include "core/error.h"

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
    try {
        tetra::env_validate();
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
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

// Subcommand registration: each cmd_<name>.cpp defines register_<name>(CLI::App&), which adds the
// subcommand, its flags (one declarative block per command) and its callback. Callbacks throw
// tetra::error on bad input; main() prints `error: …` (+ `hint: …`) and exits non-zero.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace tetra {

// An error with a hint line for the user.
struct cli_error : std::runtime_error {
    cli_error(const std::string& msg, std::string hint_) : std::runtime_error(msg), hint(std::move(hint_)) {}
    std::string hint;
};

void register_version(CLI::App& app);
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_quantize(CLI::App&);
void register_inspect(CLI::App&);
void register_doctor(CLI::App&);
void register_serve(CLI::App& app);
void register_bench(CLI::App& app);

}  // namespace tetra

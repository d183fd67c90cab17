// `tetra version`: the build's version and configuration.
#include "commands.h"

#include <cstdio>

namespace tetra {

void register_version(CLI::App& app) {
    auto* cmd = app.add_subcommand("version", "print the version and build configuration");
    cmd->callback([] { std::printf("tetra 0.1.0\n"); });
}

}  // namespace tetra

// TETRA_* environment variables: one table of every variable the program reads (name, meaning).
// Reading a variable not in the table is a programming error (assert); an unknown TETRA_* variable
// in the environment is a user error reported by env_validate() at start-up.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tetra {

struct env_var_info { const char* name; const char* help; };
const std::vector<env_var_info>& env_vars();

// Throws tetra::error naming each unknown TETRA_* variable and listing the valid ones.
void env_validate();

std::string env_str(const char* name, const std::string& def = "");
int64_t env_int(const char* name, int64_t def);  // throws if set but not an integer

// $TETRA_CACHE_DIR, else $XDG_CACHE_HOME/tetra, else $HOME/.cache/tetra. Prepared models live in
// <cache_dir>/models/<name> (e.g. SmolLM2-135M-Instruct, SmolLM2-135M-Instruct-NVFP4).
std::string cache_dir();

}  // namespace tetra

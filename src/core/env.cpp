#include "core/env.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace tetra {

const std::vector<env_var_info>& env_vars() {
    static const std::vector<env_var_info> k_vars = {
        {"TETRA_NUM_THREADS", "CPU worker threads (default: all hardware threads)"},
        {"TETRA_LOG_LEVEL", "log verbosity: debug, info, warn, error (default info)"},
        {"TETRA_KERNEL", "force kernels: op:name[,op:name...] (unknown names are errors)"},
        {"TETRA_CACHE_DIR", "where prepared models are cached (default ~/.cache/tetra)"},
        {"TETRA_PDL", "CUDA: 0 turns off programmatic dependent launch (sm_90+; default 1)"},
        {"TETRA_ATTN_SPLIT_KEYS", "CUDA decode attention: at least this many keys per split (default 16)"},
    };
    return k_vars;
}

static const env_var_info* find_var(const char* name) {
    for (const auto& v : env_vars())
        if (std::strcmp(v.name, name) == 0) return &v;
    return nullptr;
}

void env_validate() {
    std::string unknown;
    for (char** e = environ; e && *e; ++e) {
        if (std::strncmp(*e, "TETRA_", 6) != 0) continue;
        const char* eq = std::strchr(*e, '=');
        std::string name(*e, eq ? size_t(eq - *e) : std::strlen(*e));
        if (!find_var(name.c_str())) unknown += (unknown.empty() ? "" : ", ") + name;
    }
    if (unknown.empty()) return;
    std::string valid;
    for (const auto& v : env_vars()) valid += strfmt("\n  %-18s %s", v.name, v.help);
    TETRA_FAIL("unknown environment variable(s): %s (tetra reads only these TETRA_* variables:%s)",
               unknown.c_str(), valid.c_str());
}

std::string env_str(const char* name, const std::string& def) {
    TETRA_ASSERT(find_var(name) != nullptr);
    const char* v = std::getenv(name);
    return v ? std::string(v) : def;
}

int64_t env_int(const char* name, int64_t def) {
    std::string v = env_str(name);
    if (v.empty()) return def;
    char* end = nullptr;
    long long x = std::strtoll(v.c_str(), &end, 10);
    TETRA_CHECK(end && *end == '\0', "environment variable %s='%s' is not an integer", name, v.c_str());
    return int64_t(x);
}

std::string cache_dir() {
    std::string d = env_str("TETRA_CACHE_DIR");
    if (!d.empty()) return d;
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    if (xdg && *xdg) return std::string(xdg) + "/tetra";
    const char* home = std::getenv("HOME");
    TETRA_CHECK(home && *home, "cannot locate a cache directory: set TETRA_CACHE_DIR or HOME");
    return std::string(home) + "/.cache/tetra";
}

}  // namespace tetra

#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/env.h"
#include "core/error.h"

namespace tetra {

namespace {
std::atomic<int> g_level{-1};
std::mutex g_mu;

int level_from_env() {
    std::string v = env_str("TETRA_LOG_LEVEL", "info");
    if (v == "debug") return 0;
    if (v == "info") return 1;
    if (v == "warn") return 2;
    if (v == "error") return 3;
    if (v == "off") return 4;
    TETRA_FAIL("TETRA_LOG_LEVEL='%s' is not one of debug, info, warn, error, off", v.c_str());
}
}  // namespace

void set_log_level(log_level l) { g_level = int(l); }

log_level get_log_level() {
    if (g_level < 0) g_level = level_from_env();
    return log_level(g_level.load());
}

void log_msg(log_level l, const char* fmt, ...) {
    if (int(l) < int(get_log_level())) return;
    static const char* k_tags[] = {"debug", "info", "warn", "error"};
    va_list ap;
    va_start(ap, fmt);
    char buf[4096];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> lk(g_mu);
    std::fprintf(stderr, "[tetra %s] %s\n", k_tags[int(l)], buf);
}

}  // namespace tetra

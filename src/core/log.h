// Logging to stderr with a level threshold (TETRA_LOG_LEVEL or set_log_level). Thread-safe.
#pragma once

namespace tetra {

enum class log_level { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3, OFF = 4 };

void set_log_level(log_level l);
log_level get_log_level();
void log_msg(log_level l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace tetra

#define TETRA_LOG_DEBUG(...) ::tetra::log_msg(::tetra::log_level::DEBUG, __VA_ARGS__)
#define TETRA_LOG_INFO(...) ::tetra::log_msg(::tetra::log_level::INFO, __VA_ARGS__)
#define TETRA_LOG_WARN(...) ::tetra::log_msg(::tetra::log_level::WARN, __VA_ARGS__)
#define TETRA_LOG_ERROR(...) ::tetra::log_msg(::tetra::log_level::ERROR, __VA_ARGS__)

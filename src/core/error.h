// Errors, three tiers (STYLE.md): TETRA_ASSERT for internal invariants (aborts, also in release),
// TETRA_CHECK for anything caused by input (throws tetra::error with a printf-style message that
// names the culprit and gives expected vs actual). Only the boundaries (CLI, server) catch.
#pragma once
#include <stdexcept>
#include <string>

namespace tetra {

struct error : std::runtime_error {
    explicit error(const std::string& msg) : std::runtime_error(msg) {}
};

// printf-style formatting into a std::string.
std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void assert_fail(const char* cond, const char* file, int line);

}  // namespace tetra

#define TETRA_ASSERT(cond) \
    do { if (!(cond)) ::tetra::assert_fail(#cond, __FILE__, __LINE__); } while (0)

#define TETRA_CHECK(cond, ...) \
    do { if (!(cond)) throw ::tetra::error(::tetra::strfmt(__VA_ARGS__)); } while (0)

#define TETRA_FAIL(...) throw ::tetra::error(::tetra::strfmt(__VA_ARGS__))

#include "server/cors.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tetra {

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

std::string lower(std::string s) {
    for (char& ch : s) ch = char(std::tolower((unsigned char)ch));
    return s;
}

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
}

bool origin_allowed(const cors_config& c, const std::string& origin) {
    return contains(c.origins, "*") || contains(c.origins, origin);
}

// The Access-Control-Allow-Origin value: "*" for any origin without credentials, else the origin
// itself (then responses vary by Origin).
void add_origin(const cors_config& c, const std::string& origin, header_list& h) {
    const bool wildcard = contains(c.origins, "*") && !c.credentials;
    h.emplace_back("Access-Control-Allow-Origin", wildcard ? "*" : origin);
    if (!wildcard) h.emplace_back("Vary", "Origin");
    if (c.credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
}

}  // namespace

std::vector<std::string> parse_cors_list(const std::string& flag, const std::string& value) {
    nlohmann::json j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return {value};
    TETRA_CHECK(j.is_array() && std::all_of(j.begin(), j.end(), [](const nlohmann::json& x) { return x.is_string(); }),
                "%s: expected a JSON list of strings such as '[\"*\"]'; got %s", flag.c_str(), value.c_str());
    return j.get<std::vector<std::string>>();
}

header_list cors_response_headers(const cors_config& c, const std::string& origin) {
    header_list h;
    if (!origin.empty() && origin_allowed(c, origin)) add_origin(c, origin, h);
    return h;
}

bool is_cors_preflight(const std::string& method, const std::string& origin, const std::string& request_method) {
    return method == "OPTIONS" && !origin.empty() && !request_method.empty();
}

cors_preflight cors_preflight_response(const cors_config& c, const std::string& origin,
                                       const std::string& request_method, const std::string& request_headers) {
    std::vector<std::string> failed;
    if (!origin_allowed(c, origin)) failed.push_back("origin");
    if (!contains(c.methods, "*") && !contains(c.methods, request_method)) failed.push_back("method");
    // the CORS-safelisted request headers are always allowed
    std::vector<std::string> allowed = {"accept", "accept-language", "content-language", "content-type"};
    for (const std::string& h : c.headers) allowed.push_back(lower(h));
    std::vector<std::string> asked;
    for (size_t a = 0; a <= request_headers.size();) {
        size_t b = std::min(request_headers.find(',', a), request_headers.size());
        const std::string h = lower(trim(request_headers.substr(a, b - a)));
        if (!h.empty()) asked.push_back(h);
        a = b + 1;
    }
    if (!contains(c.headers, "*"))
        for (const std::string& h : asked)
            if (!contains(allowed, h)) {
                failed.push_back("headers");
                break;
            }
    cors_preflight r;
    if (!failed.empty()) {
        r.status = 400;
        r.body = "Disallowed CORS " + join(failed);
        return r;
    }
    r.body = "OK";
    add_origin(c, origin, r.headers);
    r.headers.emplace_back("Access-Control-Allow-Methods", contains(c.methods, "*")
                                                               ? "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
                                                               : join(c.methods));
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    // "*": the headers the browser asked for; otherwise the configured list and the safelisted ones
    if (contains(c.headers, "*")) {
        if (!request_headers.empty()) r.headers.emplace_back("Access-Control-Allow-Headers", request_headers);
    } else {
        r.headers.emplace_back("Access-Control-Allow-Headers", join(allowed));
    }
    return r;
}

}  // namespace tetra

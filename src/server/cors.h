// server/cors: Cross-Origin Resource Sharing as vLLM's server (FastAPI's CORSMiddleware) with its
// flags --allowed-origins / --allowed-methods / --allowed-headers (JSON lists, default ["*"]) and
// --allow-credentials, so browser clients that work against vLLM work against tetra.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tetra {

struct cors_config {
    std::vector<std::string> origins{"*"}, methods{"*"}, headers{"*"};
    bool credentials = false;
};

// A flag's value as vLLM takes it, a JSON list of strings ('["*"]', '["https://a.example"]'); a
// value that is not JSON is one item. Throws tetra::error naming the flag for other JSON.
std::vector<std::string> parse_cors_list(const std::string& flag, const std::string& value);

using header_list = std::vector<std::pair<std::string, std::string>>;

// Headers to add to the response of a request whose Origin header is `origin` ("" when absent):
// nothing without an Origin or for an origin not allowed.
header_list cors_response_headers(const cors_config& c, const std::string& origin);

struct cors_preflight {
    int status = 200;    // 200, or 400 with body "Disallowed CORS origin, method, headers" (the failed parts)
    std::string body;    // "OK" or the refusal
    header_list headers;
};
// Whether an OPTIONS request is a CORS preflight: it carries Origin and Access-Control-Request-Method.
bool is_cors_preflight(const std::string& method, const std::string& origin, const std::string& request_method);
// The answer to a preflight (request_headers: Access-Control-Request-Headers, "" when absent).
cors_preflight cors_preflight_response(const cors_config& c, const std::string& origin,
                                       const std::string& request_method, const std::string& request_headers);

}  // namespace tetra

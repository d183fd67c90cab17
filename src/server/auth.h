// server/auth: --api-key checks as vLLM: `Authorization: Bearer <key>` on /v1/* (and the
// tokenizer endpoints); /health, /ping, /metrics and /version stay open. Constant-time compare.
#pragma once
#include <string>

namespace tetra {

bool path_needs_auth(const std::string& path);
// header: the Authorization header value ("" when absent).
bool bearer_matches(const std::string& header, const std::string& api_key);

}  // namespace tetra

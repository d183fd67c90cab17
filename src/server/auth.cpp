#include "server/auth.h"

namespace tetra {

bool path_needs_auth(const std::string& path) {
    return path.compare(0, 4, "/v1/") == 0 || path == "/v1" || path == "/tokenize" || path == "/detokenize";
}

bool bearer_matches(const std::string& header, const std::string& api_key) {
    const std::string prefix = "Bearer ";
    if (header.compare(0, prefix.size(), prefix) != 0) return false;
    std::string given = header.substr(prefix.size());
    // constant time in the key's content: always compare api_key.size() bytes
    unsigned char diff = given.size() == api_key.size() ? 0 : 1;
    for (size_t i = 0; i < api_key.size(); ++i) diff |= (unsigned char)(api_key[i] ^ (i < given.size() ? given[i] : 0));
    return diff == 0;
}

}  // namespace tetra

// server/cors: vLLM's CORS behaviour (FastAPI's CORSMiddleware under --allowed-origins /
// --allowed-methods / --allowed-headers / --allow-credentials), by hand from Starlette's rules.
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/cors.h"

using namespace tetra;

namespace {

std::string header(const header_list& h, const std::string& name) {
    for (const auto& kv : h)
        if (kv.first == name) return kv.second;
    return "<absent>";
}

}  // namespace

TEST(cors, flag_values_are_json_lists_as_vllm) {
    EXPECT_EQ(parse_cors_list("--allowed-origins", R"(["*"])"), std::vector<std::string>{"*"});
    EXPECT_EQ(parse_cors_list("--allowed-origins", R"(["https://a.example", "http://b:3000"])"),
              (std::vector<std::string>{"https://a.example", "http://b:3000"}));
    EXPECT_EQ(parse_cors_list("--allowed-origins", "https://a.example"), std::vector<std::string>{"https://a.example"});
    try {
        parse_cors_list("--allowed-methods", R"({"a": 1})");
        FAIL() << "an object was accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("--allowed-methods"), std::string::npos) << e.what();
    }
}

TEST(cors, simple_responses) {
    cors_config any;  // vLLM's defaults: any origin, no credentials
    EXPECT_TRUE(cors_response_headers(any, "").empty());  // no Origin: no CORS headers
    header_list h = cors_response_headers(any, "https://a.example");
    EXPECT_EQ(header(h, "Access-Control-Allow-Origin"), "*");
    EXPECT_EQ(header(h, "Vary"), "<absent>");
    EXPECT_EQ(header(h, "Access-Control-Allow-Credentials"), "<absent>");

    cors_config one;
    one.origins = {"https://a.example"};
    h = cors_response_headers(one, "https://a.example");
    EXPECT_EQ(header(h, "Access-Control-Allow-Origin"), "https://a.example");
    EXPECT_EQ(header(h, "Vary"), "Origin");
    EXPECT_TRUE(cors_response_headers(one, "https://evil.example").empty());

    cors_config cred;  // any origin with credentials: the origin is echoed, never "*"
    cred.credentials = true;
    h = cors_response_headers(cred, "https://a.example");
    EXPECT_EQ(header(h, "Access-Control-Allow-Origin"), "https://a.example");
    EXPECT_EQ(header(h, "Access-Control-Allow-Credentials"), "true");
}

TEST(cors, preflight) {
    EXPECT_TRUE(is_cors_preflight("OPTIONS", "https://a.example", "POST"));
    EXPECT_FALSE(is_cors_preflight("OPTIONS", "", "POST"));
    EXPECT_FALSE(is_cors_preflight("OPTIONS", "https://a.example", ""));
    EXPECT_FALSE(is_cors_preflight("POST", "https://a.example", "POST"));

    cors_config any;
    cors_preflight p = cors_preflight_response(any, "https://a.example", "POST", "authorization, content-type");
    EXPECT_EQ(p.status, 200);
    EXPECT_EQ(p.body, "OK");
    EXPECT_EQ(header(p.headers, "Access-Control-Allow-Origin"), "*");
    EXPECT_EQ(header(p.headers, "Access-Control-Allow-Methods"), "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
    EXPECT_EQ(header(p.headers, "Access-Control-Allow-Headers"), "authorization, content-type");  // "*": echoed
    EXPECT_EQ(header(p.headers, "Access-Control-Max-Age"), "600");

    cors_config strict;
    strict.origins = {"https://a.example"};
    strict.methods = {"GET", "POST"};
    strict.headers = {"Authorization"};
    p = cors_preflight_response(strict, "https://a.example", "POST", "Authorization, Content-Type");
    EXPECT_EQ(p.status, 200);  // Content-Type is safelisted
    EXPECT_EQ(header(p.headers, "Access-Control-Allow-Origin"), "https://a.example");
    EXPECT_EQ(header(p.headers, "Access-Control-Allow-Methods"), "GET, POST");
    EXPECT_EQ(header(p.headers, "Access-Control-Allow-Headers"),
              "accept, accept-language, content-language, content-type, authorization");
    p = cors_preflight_response(strict, "https://evil.example", "DELETE", "x-custom");
    EXPECT_EQ(p.status, 400);
    EXPECT_EQ(p.body, "Disallowed CORS origin, method, headers");
    EXPECT_TRUE(p.headers.empty());
    EXPECT_EQ(cors_preflight_response(strict, "https://a.example", "PUT", "").body, "Disallowed CORS method");
}

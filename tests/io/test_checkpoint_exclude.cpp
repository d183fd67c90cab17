// Exclusion matching: Python fnmatch semantics, ModelOpt exact/prefix/wildcard with vLLM's strict
// reading of "name*", compressed-tensors exact names and re: patterns with re.match (start-anchored)
// semantics, fused-name and language_model. aliases. Expected truth values follow Python's
// fnmatch.fnmatchcase / re.match on the same inputs.
#include <gtest/gtest.h>

#include "io/exclude.h"
#include "test_checkpoint_util.h"

namespace tetra {
namespace {

TEST(exclude, fnmatch_like_python) {
    struct c { const char* p; const char* s; bool m; } cases[] = {
        {"*", "", true}, {"*", "a.b", true}, {"a*", "a", true}, {"a*", "a.b.c", true}, {"a*", "ba", false},
        {"*lm_head*", "lm_head", true}, {"*lm_head*", "model.lm_head.x", true}, {"a?c", "abc", true},
        {"a?c", "ac", false}, {"a[bc]d", "acd", true}, {"a[!bc]d", "acd", false}, {"a[!bc]d", "axd", true},
        {"a[a-c]", "ab", true}, {"a[a-c]", "ad", false}, {"a[", "a[", true}, {"a[b", "a[b", true},
        {"*.mlp.gate.*", "model.layers.0.mlp.gate.weight_quantizer", true}, {"*.mlp.gate.*", "x.mlp.gate_proj.w", false},
        {"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false}, {"**", "x", true}, {"x", "X", false},
    };
    for (const auto& t : cases) EXPECT_EQ(fnmatch_case(t.p, t.s), t.m) << t.p << " vs " << t.s;
}

TEST(exclude, modelopt_exact_prefix_wildcard_and_strict_reading) {
    exclude_matcher m({"lm_head", "model.layers.1", "model.layers.2.mlp.gate*", "*mtp*"}, exclude_syntax::MODELOPT);
    EXPECT_TRUE(m.matches("lm_head"));
    EXPECT_FALSE(m.matches("lm_head_2"));
    EXPECT_TRUE(m.matches("model.layers.1.self_attn.q_proj"));  // dot prefix
    EXPECT_FALSE(m.matches("model.layers.10.self_attn.q_proj"));
    EXPECT_TRUE(m.matches("model.layers.2.mlp.gate"));
    EXPECT_TRUE(m.matches("model.layers.2.mlp.gate.weight"));
    EXPECT_TRUE(m.matches("model.layers.2.mlp.gate_proj"));           // fnmatch reading
    EXPECT_FALSE(m.matches("model.layers.2.mlp.gate_proj", true));    // vLLM: gate* = gate, gate.*
    EXPECT_TRUE(m.matches("model.layers.2.mlp.gate", true));
    EXPECT_TRUE(m.matches("model.layers.2.mlp.gate.x", true));
    EXPECT_TRUE(m.matches("model.mtp.layers.0.eh_proj"));
    EXPECT_EQ(*m.match("model.mtp.fc"), "*mtp*");
    EXPECT_EQ(m.match("model.layers.0.self_attn.q_proj"), nullptr);
}

TEST(exclude, compressed_tensors_exact_and_re_match) {
    exclude_matcher m({"lm_head", "re:.*mlp.gate$", "re:model.layers.1"}, exclude_syntax::COMPRESSED_TENSORS);
    EXPECT_TRUE(m.matches("lm_head"));
    EXPECT_FALSE(m.matches("lm_head.x"));  // plain names: exact only
    EXPECT_FALSE(m.matches("model.lm_head"));
    EXPECT_TRUE(m.matches("model.layers.0.mlp.gate"));
    EXPECT_FALSE(m.matches("model.layers.0.mlp.gate_proj"));  // '$'
    // re.match anchors at the start only: "model.layers.1" also matches layer 10 ('.' is any char).
    EXPECT_TRUE(m.matches("model.layers.10.self_attn.q_proj"));
    EXPECT_TRUE(m.matches("model.layers.1.x"));
    EXPECT_FALSE(m.matches("x.model.layers.1"));  // not a search
    exclude_matcher mw({"model.layers.*"}, exclude_syntax::COMPRESSED_TENSORS);
    EXPECT_FALSE(mw.matches("model.layers.0.x"));  // no wildcards in CT plain names
}

TEST(exclude, fused_and_language_model_aliases) {
    exclude_matcher m({"model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj"},
                      exclude_syntax::COMPRESSED_TENSORS);
    for (const char* s : {"q_proj", "k_proj", "v_proj"})
        EXPECT_TRUE(m.matches(std::string("model.layers.0.self_attn.") + s)) << s;
    EXPECT_FALSE(m.matches("model.layers.0.self_attn.o_proj"));
    EXPECT_TRUE(m.matches("model.layers.0.mlp.up_proj"));
    EXPECT_FALSE(m.matches("model.layers.0.mlp.down_proj"));
    exclude_matcher lm({"model.layers.3*"}, exclude_syntax::MODELOPT);
    EXPECT_TRUE(lm.matches("language_model.model.layers.3.mlp.up_proj"));
}

TEST(exclude, bad_regex_names_the_pattern) {
    std::string msg = error_of([] { exclude_matcher({"re:(unclosed"}, exclude_syntax::COMPRESSED_TENSORS); });
    EXPECT_NE(msg.find("'re:(unclosed'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tetra

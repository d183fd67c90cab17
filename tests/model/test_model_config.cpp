// model/model_config: parsing of HF config.json for the supported architectures, and the errors
// for bad input (each must name the file and the field).
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model_config.h"

using namespace tetra;

static std::string err_of(const std::string& text) {
    try {
        parse_model_config(text, "dir/config.json");
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

TEST(model_config, llama3_with_rope_scaling) {
    auto c = parse_model_config(R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,
        "intermediate_size":14336,"num_attention_heads":32,"num_key_value_heads":8,"num_hidden_layers":32,
        "vocab_size":128256,"rms_norm_eps":1e-5,"rope_theta":500000.0,"max_position_embeddings":131072,
        "rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
        "original_max_position_embeddings":8192,"rope_type":"llama3"},"eos_token_id":[128001,128008,128009],
        "bos_token_id":128000,"tie_word_embeddings":false})", "x");
    EXPECT_EQ(c.n_embd, 4096);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.n_head_kv, 8);
    EXPECT_EQ(c.rope.type, "llama3");
    EXPECT_FLOAT_EQ(c.rope.theta, 500000.0f);
    EXPECT_EQ(c.rope.original_max_position, 8192);
    EXPECT_EQ(c.eos_token_ids.size(), 3u);
    EXPECT_FALSE(c.qk_norm);
    EXPECT_FALSE(c.attention_bias);
}

TEST(model_config, qwen3_explicit_head_dim_and_qk_norm) {
    auto c = parse_model_config(R"({"architectures":["Qwen3ForCausalLM"],"hidden_size":1024,"intermediate_size":3072,
        "num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"num_hidden_layers":28,"vocab_size":151936,
        "rope_theta":1000000,"tie_word_embeddings":true,"eos_token_id":151645})", "x");
    EXPECT_EQ(c.head_dim, 128);  // not n_embd / n_head = 64
    EXPECT_TRUE(c.qk_norm);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{151645});
}

TEST(model_config, qwen2_is_refused_until_biases_exist) {
    std::string e = err_of(R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":896,"intermediate_size":4864,
        "num_attention_heads":14,"num_key_value_heads":2,"num_hidden_layers":24,"vocab_size":151936})");
    EXPECT_NE(e.find("'Qwen2ForCausalLM' is not supported"), std::string::npos);
    EXPECT_NE(e.find("LlamaForCausalLM, Qwen3ForCausalLM"), std::string::npos);
}

TEST(model_config, errors_name_file_and_field) {
    EXPECT_NE(err_of("{").find("dir/config.json: invalid JSON"), std::string::npos);
    EXPECT_NE(err_of(R"({"architectures":["MambaForCausalLM"]})").find("'MambaForCausalLM' is not supported"),
              std::string::npos);
    std::string e = err_of(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64})");
    EXPECT_NE(e.find("dir/config.json"), std::string::npos);
    EXPECT_NE(e.find("intermediate_size"), std::string::npos);
    e = err_of(R"({"architectures":["LlamaForCausalLM"],"hidden_size":"64","intermediate_size":1,
        "num_attention_heads":1,"num_hidden_layers":1,"vocab_size":1})");
    EXPECT_NE(e.find("'hidden_size' must be an integer"), std::string::npos);
    e = err_of(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":1,
        "num_attention_heads":6,"num_key_value_heads":4,"num_hidden_layers":1,"vocab_size":1,"head_dim":16})");
    EXPECT_NE(e.find("not a multiple of num_key_value_heads"), std::string::npos);
    e = err_of(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":1,
        "num_attention_heads":4,"num_hidden_layers":1,"vocab_size":1,"rope_scaling":{"rope_type":"yarn"}})");
    EXPECT_NE(e.find("rope_scaling type 'yarn'"), std::string::npos);
}

TEST(model_config, transformers5_rope_parameters) {
    auto c = parse_model_config(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,
        "num_attention_heads":4,"num_hidden_layers":1,"vocab_size":32,
        "rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,
        "high_freq_factor":4.0,"original_max_position_embeddings":8192}})", "x");
    EXPECT_FLOAT_EQ(c.rope.theta, 500000.0f);
    EXPECT_EQ(c.rope.type, "llama3");
    EXPECT_FLOAT_EQ(c.rope.factor, 32.0f);
}

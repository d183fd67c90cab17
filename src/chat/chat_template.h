// Chat-template rendering as transformers' apply_chat_template(tokenize=False) does it: variables
// messages, tools (None when absent), documents (None), add_generation_prompt, the special tokens
// (bos_token, eos_token when set) and extra kwargs (enable_thinking, date_string, ...), which win.
// Like transformers 5, a message's reasoning_content/thinking/reasoning is exposed under both
// `thinking` and `reasoning_content`.
// Loading: --chat-template file > chat_template.jinja next to tokenizer_config.json > its
// "chat_template" field (a string, or a list of {name, template}: "tool_use" when tools are given
// and present, else "default"). Message preprocessing (e.g. JSON-string tool arguments) is the
// caller's job, as in vLLM.
#pragma once
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja.h"

namespace tetra {

struct chat_template_inputs {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null: no tools (the template sees None)
    bool add_generation_prompt = false;
    std::optional<std::string> bos_token;
    std::optional<std::string> eos_token;
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // extra template variables
    std::optional<std::tm> now;  // strftime_now's time; unset = local time
};

class chat_template {
public:
    // Throws tetra::error with line/column on syntax errors.
    explicit chat_template(const std::string& source, std::string name = "chat template");
    std::string render(const chat_template_inputs& in) const;
    const std::string& source() const { return source_; }

private:
    std::string source_;
    jinja_template tmpl_;
};

// Named template sources: a single unnamed template is returned as {"default", source}.
using chat_template_sources = std::vector<std::pair<std::string, std::string>>;

// From a parsed tokenizer_config.json; `what` names the file in errors. Empty when absent.
chat_template_sources chat_templates_from_config(const nlohmann::ordered_json& cfg, const std::string& what);

// Reads model_dir/{chat_template.jinja, tokenizer_config.json}, or override_file when non-empty.
// Throws tetra::error when no template is found.
chat_template_sources load_chat_templates(const std::string& model_dir, const std::string& override_file = "");

// Picks `name` if given, else "tool_use" when has_tools and present, else "default".
std::string pick_chat_template(const chat_template_sources& sources, const std::string& name, bool has_tools);

// bos_token/eos_token/... from tokenizer_config.json: a string or an AddedToken {"content": ...}.
std::optional<std::string> special_token_from_config(const nlohmann::ordered_json& cfg, const std::string& key);

}  // namespace tetra

// Chat-template loading and rendering (see chat_template.h for the variable set and precedence).
// Messages get transformers' reasoning-field aliasing before rendering (render_jinja_template).
#include "chat/chat_template.h"

#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "core/error.h"

namespace tetra {

namespace {

bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    TETRA_CHECK(f.good(), "chat template: cannot open '%s'", path.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// transformers' _alias_reasoning_fields: the first non-null of reasoning_content / thinking /
// reasoning is exposed as both `thinking` (first key unless present) and `reasoning_content`.
nlohmann::ordered_json alias_reasoning_fields(const nlohmann::ordered_json& messages) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& m : messages) {
        const nlohmann::ordered_json* reasoning = nullptr;
        if (m.is_object())
            for (const char* key : {"reasoning_content", "thinking", "reasoning"})
                if (!reasoning && m.contains(key) && !m[key].is_null()) reasoning = &m[key];
        if (!reasoning) {
            out.push_back(m);
            continue;
        }
        nlohmann::ordered_json a = nlohmann::ordered_json::object();
        a["thinking"] = *reasoning;
        for (auto it = m.begin(); it != m.end(); ++it) a[it.key()] = it.value();
        a["reasoning_content"] = *reasoning;
        out.push_back(std::move(a));
    }
    return out;
}

}  // namespace

chat_template::chat_template(const std::string& source, std::string name)
    : source_(source), tmpl_(source, std::move(name)) {}

std::string chat_template::render(const chat_template_inputs& in) const {
    TETRA_CHECK(in.messages.is_array(), "chat template: messages must be a JSON array, got %s",
                in.messages.type_name());
    TETRA_CHECK(in.kwargs.is_object(), "chat template: kwargs must be a JSON object, got %s",
                in.kwargs.type_name());
    jvalue ctx = jvalue::make_dict();
    jdict& d = *ctx.dict;
    d.set("messages", jvalue_from_json(alias_reasoning_fields(in.messages)));
    d.set("tools", jvalue_from_json(in.tools));
    d.set("documents", jvalue::none());
    d.set("add_generation_prompt", jvalue::boolean(in.add_generation_prompt));
    if (in.bos_token) d.set("bos_token", jvalue::string(*in.bos_token));
    if (in.eos_token) d.set("eos_token", jvalue::string(*in.eos_token));
    for (auto it = in.kwargs.begin(); it != in.kwargs.end(); ++it) d.set(it.key(), jvalue_from_json(it.value()));
    jinja_render_options opts;
    opts.now = in.now;
    return tmpl_.render(ctx, opts);
}

chat_template_sources chat_templates_from_config(const nlohmann::ordered_json& cfg, const std::string& what) {
    chat_template_sources out;
    if (!cfg.is_object() || !cfg.contains("chat_template") || cfg["chat_template"].is_null()) return out;
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) {
        out.emplace_back("default", ct.get<std::string>());
        return out;
    }
    TETRA_CHECK(ct.is_array(), "%s: field 'chat_template' must be a string or a list of {name, template}, got %s",
                what.c_str(), ct.type_name());
    for (size_t k = 0; k < ct.size(); ++k) {
        const auto& e = ct[k];
        TETRA_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("template") &&
                        e["template"].is_string(),
                    "%s: chat_template[%zu] must be {\"name\": string, \"template\": string}", what.c_str(), k);
        out.emplace_back(e["name"].get<std::string>(), e["template"].get<std::string>());
    }
    return out;
}

chat_template_sources load_chat_templates(const std::string& model_dir, const std::string& override_file) {
    if (!override_file.empty()) return {{"default", read_file(override_file)}};
    std::string jinja_path = model_dir + "/chat_template.jinja";
    if (file_exists(jinja_path)) return {{"default", read_file(jinja_path)}};
    std::string cfg_path = model_dir + "/tokenizer_config.json";
    TETRA_CHECK(file_exists(cfg_path),
                "chat template: found neither '%s' nor '%s'; pass --chat-template FILE", jinja_path.c_str(),
                cfg_path.c_str());
    nlohmann::ordered_json cfg;
    try {
        cfg = nlohmann::ordered_json::parse(read_file(cfg_path));
    } catch (const nlohmann::json::exception& e) {
        TETRA_FAIL("%s: invalid JSON: %s", cfg_path.c_str(), e.what());
    }
    chat_template_sources out = chat_templates_from_config(cfg, cfg_path);
    TETRA_CHECK(!out.empty(), "%s: no 'chat_template' field and no chat_template.jinja; pass --chat-template FILE",
                cfg_path.c_str());
    return out;
}

std::string pick_chat_template(const chat_template_sources& sources, const std::string& name, bool has_tools) {
    auto find = [&](const std::string& n) -> const std::string* {
        for (auto& s : sources)
            if (s.first == n) return &s.second;
        return nullptr;
    };
    std::string names;
    for (auto& s : sources) names += (names.empty() ? "" : ", ") + s.first;
    if (!name.empty()) {
        const std::string* s = find(name);
        TETRA_CHECK(s, "chat template: no template named '%s'; available: %s", name.c_str(), names.c_str());
        return *s;
    }
    if (has_tools)
        if (const std::string* s = find("tool_use")) return *s;
    const std::string* s = find("default");
    TETRA_CHECK(s, "chat template: no 'default' template; available: %s", names.c_str());
    return *s;
}

std::optional<std::string> special_token_from_config(const nlohmann::ordered_json& cfg, const std::string& key) {
    if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
    const auto& v = cfg[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return std::nullopt;
}

}  // namespace tetra

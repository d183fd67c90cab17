#include "engine/loaded_model.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>

#include <chrono>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "engine/selftest.h"
#include "io/dummy_weights.h"

namespace tetra {

namespace {

bool file_exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

void read_tokenizer_config(loaded_model& m, const std::string& dir) {
    std::string path = dir + "/tokenizer_config.json";
    if (!file_exists(path)) return;
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    nlohmann::ordered_json cfg;
    try {
        cfg = nlohmann::ordered_json::parse(ss.str());
    } catch (const std::exception& e) {
        TETRA_FAIL("%s: invalid JSON: %s", path.c_str(), e.what());
    }
    m.bos_token = special_token_from_config(cfg, "bos_token");
    m.eos_token = special_token_from_config(cfg, "eos_token");
}

void progress_line(bool on, const char* what, double t0) {
    if (!on) return;
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    TETRA_LOG_INFO("%-28s %6.2f s", what, t - t0);
}

// Dummy weights follow the config's quantization_config: NVFP4 when it names NVFP4 (as a real
// ModelOpt / compressed-tensors NVFP4 checkpoint's config.json does), else bf16.
std::string dummy_quant(const model_config& c) {
    std::ifstream f(c.path);
    std::stringstream ss;
    ss << f.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (!j.is_object() || !j.contains("quantization_config")) return "bf16";
    std::string q = j["quantization_config"].dump();
    for (char& ch : q) ch = char(std::tolower((unsigned char)ch));
    return q.find("nvfp4") != std::string::npos ? "nvfp4" : "bf16";
}

}  // namespace

std::optional<dtype> activation_dtype(const std::string& name) {
    if (name == "auto") return std::nullopt;
    if (name == "bfloat16") return dtype::BF16;
    if (name == "float32" || name == "float") return dtype::F32;
    if (name == "float16" || name == "half")
        TETRA_FAIL("--dtype %s: tetra's matmul kernels take bfloat16 or float32 activations; use --dtype bfloat16 "
                   "(the CUDA default) or float32", name.c_str());
    TETRA_FAIL("--dtype '%s' is not a dtype; expected auto, bfloat16, float32 or float", name.c_str());
}

std::unique_ptr<backend> make_backend(const std::string& device) {
    if (device == "cpu") return make_cpu_backend();
    if (device == "auto") return cuda_device_count() > 0 ? make_cuda_backend(0) : make_cpu_backend();
    if (device == "cuda") return make_cuda_backend(0);
    if (device.rfind("cuda:", 0) == 0) {
        const std::string idx = device.substr(5);
        TETRA_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos && idx.size() < 4,
                    "--device '%s': expected cuda:N with a device index N", device.c_str());
        return make_cuda_backend(std::stoi(idx));
    }
    TETRA_FAIL("--device '%s' is not a device; expected auto, cpu, cuda or cuda:N", device.c_str());
}

std::unique_ptr<loaded_model> load_model(const std::string& dir, const load_options& opt) {
    using clock = std::chrono::steady_clock;
    double t0 = std::chrono::duration<double>(clock::now().time_since_epoch()).count();
    struct stat st;
    TETRA_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "model directory '%s' does not exist", dir.c_str());
    const std::optional<dtype> act = activation_dtype(opt.act_dtype);  // a bad --dtype fails before the weights load
    auto m = std::make_unique<loaded_model>();
    m->dir = dir;
    m->config = load_model_config(dir);
    progress_line(opt.progress, "config", t0);
    if (opt.load_format == "dummy") {
        dummy_options d;
        d.seed = opt.seed;
        d.quant = dummy_quant(m->config);
        m->weights = make_dummy_weights(m->config, d);
    } else {
        TETRA_CHECK(opt.load_format == "auto" || opt.load_format == "safetensors",
                    "--load-format '%s' is not supported; expected auto, safetensors or dummy", opt.load_format.c_str());
        m->weights = load_weights(dir);
    }
    progress_line(opt.progress, ("weights (" + m->weights.format + ")").c_str(), t0);
    m->be = make_backend(opt.device);
    if (opt.progress) TETRA_LOG_INFO("device: %s", m->be->device().name.c_str());
    model_options mo;
    mo.max_tokens = opt.max_tokens;
    mo.mode = opt.mode;
    mo.act = act;
    if (opt.progress && isatty(STDERR_FILENO)) {
        mo.progress = [](int64_t done, int64_t total) {
            int bar = int(30 * done / total);
            std::fprintf(stderr, "\rloading layers [%.*s%*s] %lld/%lld", bar, "##############################", 30 - bar, "",
                         (long long)done, (long long)total);
            if (done == total) std::fprintf(stderr, "\n");
        };
    }
    m->model = create_model(m->config, m->weights, *m->be, mo);
    selftest_options so;
    so.skip = opt.skip_selftest, so.max_tokens = opt.max_tokens, so.mode = opt.mode, so.act = m->model->act_type();
    run_selftest(m->config, m->weights, *m->be, so);
    progress_line(opt.progress, "model prepared", t0);
    const std::string tok_dir = opt.tokenizer_dir.empty() ? dir : opt.tokenizer_dir;
    if (opt.require_tokenizer || file_exists(tok_dir + "/tokenizer.json")) m->tok = tokenizer::load_dir(tok_dir);
    read_tokenizer_config(*m, tok_dir);
    if (!opt.chat_template_file.empty() || file_exists(tok_dir + "/tokenizer_config.json") ||
        file_exists(tok_dir + "/chat_template.jinja")) {
        try {
            m->templates = load_chat_templates(tok_dir, opt.chat_template_file);
        } catch (const error&) {
            if (!opt.chat_template_file.empty()) throw;  // the user asked for this file
        }
    }
    std::string gc_path = dir + "/generation_config.json";
    if (file_exists(gc_path)) m->gen = load_generation_config(gc_path);
    m->defaults = default_sampling_params(m->gen, m->config.eos_token_ids);
    if (m->defaults.eos_token_ids.empty() && m->tok && m->tok->eos_id() >= 0) m->defaults.eos_token_ids.push_back(m->tok->eos_id());
    m->max_model_len = opt.max_model_len > 0 ? opt.max_model_len : std::min<int64_t>(m->config.max_position, 8192);
    TETRA_CHECK(m->max_model_len <= m->config.max_position,
                "--max-model-len %lld exceeds the model's max_position_embeddings %lld (%s)", (long long)m->max_model_len,
                (long long)m->config.max_position, m->config.path.c_str());
    progress_line(opt.progress, "tokenizer and templates", t0);
    m->load_s = std::chrono::duration<double>(clock::now().time_since_epoch()).count() - t0;
    return m;
}

std::string apply_chat_template(const loaded_model& m, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& kwargs) {
    TETRA_CHECK(!m.templates.empty(), "model '%s' has no chat template (tokenizer_config.json has no chat_template); "
                "pass one with --chat-template FILE", m.dir.c_str());
    chat_template tmpl(pick_chat_template(m.templates, "", false));
    chat_template_inputs in;
    in.messages = messages;
    in.add_generation_prompt = add_generation_prompt;
    in.bos_token = m.bos_token;
    in.eos_token = m.eos_token;
    if (kwargs.is_object()) in.kwargs = kwargs;
    return tmpl.render(in);
}

}  // namespace tetra

#include "common.h"

#include <sys/stat.h>

#include "core/env.h"
#include "core/thread_pool.h"

namespace tetra {

std::string default_model_dir() { return cache_dir() + "/models/SmolLM2-135M-Instruct-NVFP4"; }

void model_flags::add(CLI::App* cmd) {
    cmd->add_option("model", model, "HF model directory (default: the prepared SmolLM2-135M-Instruct NVFP4)");
    cmd->add_option("--chat-template", chat_template, "Jinja chat template file (overrides the model's)");
    cmd->add_option("--max-model-len", max_model_len, "context length (default: min(model max, 8192))");
    cmd->add_option("--max-num-batched-tokens", max_tokens_per_step, "tokens per forward step (prefill chunk)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--threads", threads, "CPU threads (default: all)")->check(CLI::NonNegativeNumber);
    cmd->add_flag("--skip-selftest", skip_selftest, "do not check the kernels against the CPU oracle at load (warns)");
    cmd->add_option("--device", device, "auto (CUDA device 0 if present), cpu, cuda or cuda:N");
    cmd->add_option("--load-format", load_format, "auto|safetensors: the checkpoint; dummy: seeded random weights from "
                    "config.json (NVFP4 when its quantization_config says so)")
        ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
    cmd->add_option("--dtype", act_dtype, "activation dtype: auto (bfloat16 on CUDA, float32 on CPU), bfloat16, float32 "
                    "(float); NVFP4 weights stay 4-bit, dense weights bf16")
        ->check(CLI::IsMember({"auto", "bfloat16", "float32", "float", "float16", "half"}));  // float16/half: load_model says why not
    cmd->add_option("--tokenizer", tokenizer, "directory with tokenizer.json (default: the model directory)");
    cmd->add_option("--dummy-seed", dummy_seed, "seed of --load-format dummy weights");
}

std::unique_ptr<loaded_model> model_flags::load() const {
    if (threads > 0) set_num_threads(threads);
    std::string dir = model.empty() ? default_model_dir() : model;
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) {
        if (model.empty())
            throw cli_error("the default model is not prepared (" + dir + " is missing)",
                            "run `bash scripts/prepare_model.sh` (or the README's main command) once");
        throw cli_error("model directory '" + dir + "' does not exist", "pass an HF model directory (config.json, *.safetensors, tokenizer.json)");
    }
    if (load_format == "dummy" && tokenizer.empty() && ::stat((dir + "/tokenizer.json").c_str(), &st) != 0)
        throw cli_error("'" + dir + "' has no tokenizer.json (--load-format dummy needs only config.json for the "
                        "weights, but this command reads and writes text)",
                        "pass --tokenizer DIR (a directory with the model family's tokenizer.json), or use `tetra bench`");
    return load_model(dir, options());
}

load_options model_flags::options() const {
    load_options opt;
    opt.max_model_len = max_model_len;
    opt.max_tokens = max_tokens_per_step;
    opt.chat_template_file = chat_template;
    opt.skip_selftest = skip_selftest;
    opt.device = device;
    opt.act_dtype = act_dtype;
    opt.load_format = load_format;
    opt.tokenizer_dir = tokenizer;
    opt.seed = dummy_seed;
    return opt;
}

void sampling_flags::add(CLI::App* cmd) {
    cmd->add_option("--temperature", temperature, "sampling temperature (0 = greedy; default: model's or 1.0)");
    cmd->add_option("--top-p", top_p, "nucleus sampling mass in (0, 1]");
    cmd->add_option("--top-k", top_k, "keep the k most likely tokens (0 or -1 = off)");
    cmd->add_option("--min-p", min_p, "drop tokens below min_p × the top probability");
    cmd->add_option("--repetition-penalty", repetition_penalty, "HF repetition penalty (> 0, 1 = off)");
    cmd->add_option("--presence-penalty", presence_penalty, "OpenAI presence penalty [-2, 2]");
    cmd->add_option("--frequency-penalty", frequency_penalty, "OpenAI frequency penalty [-2, 2]");
    cmd->add_option("-n,--max-tokens", max_tokens, "maximum tokens to generate");
    cmd->add_option("--min-tokens", min_tokens, "generate at least this many tokens");
    cmd->add_option("--seed", seed, "sampling seed (same seed, same tokens)");
    cmd->add_option("--stop", stop, "stop string (repeatable)");
    cmd->add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-sequence tokens");
}

sampling_params sampling_flags::resolve(const loaded_model& m) const {
    sampling_params p = m.defaults;
    if (temperature >= 0) p.temperature = temperature;
    if (top_p >= 0) p.top_p = top_p;
    if (top_k != -2) p.top_k = top_k;
    if (min_p >= 0) p.min_p = min_p;
    if (repetition_penalty >= 0) p.repetition_penalty = repetition_penalty;
    p.presence_penalty = presence_penalty;
    p.frequency_penalty = frequency_penalty;
    p.max_tokens = max_tokens;
    p.min_tokens = min_tokens;
    if (seed >= 0) p.seed = uint64_t(seed);
    p.stop = stop;
    p.ignore_eos = ignore_eos;
    p.validate();
    return p;
}

}  // namespace tetra

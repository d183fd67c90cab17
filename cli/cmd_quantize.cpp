// `tetra quantize SRC DST`: an unquantized HF checkpoint → NVFP4 weight-only (W4A16) in ModelOpt
// or compressed-tensors layout (io/quantize.h, docs/formats.md). Prints one summary line per
// outcome; warnings (layers kept dense) go to stderr through the log.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "core/thread_pool.h"
#include "io/quantize.h"

namespace tetra {

namespace {

struct quantize_args {
    std::string src, dst, format = "modelopt", max_shard = "5GB";
    std::vector<std::string> exclude;
    bool force = false;
};

void run_quantize(const quantize_args& a) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(a.dst, ec) && fs::is_directory(a.dst, ec) && !a.force &&
        fs::directory_iterator(a.dst, ec) != fs::directory_iterator())
        throw cli_error("destination '" + a.dst + "' is not empty",
                        "pass --force to overwrite its checkpoint files, or choose an empty directory");
    quantize_options o;
    o.src = a.src;
    o.dst = a.dst;
    o.format = a.format;
    o.exclude = a.exclude;
    o.force = a.force;
    o.max_shard_bytes = parse_byte_size(a.max_shard);
    auto t0 = std::chrono::steady_clock::now();
    quantize_result r = quantize_checkpoint(o);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("quantized %zu linear modules to NVFP4 (W4A16, %s) in %.2f s on %d threads\n", r.quantized.size(),
                a.format.c_str(), s, num_threads());
    std::printf("excluded (kept dense, listed in the config): %zu\n", r.excluded.size());
    for (const std::string& m : r.excluded) std::printf("  %s\n", m.c_str());
    std::printf("wrote %s:", a.dst.c_str());
    for (const std::string& f : r.files) std::printf(" %s", f.c_str());
    std::printf("\n");
}

}  // namespace

void register_quantize(CLI::App& app) {
    auto a = std::make_shared<quantize_args>();
    auto* cmd = app.add_subcommand("quantize", "quantize an unquantized HF checkpoint to NVFP4 weight-only (W4A16)");
    cmd->add_option("SRC", a->src, "source HF checkpoint directory (BF16/F16/F32 safetensors)")->required();
    cmd->add_option("DST", a->dst, "output directory")->required();
    cmd->add_option("--format", a->format, "checkpoint layout to write")
        ->check(CLI::IsMember({"modelopt", "compressed-tensors"}))
        ->capture_default_str();
    cmd->add_option("--exclude", a->exclude,
                    "keep matching modules dense (ModelOpt wildcards: *, ?, name* = name and name.*; or re:REGEX); "
                    "repeatable, added to the defaults (lm_head, routers, conv1d, output layers, *mtp*)");
    cmd->add_flag("--force", a->force, "write into a non-empty DST (replaces its checkpoint files)");
    cmd->add_option("--max-shard-size", a->max_shard, "largest safetensors shard (5GB = 5e9 bytes, 2GiB = 2^31)")
        ->capture_default_str();
    cmd->callback([a] { run_quantize(*a); });
}

}  // namespace tetra

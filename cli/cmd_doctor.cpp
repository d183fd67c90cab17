// `tetra doctor [MODEL] [--json]`: what this build and machine can run, and whether its kernels are
// right here. Build (CUDA backend or not, compiled targets, fault injection), the device (name,
// compute capability, SMs, memory, measured bandwidth), software vs hardware E2M1, the kernel table
// per op with eligible / why-not, and the self-test of every eligible kernel (on MODEL's shapes and
// real weights, else on a synthetic model). With MODEL also: format, quant algo, exclusions, the
// kernel chosen per layer class and block-scale health (as `tetra inspect`). Exit 1 if an op has no
// working kernel here.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/cuda_info.h"
#include "backend/membw.h"
#include "backend/registry.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/loaded_model.h"
#include "engine/selftest.h"
#include "io/checkpoint.h"

namespace tetra {

namespace {

using json = nlohmann::ordered_json;

struct doctor_args {
    std::string model;
    std::string device = "auto";  // auto (CUDA device 0 when there is one) | cpu | cuda
    std::string act_dtype = "auto";  // --dtype: the activation dtype the self-test checks (as the model commands)
    bool json = false;
};

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
            return line.substr(line.find(':') + 2);
    return "unknown CPU";
}

json device_json(backend& be) {
    const device_info& d = be.device();
    json j;
    j["kind"] = d.kind == device_kind::CPU ? "cpu" : "cuda";
#ifdef TETRA_HAVE_CUDA
    j["cuda"] = cuda_device_count() > 0 ? strfmt("%d CUDA device(s) visible", cuda_device_count()) : "no GPU";
#else
    j["cuda"] = "no CUDA backend in this build";
#endif
    // Versions of the machine's CUDA stack (whichever device is checked): the driver's CUDA version
    // must be ≥ the runtime's, else every CUDA call fails.
    cuda_version_info v = cuda_versions();
    if (!v.built_with_cuda) {
        j["driver_version"] = j["runtime_version"] = "n/a (no CUDA backend in this build)";
    } else {
        j["driver_version"] = v.driver > 0 ? cuda_version_str(v.driver) : "none (no CUDA driver installed)";
        j["runtime_version"] = cuda_version_str(v.runtime);
        j["runtime_built_with"] = cuda_version_str(v.compiled_runtime);
        if (!v.error.empty()) j["cuda_version_error"] = v.error;
        if (v.driver > 0 && v.driver < v.runtime)
            j["cuda_version_error"] = strfmt("the driver supports CUDA %s but the runtime is %s: update the driver",
                                             cuda_version_str(v.driver).c_str(), cuda_version_str(v.runtime).c_str());
    }
    if (d.kind == device_kind::CPU) {
        j["name"] = cpu_model_name();
        j["threads"] = num_threads();
        j["memory_bytes"] = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
        j["compute_capability"] = "n/a";
        j["sms"] = "n/a";
        j["bandwidth_gbs"] = measure_read_bandwidth(be) / 1e9;
        j["bandwidth_method"] = "host memory read, 256 MiB, every pool thread (backend/membw.h)";
        j["compiled_targets"] = "none (no CUDA kernels in this build)";
        j["e2m1"] = "software (CPU kernels decode e2m1 by table; hardware cvt is a CUDA a/f-target feature)";
    } else {
        compiled_target img;
        bool has = select_image(d.compiled, d.cc, &img);
        j["name"] = d.name;
        j["compute_capability"] = strfmt("sm_%d", d.cc);
        j["sms"] = d.sm_count;
        j["memory_bytes"] = d.memory_bytes;
        j["bandwidth_gbs"] = measure_read_bandwidth(be) / 1e9;
        j["bandwidth_method"] = "device memory read kernel, 1 GiB (at most 1/4 of free), CUDA events (backend/membw.h)";
        j["compiled_targets"] = compiled_targets_str(d.compiled);
        j["loaded_image"] = has ? img.str() : "none";
        j["e2m1"] = (d.features & FEAT_CVT_E2M1)
                        ? "hardware (cvt.rn.satfinite.e2m1x2.f32)"
                        : "software encoder (the loaded image has no a/f target of 10.x-12.x)";
    }
    j["features"] = arch_features_str(d.features);
    return j;
}

json kernels_json(const device_info& dev) {
    kernel_registry& reg = kernel_registry::instance();
    json ops = json::array();
    for (const std::string& op : reg.ops()) {
        json ks = json::array();
        for (const kernel_candidate& c : reg.candidates(op, dev, nullptr))
            ks.push_back({{"kernel", c.kernel->name},
                          {"device", c.kernel->req.device == device_kind::CPU ? "cpu" : "cuda"},
                          {"priority", c.kernel->priority}, {"eligible", c.eligible}, {"forced", c.forced},
                          {"why_not", c.why_not}});
        ops.push_back({{"op", op}, {"kernels", ks}});
    }
    return ops;
}

json model_json(const std::string& dir, model_weights& w) {
    json j;
    j["dir"] = dir;
    j["format"] = w.format;
    j["quant_algo"] = w.quant_algo;
    j["exclude"] = w.exclude;
    std::vector<std::string> dense;  // linear-shaped modules stored dense (excluded or never quantized)
    for (const auto& kv : w.tensors) {
        const std::string& n = kv.first;
        bool proj = n.size() > 12 && n.compare(n.size() - 12, 12, "_proj.weight") == 0;
        if ((proj || n == "lm_head.weight") && kv.second.rank() == 2) dense.push_back(n.substr(0, n.size() - 7));
    }
    j["nvfp4_linears"] = w.linears.size();
    j["dense_linears"] = dense;
    scale_health total;
    float g_min = 0, g_max = 0;
    bool first = true;
    for (const auto& kv : w.linears) {
        total.add(scale_health_of(kv.second.scales.ptr<uint8_t>(), kv.second.scales.numel()));
        g_min = first ? kv.second.scale_global : std::min(g_min, kv.second.scale_global);
        g_max = first ? kv.second.scale_global : std::max(g_max, kv.second.scale_global);
        first = false;
    }
    j["scale_health"] = {{"blocks", total.n_blocks}, {"saturated", total.n_saturated}, {"subnormal", total.n_subnormal},
                         {"zero", total.n_zero}, {"invalid", total.n_invalid}, {"scale_global_min", g_min},
                         {"scale_global_max", g_max}};
    return j;
}

json selftest_json(const selftest_report& r) {
    json j;
    j["device"] = r.device;
    j["seconds"] = r.seconds;
    j["results"] = json::array();
    for (const auto& x : r.results)
        j["results"].push_back({{"op", x.op}, {"kernel", x.kernel}, {"case", x.what}, {"nmse", x.nmse},
                                {"tolerance", x.tol}, {"passed", x.passed}, {"error", x.error}});
    j["chosen"] = json::array();
    for (const auto& c : r.chosen)
        j["chosen"].push_back({{"what", c.what}, {"classes", c.classes}, {"op", c.op}, {"kernel", c.kernel},
                               {"reason", c.reason}});
    j["excluded"] = r.excluded;
    return j;
}

// A JSON value as text: strings without quotes, everything else as JSON.
std::string txt(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

void print_text(const json& j) {
    const json& b = j["build"];
    const json& d = j["device"];
    std::printf("tetra doctor\n\nbuild:     tetra %s, CUDA backend: %s, fault injection: %s\n", txt(b["version"]).c_str(),
                b["cuda_backend"].get<bool>() ? "yes" : "no",
                b["fault_injection"].get<bool>() ? "ON (test build)" : "off");
    if (d.contains("runtime_built_with"))
        std::printf("cuda:      %s (driver %s, runtime %s, built with %s)\n", txt(d["cuda"]).c_str(),
                    txt(d["driver_version"]).c_str(), txt(d["runtime_version"]).c_str(),
                    txt(d["runtime_built_with"]).c_str());
    else
        std::printf("cuda:      %s\n", txt(d["cuda"]).c_str());
    if (d.contains("cuda_version_error")) std::printf("           problem: %s\n", txt(d["cuda_version_error"]).c_str());
    std::printf("device:    %s [%s]\ncc / SMs:  %s / %s\n", txt(d["name"]).c_str(), txt(d["kind"]).c_str(),
                txt(d["compute_capability"]).c_str(), txt(d["sms"]).c_str());
    std::printf("memory:    %.1f GiB\n", double(d["memory_bytes"].get<int64_t>()) / double(1 << 30));
    std::printf("bandwidth: %.1f GB/s (%s)\n", d["bandwidth_gbs"].get<double>(), txt(d["bandwidth_method"]).c_str());
    std::printf("targets:   %s\nfeatures:  %s\ne2m1:      %s\n", txt(d["compiled_targets"]).c_str(),
                txt(d["features"]).c_str(), txt(d["e2m1"]).c_str());
    std::printf("\nkernels (priority order; * = eligible here):\n");
    for (const json& op : j["kernels"]) {
        std::printf("  %s\n", txt(op["op"]).c_str());
        for (const json& k : op["kernels"])
            std::printf("    %s %-40s prio %4d  %s%s\n", k["eligible"].get<bool>() ? "*" : " ", txt(k["kernel"]).c_str(),
                        k["priority"].get<int>(), k["forced"].get<bool>() ? "[forced] " : "", txt(k["why_not"]).c_str());
    }
    if (j.contains("model")) {
        const json& m = j["model"];
        const json& h = m["scale_health"];
        std::printf("\nmodel:     %s\nformat:    %s, quant_algo %s, %s NVFP4 linears\nexclude:   %s\ndense:     %s\n",
                    txt(m["dir"]).c_str(), txt(m["format"]).c_str(), txt(m["quant_algo"]).c_str(),
                    txt(m["nvfp4_linears"]).c_str(), txt(m["exclude"]).c_str(), txt(m["dense_linears"]).c_str());
        std::printf("scales:    %s blocks; saturated %s, subnormal %s, zero %s, invalid %s; scale_global [%s, %s]\n",
                    txt(h["blocks"]).c_str(), txt(h["saturated"]).c_str(), txt(h["subnormal"]).c_str(),
                    txt(h["zero"]).c_str(), txt(h["invalid"]).c_str(), txt(h["scale_global_min"]).c_str(),
                    txt(h["scale_global_max"]).c_str());
    }
    const json& s = j["selftest"];
    std::printf("\nself-test on %s (%s):\n", txt(s["device"]).c_str(), txt(j["selftest_model"]).c_str());
    if (s.contains("error")) std::printf("  FAILED: %s\n", txt(s["error"]).c_str());
    for (const json& r : s.value("results", json::array())) {
        std::string err = txt(r["error"]);
        std::printf("  %s %-38s NMSE %-9.3g tol %-7.2g %s%s\n", r["passed"].get<bool>() ? "pass" : "FAIL",
                    txt(r["kernel"]).c_str(), r["nmse"].get<double>(), r["tolerance"].get<double>(),
                    txt(r["case"]).c_str(), err.empty() ? "" : ("  <- " + err).c_str());
    }
    std::printf("\nkernel per layer class / op:\n");
    for (const json& c : s.value("chosen", json::array())) {
        std::string cls = txt(c["classes"]);
        std::printf("  %s → %s (%s%s)\n", txt(c["what"]).c_str(), txt(c["kernel"]).c_str(),
                    cls.empty() ? "" : (cls + "; ").c_str(), txt(c["reason"]).c_str());
    }
}

int run_doctor(const doctor_args& a) {
    json j;
    j["build"] = {{"version", "0.1.0"},
#ifdef TETRA_HAVE_CUDA
                  {"cuda_backend", true},
#else
                  {"cuda_backend", false},
#endif
#ifdef TETRA_FAULT_INJECTION
                  {"fault_injection", true}};
#else
                  {"fault_injection", false}};
#endif
    bool cuda = a.device == "cuda" || (a.device == "auto" && cuda_device_count() > 0);
    std::unique_ptr<backend> be = cuda ? make_cuda_backend(0) : make_cpu_backend();
    j["device"] = device_json(*be);
    model_config c;
    model_weights w;
    if (a.model.empty()) {
        make_selftest_model(c, w);
        j["selftest_model"] = "synthetic 1-layer model (pass MODEL for the model's own shapes and weights)";
    } else {
        c = load_model_config(a.model);
        w = load_weights(a.model);
        j["model"] = model_json(a.model, w);
        j["selftest_model"] = a.model + ": " + c.summary();
    }
    bool ok = true;
    selftest_options o;
    o.all_kernels = true, o.log = false;
    o.act = activation_dtype(a.act_dtype);
    j["activations"] = dtype_name(o.act ? *o.act : default_act_type(be->device()));
    try {  // failing kernels are excluded and listed; the exit code says whether the model can run here
        j["selftest"] = selftest_json(run_selftest(c, w, *be, o));
    } catch (const error& e) {
        j["selftest"] = {{"device", selftest_device_str(be->device())}, {"error", e.what()}};
        ok = false;
    }
    j["kernels"] = kernels_json(be->device());  // after the self-test: exclusions show as why-not
    j["ok"] = ok;
    if (a.json) std::printf("%s\n", j.dump(2).c_str());
    else print_text(j);
    return ok ? 0 : 1;
}

}  // namespace

void register_doctor(CLI::App& app) {
    auto a = std::make_shared<doctor_args>();
    auto* cmd = app.add_subcommand("doctor", "check this machine and build: device, kernels, self-test (and a model)");
    cmd->add_option("model", a->model, "HF model directory: self-test on its shapes and weights, show its checkpoint");
    cmd->add_option("--device", a->device, "backend to check: auto (a GPU when there is one), cpu, cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    cmd->add_option("--dtype", a->act_dtype, "activation dtype to self-test: auto (bfloat16 on CUDA, float32 on CPU), "
                    "bfloat16, float32 (float)");
    cmd->add_flag("--json", a->json, "print JSON instead of text");
    cmd->callback([a] {
        if (run_doctor(*a) != 0)
            throw error("doctor: an op has no working kernel on this device (see the self-test above)");
    });
}

}  // namespace tetra

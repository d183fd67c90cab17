// `tetra doctor [MODEL] [--json]`: what this build and machine can run, and whether its kernels are
// right here. Build (CUDA backend or not, compiled targets, fault injection), the device (name,
// compute capability, SMs, memory, measured bandwidth), software vs hardware E2M1, the kernel table
// per op with eligible / why-not, and the self-test of every eligible kernel (on MODEL's shapes and
// real weights, else on a synthetic model). With MODEL also: format, quant algo, exclusions, the
// kernel chosen per layer class and block-scale health (as `tetra inspect`). Exit 1 if an op has no
// working kernel here.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/registry.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/selftest.h"
#include "io/checkpoint.h"

namespace tetra {

namespace {

using json = nlohmann::ordered_json;

struct doctor_args {
    std::string model;
    std::string device = "auto";  // auto (CUDA device 0 when there is one) | cpu | cuda
    bool json = false;
};

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
            return line.substr(line.find(':') + 2);
    return "unknown CPU";
}

// Host memory read bandwidth: all threads sum disjoint parts of a 256 MiB buffer (well beyond any
// last-level cache); best of 5 passes after one warm-up, in GB/s (1e9 bytes/s).
double cpu_read_bandwidth_gbs() {
    const size_t n = (size_t(256) << 20) / sizeof(uint64_t);
    std::vector<uint64_t> buf(n, 1);
    double best = 0;
    for (int rep = 0; rep < 6; ++rep) {
        std::vector<uint64_t> partial(size_t(num_threads()) * 8 + 8, 0);
        double t0 = now_s();
        parallel_for(int64_t(n), [&](int64_t b, int64_t e) {
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int64_t i = b;
            for (; i + 4 <= e; i += 4)
                s0 += buf[size_t(i)], s1 += buf[size_t(i + 1)], s2 += buf[size_t(i + 2)], s3 += buf[size_t(i + 3)];
            for (; i < e; ++i) s0 += buf[size_t(i)];
            partial[size_t(b * 8 / int64_t(n)) % partial.size()] += s0 + s1 + s2 + s3;  // keep the loads
        });
        double dt = now_s() - t0;
        uint64_t total = 0;
        for (uint64_t p : partial) total += p;
        if (total != n) TETRA_LOG_WARN("doctor: bandwidth buffer sum %llu != %zu", (unsigned long long)total, n);
        if (rep > 0) best = std::max(best, double(n * sizeof(uint64_t)) / dt / 1e9);
    }
    return best;
}

// Device copy bandwidth through the backend (read + write of 256 MiB), best of 5: the generic
// measurement for a device the host cannot read directly.
double device_copy_bandwidth_gbs(backend& be) {
    int64_t n = int64_t(64) << 20;  // f32 elements
    tensor a = be.alloc(dtype::F32, {n}), b = be.alloc(dtype::F32, {n});
    double best = 0;
    for (int rep = 0; rep < 6; ++rep) {
        be.synchronize();
        double t0 = now_s();
        be.copy(a, b);
        be.synchronize();
        double dt = now_s() - t0;
        if (rep > 0) best = std::max(best, 2.0 * double(n) * 4 / dt / 1e9);
    }
    return best;
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
    // Driver/runtime versions need CUDA API calls the backend interface does not expose yet.
    j["driver_version"] = d.kind == device_kind::CPU ? "n/a" : "not reported by the backend";
    j["runtime_version"] = d.kind == device_kind::CPU ? "n/a" : "not reported by the backend";
    if (d.kind == device_kind::CPU) {
        j["name"] = cpu_model_name();
        j["threads"] = num_threads();
        j["memory_bytes"] = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
        j["compute_capability"] = "n/a";
        j["sms"] = "n/a";
        j["bandwidth_gbs"] = cpu_read_bandwidth_gbs();
        j["bandwidth_method"] = "host memory read, 256 MiB, all threads";
        j["compiled_targets"] = "none (no CUDA kernels in this build)";
        j["e2m1"] = "software (CPU kernels decode e2m1 by table; hardware cvt is a CUDA a/f-target feature)";
    } else {
        compiled_target img;
        bool has = select_image(d.compiled, d.cc, &img);
        j["name"] = d.name;
        j["compute_capability"] = strfmt("sm_%d", d.cc);
        j["sms"] = d.sm_count;
        j["memory_bytes"] = d.memory_bytes;
        j["bandwidth_gbs"] = device_copy_bandwidth_gbs(be);
        j["bandwidth_method"] = "device copy (read + write), 256 MiB";
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
    std::printf("cuda:      %s (driver %s, runtime %s)\n", txt(d["cuda"]).c_str(), txt(d["driver_version"]).c_str(),
                txt(d["runtime_version"]).c_str());
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
    cmd->add_flag("--json", a->json, "print JSON instead of text");
    cmd->callback([a] {
        if (run_doctor(*a) != 0)
            throw error("doctor: an op has no working kernel on this device (see the self-test above)");
    });
}

}  // namespace tetra

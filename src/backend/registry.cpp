// Kernel registry: tables per op, eligibility with a reason for every rejection, priority
// selection and TETRA_KERNEL forcing (validated against the tables).
#include "backend/registry.h"

#include <algorithm>
#include <mutex>

#include "core/env.h"
#include "core/error.h"

namespace tetra {

kernel_registry& kernel_registry::instance() {
    static kernel_registry* r = [] {
        auto* reg = new kernel_registry();  // never destroyed: kernels may run during exit
        cpu::register_kernels(*reg);
#ifdef TETRA_FAULT_INJECTION
        cpu::register_faulty_kernels(*reg);
#endif
#ifdef TETRA_HAVE_CUDA
        cuda::register_kernels(*reg);
#endif
        return reg;
    }();
    return *r;
}

void kernel_registry::add(kernel_entry e) {
    TETRA_ASSERT(!e.op.empty() && !e.name.empty() && e.launch);
    TETRA_ASSERT(find(e.name) == nullptr);
    if (!ops_.count(e.op)) op_order_.push_back(e.op);
    auto& v = ops_[e.op];
    v.push_back(std::move(e));
    // Priority order, registration order among equals (stable).
    std::stable_sort(v.begin(), v.end(),
                     [](const kernel_entry& a, const kernel_entry& b) { return a.priority > b.priority; });
}

std::vector<std::string> kernel_registry::ops() const { return op_order_; }

std::vector<const kernel_entry*> kernel_registry::kernels(const std::string& op) const {
    std::vector<const kernel_entry*> out;
    auto it = ops_.find(op);
    if (it != ops_.end())
        for (const auto& k : it->second) out.push_back(&k);
    return out;
}

const kernel_entry* kernel_registry::find(const std::string& name) const {
    for (const auto& kv : ops_)
        for (const auto& k : kv.second)
            if (k.name == name) return &k;
    return nullptr;
}

static const char* device_name(device_kind d) { return d == device_kind::CPU ? "cpu" : "cuda"; }

static std::string cc_str(int cc) { return "sm_" + std::to_string(cc); }

std::string kernel_rejection(const kernel_entry& k, const device_info& dev, const op_args* args) {
    const kernel_req& r = k.req;
    if (r.device != dev.kind)
        return strfmt("runs on %s, device is %s", device_name(r.device), device_name(dev.kind));
    if (dev.kind == device_kind::CUDA) {
        if (r.min_cc && dev.cc < r.min_cc)
            return strfmt("needs compute capability >= %s, device is %s", cc_str(r.min_cc).c_str(),
                          cc_str(dev.cc).c_str());
        if (r.max_cc && dev.cc > r.max_cc)
            return strfmt("needs compute capability <= %s, device is %s", cc_str(r.max_cc).c_str(),
                          cc_str(dev.cc).c_str());
    }
    uint32_t missing = r.features & ~dev.features;
    if (missing) {
        if (dev.kind == device_kind::CUDA) {
            compiled_target img;
            bool has = select_image(dev.compiled, dev.cc, &img);
            return strfmt("needs %s: device %s loads %s from the compiled targets [%s], which lacks it",
                          arch_features_str(missing).c_str(), cc_str(dev.cc).c_str(),
                          has ? ("image " + img.str()).c_str() : "no image",
                          compiled_targets_str(dev.compiled).c_str());
        }
        return strfmt("needs %s, which this CPU lacks", arch_features_str(missing).c_str());
    }
    if (r.smem && r.smem > dev.smem_per_block)
        return strfmt("needs %lld bytes of shared memory per block, device allows %lld",
                      (long long)r.smem, (long long)dev.smem_per_block);
    if (!args) return "";
    if (!r.act_dtypes.empty() &&
        std::find(r.act_dtypes.begin(), r.act_dtypes.end(), args->act) == r.act_dtypes.end()) {
        std::string ok;
        for (dtype t : r.act_dtypes) ok += (ok.empty() ? "" : "|") + std::string(dtype_name(t));
        return strfmt("activation dtype %s not handled (expected %s)", dtype_name(args->act), ok.c_str());
    }
    if (r.align && args->align % r.align != 0)
        return strfmt("needs %lld-byte aligned tensors, call is %lld-byte aligned", (long long)r.align,
                      (long long)args->align);
    return k.accepts ? k.accepts(*args) : "";
}

// TETRA_KERNEL is re-read on every selection (tests set it with setenv); parsing is a few string
// operations, negligible next to a kernel launch.
std::map<std::string, std::vector<std::string>> kernel_registry::forced_kernels() const {
    std::map<std::string, std::vector<std::string>> out;
    std::string spec = env_str("TETRA_KERNEL");
    std::string item;
    auto flush = [&] {
        if (item.empty()) return;
        size_t colon = item.find(':');
        TETRA_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < item.size(),
                    "TETRA_KERNEL: item '%s' is not op:name (TETRA_KERNEL='%s')", item.c_str(), spec.c_str());
        std::string op = item.substr(0, colon), name = item.substr(colon + 1);
        if (!ops_.count(op)) {
            std::string valid;
            for (const auto& o : op_order_) valid += (valid.empty() ? "" : ", ") + o;
            TETRA_FAIL("TETRA_KERNEL: unknown op '%s' (valid ops: %s)", op.c_str(), valid.c_str());
        }
        bool known = false;
        std::string valid;
        for (const auto& k : ops_.at(op)) {
            known |= k.name == name;
            valid += (valid.empty() ? "" : ", ") + k.name;
        }
        TETRA_CHECK(known, "TETRA_KERNEL: unknown kernel '%s' for op '%s' (valid kernels: %s)", name.c_str(),
                    op.c_str(), valid.c_str());
        out[op].push_back(name);
        item.clear();
    };
    for (char c : spec) {
        if (c == ',') flush();
        else if (c != ' ') item += c;
    }
    flush();
    return out;
}

std::vector<kernel_candidate> kernel_registry::candidates(const std::string& op, const device_info& dev,
                                                          const op_args* args) const {
    auto forced = forced_kernels();
    std::vector<kernel_candidate> out;
    for (const kernel_entry* k : kernels(op)) {
        kernel_candidate c;
        c.kernel = k;
        c.why_not = kernel_rejection(*k, dev, args);
        if (c.why_not.empty()) {
            std::string ex = exclusion(k->name);
            if (!ex.empty()) c.why_not = "excluded: " + ex;
        }
        c.eligible = c.why_not.empty();
        auto it = forced.find(op);
        c.forced = it != forced.end() && std::count(it->second.begin(), it->second.end(), k->name);
        out.push_back(std::move(c));
    }
    return out;
}

const kernel_entry& kernel_registry::select(const std::string& op, const device_info& dev,
                                            const op_args& args) const {
    auto cands = candidates(op, dev, &args);
    TETRA_CHECK(!cands.empty(), "no kernels registered for op '%s'", op.c_str());
    for (const auto& c : cands) {  // a forced kernel of this device kind overrides priority
        if (!c.forced || c.kernel->req.device != dev.kind) continue;
        TETRA_CHECK(c.eligible, "TETRA_KERNEL forces %s for op '%s', but it cannot run: %s",
                    c.kernel->name.c_str(), op.c_str(), c.why_not.c_str());
        return *c.kernel;
    }
    for (const auto& c : cands)
        if (c.eligible) return *c.kernel;
    std::string why;
    for (const auto& c : cands) why += strfmt("\n  %s: %s", c.kernel->name.c_str(), c.why_not.c_str());
    TETRA_FAIL("no eligible kernel for op '%s' on %s:%s", op.c_str(), dev.name.c_str(), why.c_str());
}

// Exclusions are added at load while other threads may be selecting (a server loading a model).
static std::mutex g_excluded_mu;

void kernel_registry::exclude(const std::string& op, const std::string& name, const std::string& reason) {
    const kernel_entry* k = find(name);
    TETRA_CHECK(k && k->op == op, "kernel_registry::exclude: '%s' is not a kernel of op '%s'", name.c_str(), op.c_str());
    std::lock_guard<std::mutex> lock(g_excluded_mu);
    excluded_[name] = reason.empty() ? "excluded" : reason;
}

std::string kernel_registry::exclusion(const std::string& name) const {
    std::lock_guard<std::mutex> lock(g_excluded_mu);
    auto it = excluded_.find(name);
    return it == excluded_.end() ? "" : it->second;
}

void kernel_registry::clear_exclusions() {
    std::lock_guard<std::mutex> lock(g_excluded_mu);
    excluded_.clear();
}

}  // namespace tetra

// The kernel registry (DESIGN.md §4): for every op a table of kernel entries with requirements as
// data, a priority, accepts(args) → "" or a rejection reason, and a launch function. Selection:
// eligible = device kind matches ∧ cc in range ∧ required arch features present for the loaded
// image (arch.h) ∧ act dtype/alignment/smem fit ∧ accepts(); highest priority wins. TETRA_KERNEL=
// op:name[,op:name] forces a kernel (validated: unknown op/name and ineligible kernels are errors).
// Each op file registers its own table (cpu/<op>_cpu.cpp: register_<op>()); no central switch.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/arch.h"
#include "core/dtype.h"

namespace tetra {

class backend;

// Base of every op's argument struct (backend/ops.h). The op wrapper fills these two fields so the
// registry can check dtype and alignment requirements without knowing the op.
struct op_args {
    dtype act = dtype::F32;  // activation dtype of the call
    int64_t align = 0;       // largest power of two dividing every tensor pointer of the call
};

struct kernel_req {
    device_kind device = device_kind::CPU;
    int min_cc = 0, max_cc = 0;     // CUDA: inclusive cc range (major·10+minor); 0 = unbounded
    uint32_t features = 0;          // arch_feature bits that must all be present
    std::vector<dtype> act_dtypes;  // activation dtypes handled; empty = any
    int64_t align = 0;              // required pointer alignment in bytes; 0 = none
    int64_t smem = 0;               // shared memory per block in bytes (≤ device.smem_per_block)
};

struct kernel_entry {
    std::string op;    // "matmul_nvfp4_w4a16"
    std::string name;  // == file stem: "matmul_nvfp4_w4a16_cpu", "matmul_nvfp4_w4a16_sm80"
    kernel_req req;
    int priority = 0;  // higher wins among eligible kernels
    std::function<std::string(const op_args&)> accepts;     // "" = accepted, else why not
    std::function<void(backend&, const op_args&)> launch;
};

// Typed construction: A is the op's args struct (derived from op_args).
template <class A>
kernel_entry make_kernel(std::string op, std::string name, kernel_req req, int priority,
                         std::string (*accepts)(const A&), void (*launch)(backend&, const A&)) {
    kernel_entry e;
    e.op = std::move(op);
    e.name = std::move(name);
    e.req = std::move(req);
    e.priority = priority;
    e.accepts = [accepts](const op_args& a) { return accepts ? accepts(static_cast<const A&>(a)) : ""; };
    e.launch = [launch](backend& b, const op_args& a) { launch(b, static_cast<const A&>(a)); };
    return e;
}

// Why `k` cannot run on `dev` ("" if it can). args == nullptr checks only the static requirements.
std::string kernel_rejection(const kernel_entry& k, const device_info& dev, const op_args* args);

struct kernel_candidate {
    const kernel_entry* kernel = nullptr;
    bool eligible = false;
    bool forced = false;  // named by TETRA_KERNEL
    std::string why_not;  // "" when eligible
};

class kernel_registry {
  public:
    // The process-wide registry holding every compiled backend's tables (CPU always).
    static kernel_registry& instance();

    // Adds a kernel; a duplicate name or an entry without launch is a programming error (assert).
    void add(kernel_entry e);
    std::vector<std::string> ops() const;
    // All kernels of `op`, highest priority first (ties: registration order). Empty if unknown op.
    std::vector<const kernel_entry*> kernels(const std::string& op) const;
    const kernel_entry* find(const std::string& name) const;

    // The full table for `op` on `dev` (all devices' kernels, each with eligible/why-not), in
    // priority order: what `tetra doctor` prints. args may be null (static checks only).
    std::vector<kernel_candidate> candidates(const std::string& op, const device_info& dev,
                                             const op_args* args) const;
    // The kernel to launch: the forced one if TETRA_KERNEL names a kernel of `op` for this
    // device kind (error with the rejection reason if it is not eligible), else the eligible
    // kernel of highest priority (error listing every candidate's reason if none).
    const kernel_entry& select(const std::string& op, const device_info& dev, const op_args& args) const;

    // Parses TETRA_KERNEL now and validates every op:name against this registry; returns the
    // forced kernel names by op. Errors name the bad item and list the valid names.
    std::map<std::string, std::vector<std::string>> forced_kernels() const;

    // Exclusion list (filled by the start-up self-test, engine/selftest.h): an excluded kernel is
    // never selected; candidates() reports it ineligible with "excluded: <reason>", so forcing it
    // is an error naming the reason. A name that is not a kernel of `op` is an error.
    void exclude(const std::string& op, const std::string& name, const std::string& reason);
    std::string exclusion(const std::string& name) const;  // the reason, "" if not excluded
    void clear_exclusions();

  private:
    std::map<std::string, std::vector<kernel_entry>> ops_;
    std::vector<std::string> op_order_;
    std::map<std::string, std::string> excluded_;  // kernel name → reason (guarded by a mutex in registry.cpp)
};

namespace cpu {
// Registers every CPU op table (one line per op file, defined in cpu/cpu_backend.cpp). A static
// library drops object files nothing references, so self-registering constructors would vanish.
void register_kernels(kernel_registry& r);
#ifdef TETRA_FAULT_INJECTION
// Test-only kernels that are wrong on purpose (cpu/faulty_*.cpp, compiled only with the CMake option
// TETRA_FAULT_INJECTION): priority -100 in the process registry, so they run only when forced;
// tests may register them higher in a registry of their own.
void register_faulty_kernels(kernel_registry& r, int priority = -100);
#endif
}  // namespace cpu

namespace cuda {
// Registers every CUDA op table (cuda/cuda_backend.cpp); called only in builds with TETRA_HAVE_CUDA.
void register_kernels(kernel_registry& r);
}  // namespace cuda

}  // namespace tetra

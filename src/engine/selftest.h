// Start-up self-test (DESIGN.md §5.5, docs/no-silent-garbage.md): every (op, kernel) the model will
// use is run on the actual device on a small case built from the model's real shapes (a few rows of
// layer 0's real weights for the matmuls) and compared with the CPU oracle (the plain <op>_cpu
// kernel) under a per-op NMSE tolerance. A failing kernel is excluded in the registry with a loud
// error naming kernel, device, compute capability, compiled targets and the error; the next eligible
// kernel is tested in turn. If none is left for an op the model needs, the load fails saying why.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "io/weights.h"
#include "model/model_config.h"

namespace tetra {

struct selftest_options {
    bool skip = false;          // --skip-selftest: nothing is tested (a warning says so)
    int64_t max_tokens = 256;   // rows per forward step: matmul kernels are selected for M in [1, max_tokens]
    matmul_mode mode = matmul_mode::AUTO;
    std::optional<dtype> act;   // the model's activation dtype (unset: default_act_type, model/model.h)
    bool all_kernels = false;   // tetra doctor: also test every other eligible kernel of each op
    bool log = true;            // one line per layer class / op at info level (exclusions always log)
};

// One kernel on one case.
struct selftest_result {
    std::string op, kernel;
    std::string what;        // the case, printable: "q_proj layer 0 rows [0, 64): M=3 N=64 K=576 f32"
    double nmse = 0;         // Σ(out − ref)² / Σ ref²; inf for non-finite output
    double tol = 0;          // the op's tolerance (0 = bit-exact)
    bool passed = false;
    std::string error;       // why it failed ("" when passed)
    double ms = 0;           // wall time of the kernel run (device) and compare
};

// The kernel chosen for one layer class / op at this model's shapes (the load log line).
struct selftest_choice {
    std::string what;    // "linear nvfp4 576x1536" (n_out x n_in), "rms_norm n=576"
    std::string classes; // "mlp.down_proj" (linears), "" otherwise
    std::string op;
    std::string kernel;  // several when M selects differently: "k_a (M 1..3), k_b (M 4..256)"
    std::string reason;  // "highest-priority eligible; self-test NMSE 2.1e-15 <= 1e-08"
    std::string line() const;  // "linear nvfp4 576x1536 → matmul_nvfp4_w4a16_avx2 (mlp.down_proj; ...)"
};

struct selftest_report {
    bool skipped = false;
    std::string device;                     // "cpu (avx2,fma,f16c)", "NVIDIA H100 (sm_90, targets ...)"
    std::vector<selftest_result> results;   // every kernel run, in order
    std::vector<selftest_choice> chosen;
    std::vector<std::string> excluded;      // the exclusion messages (also logged as errors)
    double seconds = 0;
};

// Runs the self-test for a model on `be`, excluding failing kernels in `reg` (the process registry
// unless a test passes its own). Throws tetra::error when an op the model needs has no working
// kernel left (or TETRA_KERNEL forces one that cannot run or failed).
selftest_report run_selftest(const model_config& c, model_weights& w, backend& be, const selftest_options& o,
                             kernel_registry& reg = kernel_registry::instance());

// A synthetic one-layer Llama-shaped model (NVFP4 linears with random codes and scales, bf16
// embedding, dense lm_head): what `tetra doctor` self-tests when no model is given. Shapes from `c`
// when c.n_embd > 0 (e.g. an 8B config for timing), else small defaults. Deterministic (seeded).
void make_selftest_model(model_config& c, model_weights& w);

// "cpu (features avx2,fma,f16c)" / "NVIDIA ... (compute capability sm_90, compiled targets [...])".
std::string selftest_device_str(const device_info& d);

}  // namespace tetra

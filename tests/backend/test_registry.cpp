// backend/registry: selection by priority among eligible kernels, a reason for every rejection
// (device kind, cc range, arch features of the loaded image, dtype, alignment, smem, accepts),
// TETRA_KERNEL forcing and its errors, and the invariants of the real CPU tables (every op has a
// plain CPU kernel; kernel names are the file stems under src/backend/cpu/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "backend/ops.h"
#include "backend/registry.h"
#include "core/error.h"

using namespace tetra;

namespace {

struct fake_args : op_args { int64_t n = 0; };

int g_launched = 0;
void launch_a(backend&, const fake_args&) { g_launched = 1; }
void launch_b(backend&, const fake_args&) { g_launched = 2; }
std::string even_only(const fake_args& a) { return a.n % 2 ? "n must be even" : ""; }

kernel_req cuda_req(int min_cc, int max_cc, uint32_t feats) {
    kernel_req r;
    r.device = device_kind::CUDA;
    r.min_cc = min_cc, r.max_cc = max_cc, r.features = feats;
    return r;
}

device_info cuda_dev(int cc, const char* compiled) {
    device_info d;
    d.kind = device_kind::CUDA;
    d.name = "fake gpu";
    d.cc = cc;
    d.compiled = parse_compiled_targets(compiled);
    d.features = cuda_features(cc, d.compiled);
    d.smem_per_block = 100 * 1024;
    return d;
}

// Scoped TETRA_KERNEL.
struct env_kernel {
    explicit env_kernel(const char* v) { setenv("TETRA_KERNEL", v, 1); }
    ~env_kernel() { unsetenv("TETRA_KERNEL"); }
};

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

// A registry with one op "mm": a generic sm80 kernel, an sm120a FP4 kernel, a cpu kernel that
// only takes even n, and a high-priority kernel that needs 16-byte alignment and 200 KB smem.
kernel_registry make_test_registry() {
    kernel_registry r;
    r.add(make_kernel<fake_args>("mm", "mm_sm80", cuda_req(80, 0, FEAT_MMA_BF16), 10, nullptr, launch_a));
    r.add(make_kernel<fake_args>("mm", "mm_sm120a", cuda_req(120, 121, FEAT_MMA_FP4_BLOCK), 20, nullptr, launch_b));
    kernel_req c;
    c.act_dtypes = {dtype::F32};
    r.add(make_kernel<fake_args>("mm", "mm_cpu", c, 0, even_only, launch_a));
    kernel_req big = cuda_req(90, 0, 0);
    big.align = 16, big.smem = 200 * 1024;
    r.add(make_kernel<fake_args>("mm", "mm_big", big, 30, nullptr, launch_b));
    r.add(make_kernel<fake_args>("other", "other_cpu", kernel_req{}, 0, nullptr, launch_a));
    return r;
}

}  // namespace

TEST(registry, priority_order_and_lookup) {
    kernel_registry r = make_test_registry();
    auto ks = r.kernels("mm");
    ASSERT_EQ(ks.size(), 4u);
    EXPECT_EQ(ks[0]->name, "mm_big");
    EXPECT_EQ(ks[1]->name, "mm_sm120a");
    EXPECT_EQ(ks[2]->name, "mm_sm80");
    EXPECT_EQ(ks[3]->name, "mm_cpu");
    EXPECT_TRUE(r.kernels("nope").empty());
    EXPECT_EQ(r.find("other_cpu")->op, "other");
    EXPECT_EQ(r.find("missing"), nullptr);
    EXPECT_EQ(r.ops(), (std::vector<std::string>{"mm", "other"}));
}

TEST(registry, selection_by_device) {
    kernel_registry r = make_test_registry();
    fake_args a;
    a.act = dtype::F32, a.align = 256, a.n = 4;
    // sm_120 with sm_120a compiled: FP4 kernel eligible; mm_big needs too much smem.
    EXPECT_EQ(r.select("mm", cuda_dev(120, "sm_120a"), a).name, "mm_sm120a");
    // sm_121 with only sm_120a + compute_120: FP4 kernel rejected (the loaded image lacks it).
    EXPECT_EQ(r.select("mm", cuda_dev(121, "sm_120a,compute_120"), a).name, "mm_sm80");
    EXPECT_EQ(r.select("mm", cuda_dev(121, "sm_121a"), a).name, "mm_sm120a");
    EXPECT_EQ(r.select("mm", cuda_dev(90, "sm_90a"), a).name, "mm_sm80");
    EXPECT_EQ(r.select("mm", cpu_device_info(), a).name, "mm_cpu");
    a.n = 3;
    std::string e = error_of([&] { r.select("mm", cpu_device_info(), a); });
    EXPECT_NE(e.find("no eligible kernel for op 'mm'"), std::string::npos) << e;
    EXPECT_NE(e.find("mm_cpu: n must be even"), std::string::npos) << e;
    EXPECT_NE(e.find("mm_sm80: runs on cuda, device is cpu"), std::string::npos) << e;
}

TEST(registry, every_rejection_has_a_reason) {
    kernel_registry r = make_test_registry();
    fake_args a;
    a.act = dtype::BF16, a.align = 8, a.n = 4;
    device_info d = cuda_dev(121, "sm_120a,compute_120");
    d.smem_per_block = 300 * 1024;
    auto cands = r.candidates("mm", d, &a);
    ASSERT_EQ(cands.size(), 4u);
    std::map<std::string, std::string> why;
    for (const auto& c : cands) {
        EXPECT_EQ(c.eligible, c.why_not.empty()) << c.kernel->name;
        why[c.kernel->name] = c.why_not;
    }
    EXPECT_EQ(why["mm_big"], "needs 16-byte aligned tensors, call is 8-byte aligned");
    EXPECT_EQ(why["mm_sm120a"],
              "needs mma.fp4.block_scale: device sm_121 loads image compute_120 from the compiled targets "
              "[sm_120a,compute_120], which lacks it");
    EXPECT_EQ(why["mm_sm80"], "");
    EXPECT_EQ(why["mm_cpu"], "runs on cpu, device is cuda");
    EXPECT_EQ(kernel_rejection(*r.find("mm_sm80"), cuda_dev(75, "sm_75"), nullptr),
              "needs compute capability >= sm_80, device is sm_75");
    EXPECT_EQ(kernel_rejection(*r.find("mm_sm120a"), cuda_dev(100, "sm_100a"), nullptr),
              "needs compute capability >= sm_120, device is sm_100");
    EXPECT_EQ(kernel_rejection(*r.find("mm_big"), cuda_dev(90, "sm_90a"), nullptr),
              "needs 204800 bytes of shared memory per block, device allows 102400");
    a.act = dtype::BF16;
    EXPECT_EQ(kernel_rejection(*r.find("mm_cpu"), cpu_device_info(), &a),
              "activation dtype bf16 not handled (expected f32)");
    device_info no_avx;  // a CPU without AVX2
    kernel_req q;
    q.features = FEAT_CPU_AVX2_FMA_F16C;
    kernel_entry fast = make_kernel<fake_args>("mm", "mm_avx2", q, 5, nullptr, launch_a);
    EXPECT_EQ(kernel_rejection(fast, no_avx, nullptr), "needs avx2+fma+f16c, which this CPU lacks");
}

TEST(registry, forcing) {
    kernel_registry r = make_test_registry();
    fake_args a;
    a.act = dtype::F32, a.align = 256, a.n = 4;
    device_info d = cuda_dev(120, "sm_120a");
    {
        env_kernel env("mm:mm_sm80");
        EXPECT_EQ(r.select("mm", d, a).name, "mm_sm80");
        // A forced cuda kernel does not affect selection on the cpu.
        EXPECT_EQ(r.select("mm", cpu_device_info(), a).name, "mm_cpu");
        auto cands = r.candidates("mm", d, &a);
        int n_forced = 0;
        for (const auto& c : cands) n_forced += c.forced;
        EXPECT_EQ(n_forced, 1);
    }
    {
        env_kernel env("other:other_cpu, mm:mm_cpu");
        EXPECT_EQ(r.forced_kernels().size(), 2u);
        EXPECT_EQ(r.select("mm", cpu_device_info(), a).name, "mm_cpu");
    }
    {
        env_kernel env("mm:mm_sm120a");  // ineligible on sm_121 with the trap build
        std::string e = error_of([&] { r.select("mm", cuda_dev(121, "sm_120a,compute_120"), a); });
        EXPECT_NE(e.find("TETRA_KERNEL forces mm_sm120a for op 'mm', but it cannot run: needs mma.fp4.block_scale"),
                  std::string::npos)
            << e;
    }
    {
        env_kernel env("mx:mm_cpu");
        std::string e = error_of([&] { r.select("mm", d, a); });
        EXPECT_EQ(e, "TETRA_KERNEL: unknown op 'mx' (valid ops: mm, other)");
    }
    {
        env_kernel env("mm:mm_sm90");
        std::string e = error_of([&] { r.select("mm", d, a); });
        EXPECT_EQ(e, "TETRA_KERNEL: unknown kernel 'mm_sm90' for op 'mm' (valid kernels: mm_big, mm_sm120a, mm_sm80, "
                     "mm_cpu)");
    }
    {
        env_kernel env("other:mm_cpu");  // a real kernel, but of another op
        EXPECT_NE(error_of([&] { r.select("mm", d, a); }).find("unknown kernel 'mm_cpu' for op 'other'"),
                  std::string::npos);
    }
    {
        env_kernel env("mm_cpu");
        EXPECT_NE(error_of([&] { r.select("mm", d, a); }).find("item 'mm_cpu' is not op:name"), std::string::npos);
    }
    EXPECT_EQ(r.select("mm", d, a).name, "mm_sm120a");  // env cleared: priority again
}

TEST(registry, launch_calls_the_selected_kernel) {
    kernel_registry r = make_test_registry();
    fake_args a;
    a.act = dtype::F32, a.align = 256, a.n = 2;
    g_launched = 0;
    auto be = make_cpu_backend();
    r.select("mm", cuda_dev(120, "sm_120a"), a).launch(*be, a);
    EXPECT_EQ(g_launched, 2);
    r.select("mm", cuda_dev(90, "sm_90"), a).launch(*be, a);
    EXPECT_EQ(g_launched, 1);
}

// The real tables: every op of the interface (and any op added since) has a plain CPU kernel
// <op>_cpu that is always eligible; names are unique; each CPU kernel lives in
// src/backend/cpu/<name>.cpp.
TEST(registry, cpu_tables) {
    kernel_registry& r = kernel_registry::instance();
    const char* interface_ops[] = {"get_rows", "rms_norm", "add_rms_norm", "rope", "kv_store", "attention",
                                   "matmul_dense", "matmul_nvfp4_w4a16", "matmul_nvfp4_w4a4", "silu_mul", "matmul_silu", "add",
                                   "argmax", "cast"};
    std::vector<std::string> ops = r.ops();
    for (const char* op : interface_ops)
        EXPECT_TRUE(std::count(ops.begin(), ops.end(), op)) << "op " << op << " has no table";
    std::set<std::string> names;
    for (const std::string& op : ops) {
        auto ks = r.kernels(op);
        ASSERT_FALSE(ks.empty()) << op;
        bool plain = false;
        for (const kernel_entry* k : ks) {
            EXPECT_TRUE(names.insert(k->name).second) << k->name;
            EXPECT_EQ(k->op, op);
            plain |= k->name == op + "_cpu";
            if (k->req.device != device_kind::CPU) continue;
            std::ifstream f(std::string(TETRA_SOURCE_DIR) + "/src/backend/cpu/" + k->name + ".cpp");
            EXPECT_TRUE(f.good()) << "kernel " << k->name << " has no file src/backend/cpu/" << k->name << ".cpp";
            EXPECT_EQ(kernel_rejection(*k, cpu_device_info(), nullptr).empty(),
                      (k->req.features & ~cpu_features()) == 0)
                << k->name;
        }
        EXPECT_TRUE(plain) << op << " has no plain kernel " << op << "_cpu";
        if (plain) EXPECT_EQ(kernel_rejection(*r.find(op + "_cpu"), cpu_device_info(), nullptr), "") << op;
    }
}

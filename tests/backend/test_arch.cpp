// backend/arch: compiled-target parsing, which image runs on which device, and the feature table
// as a table of (device cc, compiled list) → expected features, including the traps: an sm_121
// device with only sm_120a compiled gets no FP4 MMA (the a-cubin does not run there and
// compute_120 PTX has no a/f features); a family target sm_120f does run on sm_121.
#include <gtest/gtest.h>

#include "backend/arch.h"
#include "core/error.h"

using namespace tetra;

TEST(arch, parse_targets) {
    struct { const char* s; int cc; target_suffix sfx; bool ptx; const char* canon; } cases[] = {
        {"sm_80", 80, target_suffix::NONE, false, "sm_80"},
        {"sm_90a", 90, target_suffix::A, false, "sm_90a"},
        {"sm_120f", 120, target_suffix::F, false, "sm_120f"},
        {"compute_90", 90, target_suffix::NONE, true, "compute_90"},
        {"compute_120a", 120, target_suffix::A, true, "compute_120a"},
        {"121a", 121, target_suffix::A, false, "sm_121a"},
        {"120f-real", 120, target_suffix::F, false, "sm_120f"},
        {"90-virtual", 90, target_suffix::NONE, true, "compute_90"},
        {"75", 75, target_suffix::NONE, false, "sm_75"},
    };
    for (const auto& c : cases) {
        compiled_target t = parse_compiled_target(c.s);
        EXPECT_EQ(t.cc, c.cc) << c.s;
        EXPECT_EQ(t.suffix, c.sfx) << c.s;
        EXPECT_EQ(t.ptx, c.ptx) << c.s;
        EXPECT_EQ(t.str(), c.canon) << c.s;
    }
    auto list = parse_compiled_targets("sm_80, sm_90a;compute_90  sm_120f");
    ASSERT_EQ(list.size(), 4u);
    EXPECT_EQ(compiled_targets_str(list), "sm_80,sm_90a,compute_90,sm_120f");
    EXPECT_TRUE(parse_compiled_targets("").empty());
}

TEST(arch, parse_errors_name_the_string) {
    for (const char* bad : {"sm_", "sm_9", "sm_90b", "compute_x", "90-fake", "sm_1200", "gfx90a", "sm_20"}) {
        try {
            parse_compiled_target(bad);
            ADD_FAILURE() << "accepted " << bad;
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
        }
    }
}

TEST(arch, runs_on) {
    auto t = parse_compiled_target;
    struct { const char* target; int dev; bool runs; } cases[] = {
        {"sm_80", 80, true},   {"sm_80", 86, true},    {"sm_80", 89, true},    {"sm_80", 90, false},
        {"sm_86", 80, false},  {"sm_90", 90, true},    {"sm_90a", 90, true},   {"sm_90a", 100, false},
        {"sm_120a", 120, true}, {"sm_120a", 121, false}, {"sm_121a", 120, false}, {"sm_121a", 121, true},
        {"sm_120f", 121, true}, {"sm_120f", 120, true}, {"sm_121f", 120, false}, {"sm_120f", 100, false},
        {"sm_100f", 103, true}, {"sm_100a", 103, false}, {"sm_120", 121, true},  {"sm_100", 120, false},
        {"compute_80", 120, true}, {"compute_90", 80, false}, {"compute_120a", 121, false},
        {"compute_120a", 120, true}, {"compute_120f", 121, true}, {"compute_120f", 130, false},
    };
    for (const auto& c : cases) EXPECT_EQ(target_runs_on(t(c.target), c.dev), c.runs) << c.target << " on " << c.dev;
}

TEST(arch, image_selection) {
    struct { int dev; const char* list; const char* image; } cases[] = {
        {90, "sm_80,sm_90,sm_90a,compute_90", "sm_90a"},    // exact a-cubin preferred
        {90, "sm_80,compute_80", "compute_80"},              // sm_80 SASS cannot run on 9.0
        {86, "sm_80,compute_86", "sm_80"},                   // SASS beats PTX
        {121, "sm_120a,compute_120", "compute_120"},         // the trap: JIT of plain PTX
        {121, "sm_120a,sm_121a", "sm_121a"},
        {121, "sm_120f", "sm_120f"},
        {120, "sm_120,sm_120f", "sm_120f"},
        {100, "sm_90a,compute_90", "compute_90"},
    };
    for (const auto& c : cases) {
        compiled_target img;
        ASSERT_TRUE(select_image(parse_compiled_targets(c.list), c.dev, &img)) << c.list;
        EXPECT_EQ(img.str(), c.image) << c.dev << " from " << c.list;
    }
    compiled_target img;
    EXPECT_FALSE(select_image(parse_compiled_targets("sm_120a,sm_90"), 121, &img));
    EXPECT_FALSE(select_image({}, 90, &img));
}

// The feature table, written out by hand from DESIGN.md §4 / reference/kernels.md §1.
TEST(arch, feature_table) {
    const uint32_t base80 = FEAT_CP_ASYNC | FEAT_MMA_BF16;
    const uint32_t base89 = base80 | FEAT_MMA_FP8;
    const uint32_t base90 = base89 | FEAT_TMA | FEAT_PDL;
    struct { int dev; const char* list; uint32_t want; } cases[] = {
        {75, "sm_75", 0},
        {80, "sm_80", base80},
        {86, "sm_80", base80},
        {89, "sm_89", base89},
        {89, "sm_80", base80},                                   // sm_80 cubin on Ada: no fp8 mma
        {90, "sm_90", base90},                                   // no wgmma without the a target
        {90, "sm_90a", base90 | FEAT_WGMMA},
        {90, "sm_80,compute_90", base90},
        {100, "sm_100a", base90 | FEAT_TCGEN05 | FEAT_CVT_E2M1},
        {100, "sm_100", base90},                                 // plain: no tcgen05, no cvt
        {100, "sm_100f", base90 | FEAT_CVT_E2M1},
        {103, "sm_100a", 0},                                     // a-cubin is 10.0 only
        {103, "sm_103a", base90 | FEAT_TCGEN05 | FEAT_CVT_E2M1},
        {110, "sm_110a", base90 | FEAT_TCGEN05 | FEAT_CVT_E2M1},
        {100, "sm_90a,compute_90", base90},                      // Hopper build on Blackwell: PTX JIT
        {120, "sm_120a", base90 | FEAT_MMA_FP4_BLOCK | FEAT_CVT_E2M1},
        {120, "sm_120", base90},
        {120, "sm_120f", base90 | FEAT_MMA_FP4_BLOCK | FEAT_CVT_E2M1},
        {121, "sm_120a", 0},                                     // trap: nothing runs
        {121, "sm_120a,compute_120", base90},                    // trap: runs, but no FP4 MMA
        {121, "sm_120a,compute_120a", 0},                        // a-PTX cannot JIT to 12.1
        {121, "sm_121a", base90 | FEAT_MMA_FP4_BLOCK | FEAT_CVT_E2M1},
        {121, "sm_120f", base90 | FEAT_MMA_FP4_BLOCK | FEAT_CVT_E2M1},  // family runs on 12.1
        {121, "compute_120f", base90 | FEAT_MMA_FP4_BLOCK | FEAT_CVT_E2M1},
        {121, "sm_120,sm_121", base90},
        {120, "sm_100a,compute_100", base90},                    // PTX JITs forward, no a/f features
        {120, "sm_100a,sm_100", 0},                              // 10.x cubins cannot run on 12.0
        {120, "sm_100a,compute_90", base90},
        {100, "sm_120a,sm_121a", 0},
        {90, "sm_80,compute_80", base80},                        // Ampere image on Hopper: no PDL
        {120, "compute_89", base89},                             // nor on Blackwell (no griddepcontrol)
    };
    for (const auto& c : cases)
        EXPECT_EQ(arch_features_str(cuda_features(c.dev, parse_compiled_targets(c.list))), arch_features_str(c.want))
            << "device sm_" << c.dev << " compiled [" << c.list << "]";
}

TEST(arch, features_str_and_cpu) {
    EXPECT_EQ(arch_features_str(0), "none");
    EXPECT_EQ(arch_features_str(FEAT_WGMMA | FEAT_CP_ASYNC), "cp.async,wgmma");
    device_info d = cpu_device_info();
    EXPECT_EQ(d.kind, device_kind::CPU);
    EXPECT_EQ(d.features, cpu_features());
    EXPECT_EQ(d.features & ~uint32_t(FEAT_CPU_AVX2_FMA_F16C), 0u);  // only CPU bits on a CPU
#if defined(__x86_64__)
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    EXPECT_EQ((d.features & FEAT_CPU_AVX2_FMA_F16C) != 0, avx2);
#endif
}

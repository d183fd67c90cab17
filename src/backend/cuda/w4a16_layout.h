// The packed W4A16 weight layout read by the sm80 NVFP4 kernels (matmul_nvfp4_w4a16_device.cuh
// lists them), host side and device side in one place: no CUDA needed to include it, so the CPU
// build packs and checks the layout too (tests/backend/test_w4a16_layout.cpp).
//
// Tiles of 16 rows × 64 k ("chunks"), 8 chunks = one scale group (512 k). Per (tile, chunk) 32
// lanes × 16 B of codes, per (tile, group) 32 lanes × 16 B of scales: exactly the registers of
// one mma.sync m16n8k16 warp.
// codes: [k_groups][n_tiles][8 chunks][32 lanes][16 B] — group-major: for each 512-k group, every
//   tile's 8 chunks (4 KB) in tile order, so the warps streaming one group read one contiguous
//   region (bench_matmul --pattern on 28672×4096: 88.9 % of the read bandwidth against 83.6 % with
//   each tile's chunks contiguous). The last group is padded to 8 chunks with zeros (written by
//   the packer; no engine kernel reads them). Lane (g = lane/4, t = lane%4), word j (MMA j of the chunk)
//   holds 8 codes: register i (a0..a3) = bf16x2 {code(row, k), code(row, k+1)} with
//   row(i) = g + 8·(i&1), k(i) = 64·chunk + 16·t + 4·j + 2·(i>>1); the code bits sit where
//   decode_word's rotations pick them up (w4a16_bit_src), as bf16 bit patterns
//   s·000000e·em·000000 (= value · 2^-126). MMA k-slots 2t,2t+1 | 2t+8,2t+9 ↔ k 16t+4j+{0,1} |
//   {2,3}, so thread t's 16 k of a chunk are one scale block (4·chunk + t) for both of its rows.
// scales: [n_tiles][k_groups][32 lanes][16 B]: byte 2c = scale(row g, block 4·(8·group+c)+t),
//   byte 2c+1 = the same block of row g+8.
// Rows past n and k past the weight's k are zero.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define TETRA_W4A16_HD __host__ __device__ __forceinline__
#else
#define TETRA_W4A16_HD inline
#endif

namespace tetra {
namespace cuda {
namespace w4a16 {

constexpr int CHUNK_K = 64, GROUP_CHUNKS = 8, GROUP_K = CHUNK_K * GROUP_CHUNKS;

// Chunk c of tile `tile` starts at uint4 32 · chunk_index(tile, c, n_tiles) of the packed codes;
// within a group a tile's chunks are consecutive, the next group's are group_stride_u4(n_tiles)
// uint4 further.
TETRA_W4A16_HD size_t chunk_index(int64_t tile, int64_t c, int64_t n_tiles) {
    return size_t(((c / GROUP_CHUNKS) * n_tiles + tile) * GROUP_CHUNKS + c % GROUP_CHUNKS);
}
TETRA_W4A16_HD size_t group_stride_u4(int64_t n_tiles) { return size_t(n_tiles) * GROUP_CHUNKS * 32; }

// The bf16x2 bits an e2m1 pair occupies: sign 15/31, exponent 8,7 / 24,23, mantissa 6 / 22.
constexpr uint32_t BF16X2_E2M1_MASK = 0x81C081C0u;

// Where (bit position in the packed word) register i's bit p comes from: the word is rotated left
// by a per-register amount and masked with BF16X2_E2M1_MASK (register 3 takes two rotations).
// 9 integer ops per word (4 rotates, 5 masks) instead of 4–5 per register; used by the host packer.
TETRA_W4A16_HD constexpr int w4a16_bit_src(int i, int p) {
    int r = i == 0 ? 0 : i == 1 ? 4 : i == 2 ? 10 : ((p & 15) == 8 ? 14 : 6);
    return (p - r + 32) & 31;
}

TETRA_W4A16_HD uint32_t rotl32(uint32_t w, int r) {
#if defined(__CUDA_ARCH__)
    return __funnelshift_l(w, w, r);
#else
    return (w << r) | (w >> ((32 - r) & 31));
#endif
}

// A packed word → the four A registers of its MMA (bf16x2 of e2m1 · 2^-126, unscaled): the
// inverse of the packer's bit placement (w4a16_bit_src).
TETRA_W4A16_HD void decode_word(uint32_t w, uint32_t (&a)[4]) {
    a[0] = w & BF16X2_E2M1_MASK;
    a[1] = rotl32(w, 4) & BF16X2_E2M1_MASK;
    a[2] = rotl32(w, 10) & BF16X2_E2M1_MASK;
    a[3] = (rotl32(w, 6) & 0x80C080C0u) | (rotl32(w, 14) & 0x01000100u);
}

}  // namespace w4a16

// Sizes of a weight [n, k] in the packed layout.
struct w4a16_sm80_dims {
    int64_t n = 0, k = 0;
    int64_t n_tiles = 0, k_chunks = 0, k_groups = 0;
    size_t codes_bytes = 0, scales_bytes = 0;
};
w4a16_sm80_dims w4a16_sm80_dims_of(int64_t n, int64_t k);  // k must be a multiple of 16

// Shared memory per block of the small-M kernels (matmul_nvfp4_w4a16_sm80.cu) at m rows: 8 warps'
// rings of 8 chunk slots (4 KB each) and two x slots of one 512-k group (rows padded by 8 bf16).
constexpr int64_t W4A16_SMALL_RING_BYTES = 8 * w4a16::GROUP_CHUNKS * 32 * 16;
constexpr int64_t w4a16_small_smem(int64_t m) { return W4A16_SMALL_RING_BYTES + 2 * m * (w4a16::GROUP_K + 8) * 2; }
// The most rows, up to m_cap, whose small-M shared memory fits smem_optin bytes per block (the
// device's opt-in limit): all 64 on sm_80 / 90 / 100 (163–227 KB), 32 on sm_86 / 89 / 120 / 121
// (99 KB). Past it the launcher takes the large-M path.
constexpr int64_t w4a16_small_m_fit(int64_t smem_optin, int64_t m_cap) {
    int64_t m = 0;
    while (m < m_cap && w4a16_small_smem(m + 1) <= smem_optin) ++m;
    return m;
}

// ---- the sweep decode kernel's plan (matmul_nvfp4_w4a16_sweep_sm80.cu; plain C++ here so that the
// CPU build tests it: tests/backend/test_w4a16_layout.cpp) ----------------------------------------
constexpr int64_t W4A16_SWEEP_M_MAX = 16;        // rows the kernel takes (and the registry gives it)
// The registry gives it m > 8 (two column tiles, x re-read through L1 by every CTA) only for weights of
// n ≤ this: there it beat the sm80 kernel at m = 12 and 16 on an H100 (qkv 12.32 vs 14.24 µs, o_proj 9.58
// vs 12.16 at m = 16); on gate+up (n = 28672, 896 CTAs each reading all of x) it lost (49.8 vs 40.3 µs;
// docs/perf.md, session 20).
constexpr int64_t W4A16_SWEEP_WIDE_N_MAX = 8192;
constexpr int64_t W4A16_SWEEP_K_GROUPS_MAX = 8;  // 512-k groups of the default plan (k ≤ 4096): one CTA holds all of k
constexpr int W4A16_SWEEP_MAX_WARPS = 8;
constexpr int W4A16_SWEEP_UNIT_U4 = w4a16::GROUP_CHUNKS * 32 + 32;  // one (tile, group): 8 chunks of codes, its scales
constexpr int W4A16_SWEEP_X_PAD = 8;  // bf16 per staged x row: staggers rows across banks
// The kernel's static __shared__ bytes (s_last: 16), which count against the device's limit too: the
// registry passes the opt-in limit less this as smem_limit.
constexpr int64_t W4A16_SWEEP_STATIC_SMEM_MAX = 64;

// Shared memory of a CTA (uint4 units): [warps][GS units][UNIT_U4] weights, then x [m][G·512 + X_PAD]
// bf16 (m = 0 when x is read through L1), then [warps][GS units][16 rows][8·NB m] f32 group sums (NB
// column tiles of 8 x rows: 1 for m ≤ 8, 2 above).
TETRA_W4A16_HD constexpr size_t w4a16_sweep_x_off(int warps, int gs) { return size_t(warps) * gs * W4A16_SWEEP_UNIT_U4; }
TETRA_W4A16_HD constexpr size_t w4a16_sweep_red_off(int warps, int gs, int m, int G) {
    return w4a16_sweep_x_off(warps, gs) + (size_t(m) * (G * w4a16::GROUP_K + W4A16_SWEEP_X_PAD) * 2 + 15) / 16;
}
TETRA_W4A16_HD constexpr size_t w4a16_sweep_smem(int warps, int gs, int m, int G, int nb) {
    return (w4a16_sweep_red_off(warps, gs, m, G) + size_t(warps) * gs * 16 * 8 * nb / 4) * 16;
}

struct w4a16_sweep_config {  // variants for the bench and tests; T = 0: the default plan
    int T = 0, G = 0, S = 0;
    int tw = 1;         // tiles per warp (with T = the caller's): 2 = each warp takes two tiles of its
                        // groups and reads x once for both (m > 8, plain matmul only)
    int x_direct = -1;  // 1: x read through L1, 0: staged in shared memory, -1: the plan's choice
    int pdl = 0;
    int no_math = 0;    // the copies and waits alone (bench: the access pattern's ceiling)
    int64_t silu_n_ff = 0;  // > 0: matmul_silu on a stacked [2·n_ff, k] weight (the default plan with T = 2:
                            // a gate tile and its up tile per CTA); out is [m, n_ff] = silu(gate) · up
    // > 0: the device's opt-in shared memory per block. The plan then reads x through L1 where
    // staging it would not fit (99 KB on sm_86 / 89 / 120 / 121: matmul_silu of k = 4096 at m = 3
    // and 4 needs 106–115 KB staged).
    int64_t smem_limit = 0;
};
struct w4a16_sweep_plan {
    int T = 0, G = 0, S = 0, n_tb = 0, n_gr = 0;
    int tw = 1;  // tiles per warp: a CTA is T / tw · S warps
    int64_t silu_n_ff = 0;
    bool x_direct = false;
    size_t smem = 0, partial_bytes = 0, counter_count = 0;
};
// The plan for m rows (T and the x path depend on m and on cfg.smem_limit; the arithmetic does not).
w4a16_sweep_plan w4a16_sweep_plan_of(int64_t n, int64_t k, int64_t m, const w4a16_sweep_config& cfg = {});
// "" when the launch is valid; smem_limit > 0: also that the plan's shared memory fits it.
std::string w4a16_sweep_why_not(const w4a16_sweep_plan& pl, int64_t m, int64_t smem_limit = 0);

// Host re-layout of the canonical bytes (w4a16_layout.cpp). codes: u8 [n, k/2] (even element in
// the low nibble); scales: e4m3 [n, k/16]; packed_codes/packed_scales: host buffers of dims
// sizes, every byte written.
void w4a16_sm80_pack(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                     uint8_t* packed_codes, uint8_t* packed_scales);

}  // namespace cuda
}  // namespace tetra

#undef TETRA_W4A16_HD

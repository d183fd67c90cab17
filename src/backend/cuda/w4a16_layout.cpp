// The host side of the packed W4A16 layout (w4a16_layout.h): sizes and the packer. Plain C++:
// the CPU build compiles it too, so the layout is checked without a GPU.
#include "backend/cuda/w4a16_layout.h"

#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cuda {

using namespace w4a16;

namespace {

// The canonical code / scale at (row, col) / (row, block); zero past the weight (the padding).
uint8_t code_at(const uint8_t* codes, int64_t n, int64_t k, int64_t row, int64_t col) {
    if (row >= n || col >= k) return 0;
    uint8_t b = codes[row * (k / 2) + col / 2];
    return (col & 1) ? uint8_t(b >> 4) : uint8_t(b & 0xF);
}

uint8_t scale_at(const uint8_t* scales, int64_t n, int64_t k, int64_t row, int64_t blk) {
    if (row >= n || blk >= k / 16) return 0;
    return scales[row * (k / 16) + blk];
}

}  // namespace

w4a16_sm80_dims w4a16_sm80_dims_of(int64_t n, int64_t k) {
    TETRA_CHECK(n > 0 && k > 0 && k % 16 == 0, "w4a16_sm80: weight [%lld, %lld]: expected n > 0 and k a multiple of 16",
                (long long)n, (long long)k);
    w4a16_sm80_dims d;
    d.n = n, d.k = k;
    d.n_tiles = (n + 15) / 16;
    d.k_chunks = (k + CHUNK_K - 1) / CHUNK_K;
    d.k_groups = (d.k_chunks + GROUP_CHUNKS - 1) / GROUP_CHUNKS;
    d.codes_bytes = size_t(d.n_tiles * d.k_groups) * GROUP_CHUNKS * 32 * 16;  // group-major, last group padded
    d.scales_bytes = size_t(d.n_tiles * d.k_groups) * 32 * 16;
    return d;
}

void w4a16_sm80_pack(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, uint8_t* pc,
                     uint8_t* ps) {
    w4a16_sm80_dims d = w4a16_sm80_dims_of(n, k);
    // Tiles are independent: pack them on every pool thread (an 8B model's weights in seconds).
    auto pack_tiles = [&](int64_t tile0, int64_t tile1) {
    for (int64_t tile = tile0; tile < tile1; ++tile)
        for (int64_t ch = 0; ch < d.k_groups * GROUP_CHUNKS; ++ch)  // chunks past k_chunks: the zero padding
            for (int lane = 0; lane < 32; ++lane) {
                int g = lane / 4, t = lane % 4;
                uint8_t* dst = pc + (chunk_index(tile, ch, d.n_tiles) * 32 + lane) * 16;
                for (int j = 0; j < 4; ++j) {
                    uint32_t w = 0;
                    for (int i = 0; i < 4; ++i) {
                        int64_t row = tile * 16 + g + 8 * (i & 1), col = ch * CHUNK_K + 16 * t + 4 * j + 2 * (i >> 1);
                        uint32_t lo = code_at(codes, n, k, row, col), hi = code_at(codes, n, k, row, col + 1);
                        // register i = bf16x2 {lo, hi}: code bits s,e1,e0,m → bf16 bits 15,8,7,6 (+16 for hi)
                        const int dst_bit[4] = {6, 7, 8, 15};
                        for (int b = 0; b < 4; ++b) {
                            w |= ((lo >> b) & 1u) << w4a16_bit_src(i, dst_bit[b]);
                            w |= ((hi >> b) & 1u) << w4a16_bit_src(i, dst_bit[b] + 16);
                        }
                    }
                    std::memcpy(dst + 4 * j, &w, 4);
                }
            }
    for (int64_t tile = tile0; tile < tile1; ++tile)
        for (int64_t grp = 0; grp < d.k_groups; ++grp)
            for (int lane = 0; lane < 32; ++lane) {
                int g = lane / 4, t = lane % 4;
                uint8_t* dst = ps + ((tile * d.k_groups + grp) * 32 + lane) * 16;
                for (int c = 0; c < GROUP_CHUNKS; ++c) {
                    int64_t blk = 4 * (grp * GROUP_CHUNKS + c) + t;
                    dst[2 * c] = scale_at(scales, n, k, tile * 16 + g, blk);
                    dst[2 * c + 1] = scale_at(scales, n, k, tile * 16 + g + 8, blk);
                }
            }
    };
    parallel_for(d.n_tiles, pack_tiles);
}

}  // namespace cuda
}  // namespace tetra

// 128x4 block-scale swizzle (reference/nvfp4-format.md §5): the layout CUTLASS/cuBLASLt
// block-scaled FP4 GEMMs read. Rows pad to 128, K-blocks to 4; padding bytes are zero.
// Checkpoints never store this layout; it is made at load from the row-major [rows, kb] scales.
#include <cstring>

#include "core/error.h"
#include "nvfp4/nvfp4.h"

namespace tetra {

int64_t nvfp4_swizzle_padded_rows(int64_t rows) { return (rows + 127) / 128 * 128; }
int64_t nvfp4_swizzle_padded_kblocks(int64_t kb) { return (kb + 3) / 4 * 4; }

int64_t nvfp4_swizzle_offset(int64_t m, int64_t kb, int64_t kb_pad) {
    // One 512-byte atom per (128-row tile, 4-K-block tile), K tiles fastest. Inside: 16 bytes
    // per m%32, holding rows m%32 + {0,32,64,96} (4 bytes each) x 4 consecutive K-blocks.
    return ((m / 128) * (kb_pad / 4) + kb / 4) * 512 + (m % 32) * 16 + ((m / 32) % 4) * 4 +
           kb % 4;
}

static void check_swizzle_shape(const char* what, int64_t rows, int64_t kb) {
    TETRA_CHECK(rows >= 0 && kb >= 0, "%s: rows and kb must be >= 0; got rows=%lld kb=%lld", what,
                (long long)rows, (long long)kb);
}

void nvfp4_swizzle_scales(const uint8_t* linear, int64_t rows, int64_t kb, uint8_t* swizzled) {
    check_swizzle_shape("nvfp4_swizzle_scales", rows, kb);
    const int64_t kb_pad = nvfp4_swizzle_padded_kblocks(kb);
    std::memset(swizzled, 0, size_t(nvfp4_swizzle_padded_rows(rows) * kb_pad));
    for (int64_t m = 0; m < rows; ++m)
        for (int64_t k = 0; k < kb; ++k)
            swizzled[nvfp4_swizzle_offset(m, k, kb_pad)] = linear[m * kb + k];
}

void nvfp4_unswizzle_scales(const uint8_t* swizzled, int64_t rows, int64_t kb, uint8_t* linear) {
    check_swizzle_shape("nvfp4_unswizzle_scales", rows, kb);
    const int64_t kb_pad = nvfp4_swizzle_padded_kblocks(kb);
    for (int64_t m = 0; m < rows; ++m)
        for (int64_t k = 0; k < kb; ++k)
            linear[m * kb + k] = swizzled[nvfp4_swizzle_offset(m, k, kb_pad)];
}

}  // namespace tetra

// One case of the fused attention input stage (backend::qkv_rope_store), shared by its CPU test
// (test_qkv_rope_store.cpp) and its GPU test (cuda/test_backend_ops_gpu.cpp): random fused q|k|v rows,
// optional q/k norm weights, rope frequencies, random positions, a shuffled slot mapping with one
// padding slot (-1), random paged caches; and the q/k/v heads split out of the fused rows (what the
// unfused path's get_rows produces). Host tensors.
#pragma once
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/ops.h"
#include "backend/ops_harness.h"

namespace tetra_test {

struct qkv_case {
    int64_t nh = 0, nkv = 0, hd = 0, n = 0;
    tensor qkv;              // [n, nh + 2·nkv, hd]
    tensor q_norm, k_norm;   // [hd], or empty without norm
    tensor inv_freq;         // f32 [n_rot / 2]
    tensor positions, slots;            // i32 [n]
    tensor k_cache0, v_cache0;          // [n_blocks, block_size, nkv, hd], the caches before the op
};

inline qkv_case make_qkv_case(rng& r, dtype t, int64_t nh, int64_t nkv, int64_t hd, int64_t n_rot, int64_t n, bool norm,
                              float theta, int32_t max_position, int64_t block_size, int64_t n_blocks) {
    qkv_case c;
    c.nh = nh, c.nkv = nkv, c.hd = hd, c.n = n;
    rope_params rp;
    rp.theta = theta, rp.n_rot = int(n_rot);
    c.inv_freq = rope_inv_freq(rp, hd);
    c.qkv = random_tensor(r, t, {n, nh + 2 * nkv, hd}, 2.0);
    if (norm) c.q_norm = random_tensor(r, t, {hd}), c.k_norm = random_tensor(r, t, {hd});
    std::vector<int32_t> pos, slots(size_t(n_blocks * block_size));
    for (int64_t i = 0; i < n; ++i) pos.push_back(int32_t(r.randint(0, max_position)));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), r.g);
    slots.resize(size_t(n));
    if (n > 2) slots[1] = -1;  // padding token: q written, nothing stored
    c.positions = i32_tensor(pos), c.slots = i32_tensor(slots);
    std::vector<int64_t> cshape{n_blocks, block_size, nkv, hd};
    c.k_cache0 = random_tensor(r, t, cshape), c.v_cache0 = random_tensor(r, t, cshape);
    return c;
}

// A fresh host copy of t.
inline tensor clone(const tensor& t) {
    tensor c = tensor::alloc(t.type, t.shape);
    std::memcpy(c.data, t.data, t.nbytes());
    return c;
}

// The q [n, nh, hd], k and v [n, nkv, hd] heads of c.qkv, copied out.
inline void split_qkv(const qkv_case& c, tensor& q, tensor& k, tensor& v) {
    const dtype t = c.qkv.type;
    const size_t es = dtype_size(t), hd = size_t(c.hd);
    q = tensor::alloc(t, {c.n, c.nh, c.hd}), k = tensor::alloc(t, {c.n, c.nkv, c.hd}), v = tensor::alloc(t, k.shape);
    for (int64_t i = 0; i < c.n; ++i) {
        const char* row = static_cast<const char*>(c.qkv.data) + size_t(i * (c.nh + 2 * c.nkv)) * hd * es;
        std::memcpy(static_cast<char*>(q.data) + size_t(i * c.nh) * hd * es, row, size_t(c.nh) * hd * es);
        std::memcpy(static_cast<char*>(k.data) + size_t(i * c.nkv) * hd * es, row + size_t(c.nh) * hd * es,
                    size_t(c.nkv) * hd * es);
        std::memcpy(static_cast<char*>(v.data) + size_t(i * c.nkv) * hd * es, row + size_t(c.nh + c.nkv) * hd * es,
                    size_t(c.nkv) * hd * es);
    }
}

}  // namespace tetra_test

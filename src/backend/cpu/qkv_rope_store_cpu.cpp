// qkv_rope_store_cpu: the fused attention input stage as the composition it stands for — q, k, v
// heads copied out of the fused projection rows, per-head rms_norm, rope, kv_store — through this
// backend's own ops, so its result is the unfused path's bit for bit (the oracle of the CUDA kernel).
#include <cstring>

#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

static void qkv_rope_store_cpu(backend& be, const qkv_rope_store_args& a) {
    const int64_t n = a.qkv.dim(0), hd = a.qkv.dim(2), nh = a.q_out.dim(1), nkv = a.k_cache.dim(2);
    const size_t es = dtype_size(a.act), row = size_t(nh + 2 * nkv) * size_t(hd) * es;
    tensor k = tensor::alloc(a.act, {n, nkv, hd}), v = tensor::alloc(a.act, {n, nkv, hd});
    const char* src = static_cast<const char*>(a.qkv.data);
    for (int64_t t = 0; t < n; ++t) {
        const char* r = src + size_t(t) * row;
        std::memcpy(static_cast<char*>(a.q_out.data) + size_t(t * nh * hd) * es, r, size_t(nh * hd) * es);
        std::memcpy(static_cast<char*>(k.data) + size_t(t * nkv * hd) * es, r + size_t(nh * hd) * es, size_t(nkv * hd) * es);
        std::memcpy(static_cast<char*>(v.data) + size_t(t * nkv * hd) * es, r + size_t((nh + nkv) * hd) * es,
                    size_t(nkv * hd) * es);
    }
    if (!a.q_norm.empty()) {
        tensor qr = tensor_reshape(a.q_out, {n * nh, hd});
        be.rms_norm(qr, a.q_norm, a.eps, qr);
    }
    if (!a.k_norm.empty()) {
        tensor kr = tensor_reshape(k, {n * nkv, hd});
        be.rms_norm(kr, a.k_norm, a.eps, kr);
    }
    be.rope(a.q_out, k, a.positions, a.inv_freq);
    be.kv_store(k, v, a.k_cache, a.v_cache, a.slot_mapping);
}

void register_qkv_rope_store(kernel_registry& r) {
    r.add(make_kernel<qkv_rope_store_args>("qkv_rope_store", "qkv_rope_store_cpu", plain_req(), 0, nullptr,
                                           qkv_rope_store_cpu));
}

}  // namespace cpu
}  // namespace tetra

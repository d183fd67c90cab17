// rope_cpu: NeoX/HF rotate_half rope in place. Per token: angle_i = f32(pos · inv_freq[i]) (the
// f32 product HF's matmul computes), cos/sin rounded to f32, then as HF
// q·cos + rotate_half(q)·sin: out[i] = x[i]·c − x[i+h]·s, out[i+h] = x[i+h]·c + x[i]·s (h = n_rot/2).
// Dims ≥ n_rot (partial rotary) are untouched.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

static void rotate(const tensor& t, int64_t tok, const std::vector<float>& c, const std::vector<float>& s) {
    int64_t n_head = t.dim(1), head_dim = t.dim(2), h = int64_t(c.size());
    for (int64_t hd = 0; hd < n_head; ++hd) {
        int64_t base = (tok * n_head + hd) * head_dim;
        for (int64_t i = 0; i < h; ++i) {
            float x1 = act_load(t.data, t.type, base + i), x2 = act_load(t.data, t.type, base + i + h);
            float a = x1 * c[size_t(i)], b = x2 * s[size_t(i)];
            float d = x2 * c[size_t(i)], f = x1 * s[size_t(i)];
            act_store(t.data, t.type, base + i, a - b);
            act_store(t.data, t.type, base + i + h, d + f);
        }
    }
}

// q: [n_tokens, n_head, head_dim]; k: [n_tokens, n_head_kv, head_dim]; positions: i32 [n_tokens];
// inv_freq: f32 [n_rot/2]
static void rope_cpu(backend&, const rope_args& a) {
    int64_t n_tokens = a.q.dim(0), h = a.inv_freq.dim(0);
    const int32_t* pos = a.positions.ptr<int32_t>();
    const float* inv = a.inv_freq.ptr<float>();
    parallel_for(n_tokens, [&](int64_t b, int64_t e) {
        std::vector<float> c(static_cast<size_t>(h)), s(static_cast<size_t>(h));
        for (int64_t t = b; t < e; ++t) {
            for (int64_t i = 0; i < h; ++i) {
                float ang = float(pos[t]) * inv[i];
                c[size_t(i)] = float(std::cos(double(ang)));
                s[size_t(i)] = float(std::sin(double(ang)));
            }
            rotate(a.q, t, c, s);
            rotate(a.k, t, c, s);
        }
    });
}

void register_rope(kernel_registry& r) {
    r.add(make_kernel<rope_args>("rope", "rope_cpu", plain_req(), 0, nullptr, rope_cpu));
}

}  // namespace cpu
}  // namespace tetra

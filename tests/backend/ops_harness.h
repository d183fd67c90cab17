// Shared helpers of the CPU test_backend_ops: seeded random inputs, host tensors from floats,
// guarded outputs (sentinel bytes before and after; payload pre-filled with NaN so unwritten
// elements fail), NMSE comparison with identical NaN/Inf patterns, and running an op once per
// CPU kernel entry by forcing it through TETRA_KERNEL (the real selection path).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tetra_test {

using namespace tetra;

struct rng {
    std::mt19937_64 g;
    explicit rng(uint64_t seed) : g(seed) {}
    double uniform(double lo, double hi) { return lo + (hi - lo) * double(g() >> 11) * 0x1.0p-53; }
    double normal() {  // Box-Muller, deterministic across standard libraries
        double u1 = uniform(1e-12, 1.0), u2 = uniform(0.0, 1.0);
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    }
    int64_t randint(int64_t lo, int64_t hi) { return lo + int64_t(g() % uint64_t(hi - lo + 1)); }  // [lo, hi]
};

inline double read_elem(const tensor& t, int64_t i) {
    switch (t.type) {
        case dtype::F32: return t.ptr<float>()[i];
        case dtype::BF16: return bf16_to_f32(t.ptr<uint16_t>()[i]);
        case dtype::F16: return f16_to_f32(t.ptr<uint16_t>()[i]);
        case dtype::I32: return t.ptr<int32_t>()[i];
        case dtype::U8: return t.ptr<uint8_t>()[i];
        default: ADD_FAILURE() << "read_elem: dtype " << dtype_name(t.type); return 0;
    }
}

inline void write_elem(const tensor& t, int64_t i, double v) {
    switch (t.type) {
        case dtype::F32: t.ptr<float>()[i] = float(v); break;
        case dtype::BF16: t.ptr<uint16_t>()[i] = f32_to_bf16(float(v)); break;
        case dtype::F16: t.ptr<uint16_t>()[i] = f32_to_f16(float(v)); break;
        case dtype::I32: t.ptr<int32_t>()[i] = int32_t(v); break;
        default: ADD_FAILURE() << "write_elem: dtype " << dtype_name(t.type);
    }
}

inline std::vector<double> to_double(const tensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = read_elem(t, i);
    return v;
}

// A host tensor holding `v` rounded to dtype t.
inline tensor make_tensor(dtype t, std::vector<int64_t> shape, const std::vector<double>& v) {
    tensor x = tensor::alloc(t, std::move(shape));
    EXPECT_EQ(size_t(x.numel()), v.size());
    for (int64_t i = 0; i < x.numel(); ++i) write_elem(x, i, v[size_t(i)]);
    return x;
}

inline tensor random_tensor(rng& r, dtype t, std::vector<int64_t> shape, double scale = 1.0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& e : v) e = scale * r.normal();
    return make_tensor(t, std::move(shape), v);
}

inline tensor i32_tensor(const std::vector<int32_t>& v) {
    tensor x = tensor::alloc(dtype::I32, {int64_t(v.size())});
    if (!v.empty()) std::memcpy(x.data, v.data(), v.size() * 4);
    return x;
}

// An output view with 64 guard bytes on each side (pattern 0xA5) and NaN (or 0x7F bytes for
// non-float dtypes) in the payload.
struct guarded {
    tensor buf, view;
    static constexpr size_t k_guard = 64;
    bool intact() const {
        const uint8_t* p = buf.ptr<uint8_t>();
        size_t n = view.nbytes();
        for (size_t i = 0; i < k_guard; ++i)
            if (p[i] != 0xA5 || p[k_guard + n + i] != 0xA5) return false;
        return true;
    }
};

inline guarded make_guarded(dtype t, std::vector<int64_t> shape) {
    guarded g;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    size_t bytes = size_t(n) * dtype_size(t);
    g.buf = tensor::alloc(dtype::U8, {int64_t(bytes + 2 * guarded::k_guard)});
    std::memset(g.buf.data, 0xA5, size_t(g.buf.numel()));
    g.view = tensor::view(t, std::move(shape), g.buf.ptr<uint8_t>() + guarded::k_guard);
    g.view.owner = g.buf.owner;
    if (t == dtype::F32 || t == dtype::BF16 || t == dtype::F16)
        for (int64_t i = 0; i < n; ++i) write_elem(g.view, i, NAN);
    else
        std::memset(g.view.data, 0x7F, bytes);
    return g;
}

// "" if got matches ref: identical NaN / ±Inf positions, and NMSE = Σ(g−r)²/Σr² ≤ tol over the
// finite elements (max |g−r| ≤ tol when Σr² = 0).
inline std::string compare(const std::vector<double>& got, const std::vector<double>& ref, double tol) {
    if (got.size() != ref.size()) return "size mismatch";
    double num = 0, den = 0, maxerr = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        bool gn = std::isnan(got[i]), rn = std::isnan(ref[i]);
        bool gi = std::isinf(got[i]), ri = std::isinf(ref[i]);
        if (gn != rn || gi != ri || (gi && got[i] != ref[i]))
            return "non-finite mismatch at " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " +
                   std::to_string(ref[i]);
        if (gn || gi) continue;
        double d = got[i] - ref[i];
        num += d * d, den += ref[i] * ref[i], maxerr = std::max(maxerr, std::fabs(d));
    }
    double nmse = den > 0 ? num / den : maxerr;
    if (nmse <= tol) return "";
    return "nmse " + std::to_string(nmse) + " > tol " + std::to_string(tol) + " (max abs err " +
           std::to_string(maxerr) + ")";
}

// Scoped TETRA_KERNEL=op:name.
struct force_kernel {
    force_kernel(const std::string& op, const std::string& name) {
        setenv("TETRA_KERNEL", (op + ":" + name).c_str(), 1);
    }
    ~force_kernel() { unsetenv("TETRA_KERNEL"); }
};

inline std::vector<const kernel_entry*> cpu_kernels(const std::string& op) {
    std::vector<const kernel_entry*> out;
    for (const kernel_entry* k : kernel_registry::instance().kernels(op))
        if (k->req.device == device_kind::CPU && (k->req.features & ~cpu_features()) == 0) out.push_back(k);
    return out;
}

inline bool handles(const kernel_entry& k, dtype act) {
    return k.req.act_dtypes.empty() ||
           std::find(k.req.act_dtypes.begin(), k.req.act_dtypes.end(), act) != k.req.act_dtypes.end();
}

// The message of the tetra::error f throws ("" if it returns normally).
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const error& e) {
        return std::string(e.what());
    }
    return std::string();
}

inline backend& cpu_be() {
    static std::unique_ptr<backend> be = make_cpu_backend();
    return *be;
}

// Runs `run` once per CPU kernel of `op` that handles `act`, forcing it; for kernels that do not
// handle `act`, checks that forcing them is an error naming the dtype. Counts runs per kernel.
inline void for_each_kernel(const std::string& op, dtype act, std::map<std::string, int>& ran,
                            const std::function<void(const kernel_entry&)>& run) {
    for (const kernel_entry* k : cpu_kernels(op)) {
        force_kernel fk(op, k->name);
        if (handles(*k, act)) {
            run(*k);
            ++ran[k->name];
        } else {
            try {
                run(*k);
                ADD_FAILURE() << k->name << " ran on act dtype " << dtype_name(act) << " it does not handle";
            } catch (const error& e) {
                EXPECT_NE(std::string(e.what()).find("activation dtype"), std::string::npos) << e.what();
            }
        }
    }
}

// Every CPU kernel of `op` ran at least `min_cases` cases.
inline void expect_all_ran(const std::string& op, const std::map<std::string, int>& ran, int min_cases) {
    for (const kernel_entry* k : cpu_kernels(op)) {
        auto it = ran.find(k->name);
        EXPECT_TRUE(it != ran.end() && it->second >= min_cases)
            << k->name << " ran " << (it == ran.end() ? 0 : it->second) << " cases; expected >= " << min_cases;
    }
}

inline const char* dn(dtype t) { return dtype_name(t); }

}  // namespace tetra_test

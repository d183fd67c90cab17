#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace tetra {

int64_t tensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

std::string tensor::shape_str() const { return tetra::shape_str(shape); }

tensor tensor::alloc(dtype t, std::vector<int64_t> shape) {
    tensor x;
    x.type = t;
    x.shape = std::move(shape);
    for (int64_t d : x.shape) TETRA_CHECK(d >= 0, "tensor::alloc: negative dimension in %s", x.shape_str().c_str());
    size_t n = x.nbytes();
    // 64-byte alignment for vector loads; at least one byte so data is never null.
    size_t padded = (n + 63) / 64 * 64 + 64;
    void* p = std::aligned_alloc(64, padded);
    TETRA_CHECK(p != nullptr, "out of host memory allocating %zu bytes for a %s %s tensor", n, dtype_name(t),
                x.shape_str().c_str());
    std::memset(p, 0, padded);
    x.owner = std::shared_ptr<void>(p, std::free);
    x.data = p;
    return x;
}

tensor tensor::view(dtype t, std::vector<int64_t> shape, void* data) {
    tensor x;
    x.type = t;
    x.shape = std::move(shape);
    x.data = data;
    return x;
}

}  // namespace tetra

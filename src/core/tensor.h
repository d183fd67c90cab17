// A tensor is a typed view of contiguous row-major memory (shape outermost first) plus a shared
// owner that keeps the memory alive (a heap buffer, an mmap'd safetensors file, a device buffer).
// Views are cheap to copy. Non-contiguous strides are not represented: ops take explicit shapes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tetra {

enum class device_kind : uint8_t { CPU, CUDA };

struct tensor {
    dtype type = dtype::F32;
    std::vector<int64_t> shape;        // outermost first, e.g. [out, in]
    void* data = nullptr;
    device_kind device = device_kind::CPU;
    std::shared_ptr<void> owner;       // keeps `data` alive; may be null for borrowed views

    int64_t numel() const;
    size_t nbytes() const { return size_t(numel()) * dtype_size(type); }
    int64_t dim(int i) const { return shape.at(size_t(i < 0 ? int(shape.size()) + i : i)); }
    int rank() const { return int(shape.size()); }
    template <typename T> T* ptr() const { return static_cast<T*>(data); }
    bool empty() const { return data == nullptr; }
    std::string shape_str() const;     // "[4096, 2048]"

    // A new zero-filled CPU tensor owning its memory.
    static tensor alloc(dtype t, std::vector<int64_t> shape);
    // A borrowed view of existing memory (caller keeps it alive).
    static tensor view(dtype t, std::vector<int64_t> shape, void* data);
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace tetra

// make_cuda_backend for builds without the CUDA backend (TETRA_CUDA=OFF or no nvcc): compiled
// only in such builds (src/CMakeLists.txt), so callers need no #ifdef.
#include "backend/backend.h"
#include "core/error.h"

namespace tetra {

std::unique_ptr<backend> make_cuda_backend(int device) {
    TETRA_FAIL("cuda backend (device %d) requested, but this tetra was built without CUDA "
               "(configure with -DTETRA_CUDA=ON and a CUDA toolkit)", device);
}

int cuda_device_count() { return 0; }

}  // namespace tetra

// cuda_versions() (backend/cuda_info.h). Compiled into the CUDA object library in CUDA builds
// (TETRA_HAVE_CUDA) and into tetra_backend without it (src/CMakeLists.txt), where it answers without
// any CUDA call. cudaRuntimeGetVersion needs no GPU; cudaDriverGetVersion reports 0 without a driver.
#include "backend/cuda_info.h"

#ifdef TETRA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "core/error.h"

namespace tetra {

std::string cuda_version_str(int v) {
    if (v <= 0) return "none";
    return strfmt("%d.%d", v / 1000, (v % 1000) / 10);
}

cuda_version_info cuda_versions() {
    cuda_version_info r;
#ifdef TETRA_HAVE_CUDA
    r.built_with_cuda = true;
    r.compiled_runtime = CUDART_VERSION;
    cudaError_t e = cudaRuntimeGetVersion(&r.runtime);
    if (e != cudaSuccess) r.error = strfmt("cudaRuntimeGetVersion: %s", cudaGetErrorString(e));
    e = cudaDriverGetVersion(&r.driver);
    if (e != cudaSuccess) {
        r.driver = 0;
        r.error += strfmt("%scudaDriverGetVersion: %s", r.error.empty() ? "" : "; ", cudaGetErrorString(e));
    }
#endif
    return r;
}

}  // namespace tetra

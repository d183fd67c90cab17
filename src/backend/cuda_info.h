// CUDA driver and runtime versions for `tetra doctor` (cuda/cuda_info.cpp). The same API in every
// build: without the CUDA backend it reports that no CUDA code is compiled in (no CUDA calls). Kept
// out of the backend interface: only the doctor needs it.
#pragma once
#include <string>

namespace tetra {

struct cuda_version_info {
    bool built_with_cuda = false;  // this binary has the CUDA backend
    int compiled_runtime = 0;      // CUDART_VERSION of the toolkit it was built with (1000·major + 10·minor)
    int runtime = 0;               // cudaRuntimeGetVersion: the CUDA runtime linked in
    int driver = 0;                // cudaDriverGetVersion: the newest CUDA the installed driver supports; 0 = none
    std::string error;             // a failed query ("" when both answered)
};

cuda_version_info cuda_versions();

// 12080 → "12.8"; 0 → "none".
std::string cuda_version_str(int v);

}  // namespace tetra

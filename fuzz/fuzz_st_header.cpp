// libFuzzer target for the safetensors header parser: the input is a whole file. Any outcome but a
// successful parse or a tetra::error (a crash, a sanitizer report, another exception type, an
// accepted header whose tensors do not tile the data area) is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        tetra::st_header h = tetra::st_parse_header(data, size, size, "fuzz-input");
        // Invariants an accepted header guarantees to the reader.
        uint64_t cursor = 0;
        for (const auto& t : h.tensors) {
            TETRA_ASSERT(t.begin == cursor && t.begin <= t.end);
            cursor = t.end;
        }
        TETRA_ASSERT(h.data_start + cursor == size);
    } catch (const tetra::error&) {
    }
    return 0;
}

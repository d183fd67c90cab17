// sequence: construction (the rest is plain data the scheduler and engine update).
#include "engine/sequence.h"

#include "core/error.h"

namespace tetra {

sequence::sequence(int64_t seq_id_, std::vector<int32_t> prompt)
    : seq_id(seq_id_), token_ids(std::move(prompt)) {
    TETRA_CHECK(!token_ids.empty(), "sequence %lld: the prompt is empty", (long long)seq_id);
    num_prompt_tokens = int64_t(token_ids.size());
}

}  // namespace tetra

#include "model/step_ops.h"

namespace tetra {

namespace {
const char* const k_names[] = {
    "embedding", "attn_norm", "qkv",    "rope_kv",        "attention",   "o_proj",        "ffn_norm",
    "gate_up",   "down",      "router", "route",          "gather",      "expert_gate_up", "expert_down",
    "shared_expert", "combine", "output_norm", "lm_head",
};
static_assert(sizeof(k_names) / sizeof(k_names[0]) == k_step_op_count, "a step_op without a name");
}  // namespace

const char* step_op_name(step_op o) {
    const int i = int(o);
    return i >= 0 && i < k_step_op_count ? k_names[i] : "?";
}

bool step_op_of(const std::string& name, step_op& out) {
    for (int i = 0; i < k_step_op_count; ++i)
        if (name == k_names[i]) {
            out = step_op(i);
            return true;
        }
    return false;
}

}  // namespace tetra

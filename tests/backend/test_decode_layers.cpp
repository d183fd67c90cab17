// decode_layers on the CPU: the op is the sequence of ops it stands for (its CPU kernel against the
// same ops called one by one, bit for bit: the oracle of the fused CUDA kernel is exactly the layers
// the model would run), the CPU backend never reports a fused kernel for it, and bad arguments are
// errors that name the operand and the expected shape.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/decode_layers_case.h"

using namespace tetra;
using namespace tetra_test;

namespace {

std::vector<uint8_t> bytes(const tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    return std::vector<uint8_t>(p, p + t.nbytes());
}

// The op's documented sequence, spelled out with the backend's own ops.
void layers_by_hand(backend& be, const decode_layers_args& a) {
    const tensor qkv_rows = tensor_reshape(a.qkv, {1, (a.n_head + 2 * a.n_head_kv) * a.head_dim});
    for (size_t il = 0; il < a.layers.size(); ++il) {
        const decode_layer_ref& L = a.layers[il];
        if (il == 0 && a.first_plain) be.rms_norm(a.residual, L.attn_norm, a.eps, a.h);
        else be.add_rms_norm(a.residual, a.proj, L.attn_norm, a.eps, a.h);
        be.matmul(a.h, *L.qkv, qkv_rows, a.mode);
        const tensor heads = tensor_reshape(qkv_rows, {a.n_head + 2 * a.n_head_kv, a.head_dim});
        tensor q = tensor_reshape(tensor_rows(heads, 0, a.n_head), {1, a.n_head, a.head_dim});
        tensor k = tensor_reshape(tensor_rows(heads, a.n_head, a.n_head_kv), {1, a.n_head_kv, a.head_dim});
        tensor v = tensor_reshape(tensor_rows(heads, a.n_head + a.n_head_kv, a.n_head_kv), {1, a.n_head_kv, a.head_dim});
        if (!L.q_norm.empty()) be.rms_norm(tensor_reshape(q, {a.n_head, a.head_dim}), L.q_norm, a.eps,
                                           tensor_reshape(q, {a.n_head, a.head_dim}));
        if (!L.k_norm.empty()) be.rms_norm(tensor_reshape(k, {a.n_head_kv, a.head_dim}), L.k_norm, a.eps,
                                           tensor_reshape(k, {a.n_head_kv, a.head_dim}));
        be.rope(q, k, a.meta.positions, a.inv_freq);
        be.kv_store(k, v, L.k_cache, L.v_cache, a.meta.slot_mapping);
        be.attention(q, L.k_cache, L.v_cache, a.meta, a.scale, a.attn);
        be.matmul(a.attn, *L.o, a.proj, a.mode);
        be.add_rms_norm(a.residual, a.proj, L.ffn_norm, a.eps, a.h);
        be.matmul(a.h, *L.gate_up, a.gu, a.mode);
        be.silu_mul_gate_up(a.gu, a.gate);
        be.matmul(a.gate, *L.down, a.proj, a.mode);
    }
}

void check_equal(const stack_shape& s) {
    const stack_host h = make_stack(s, 99);
    std::unique_ptr<backend> cpu = make_cpu_backend();
    stack_side op = side_of(*cpu, h), hand = side_of(*cpu, h);
    EXPECT_FALSE(cpu->has_decode_layers(op.a)) << "the CPU backend has only the composition";
    cpu->decode_layers(op.a);
    layers_by_hand(*cpu, hand.a);
    EXPECT_EQ(bytes(op.a.residual), bytes(hand.a.residual));
    EXPECT_EQ(bytes(op.a.proj), bytes(hand.a.proj));
    for (size_t il = 0; il < op.a.layers.size(); ++il) {
        EXPECT_EQ(bytes(op.a.layers[il].k_cache), bytes(hand.a.layers[il].k_cache)) << "layer " << il;
        EXPECT_EQ(bytes(op.a.layers[il].v_cache), bytes(hand.a.layers[il].v_cache)) << "layer " << il;
    }
    // and the op moved the state: a stack that changed nothing would pass the comparisons above
    EXPECT_NE(bytes(op.a.residual), bytes(h.residual));
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(decode_layers, cpu_op_is_the_layers_op_by_op) {
    check_equal({256, 4, 2, 64, 384, 2, false, 20, true});
    check_equal({256, 4, 1, 64, 256, 2, true, 3, false});  // q/k norm, first_plain off (proj added first)
}

TEST(decode_layers, bad_arguments_name_the_operand) {
    const stack_host h = make_stack({256, 4, 2, 64, 384, 2, false, 5, true}, 5);
    std::unique_ptr<backend> cpu = make_cpu_backend();
    {
        stack_side d = side_of(*cpu, h);
        d.a.residual = cpu->alloc(dtype::BF16, {1, 128});
        expect_error([&] { cpu->decode_layers(d.a); }, "residual");
    }
    {
        stack_side d = side_of(*cpu, h);
        d.a.layers[1].down = d.a.layers[1].o;  // [256, 256] where down is [256, 384]
        expect_error([&] { cpu->decode_layers(d.a); }, "layer 1's down weight is [256, 256]; expected [256, 384]");
    }
    {
        stack_side d = side_of(*cpu, h);
        d.a.meta.n_seqs = 2;
        expect_error([&] { cpu->decode_layers(d.a); }, "2 sequences");
    }
    {
        stack_side d = side_of(*cpu, h);
        d.a.n_head = 3;  // not a multiple of n_head_kv
        expect_error([&] { cpu->decode_layers(d.a); }, "multiple of n_head_kv");
    }
    {
        stack_side d = side_of(*cpu, h);
        d.a.layers.clear();
        expect_error([&] { cpu->decode_layers(d.a); }, "no layers");
    }
}

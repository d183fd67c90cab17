// The op interface the model's forward calls, written once for all backends (DESIGN.md §4).
// A backend owns its memory (alloc/upload/download) and runs ops on tensors of its own device;
// every op validates shapes/dtypes once here and then dispatches through the kernel registry
// (registry.h), so the CPU oracle and the CUDA kernels share the checks. Ops write into caller-
// allocated outputs (no allocation or host sync inside a step). Activations: f32 on the CPU
// backend (bf16 accepted by the plain kernels), bf16 on CUDA; the dtype travels with the tensor.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/arch.h"
#include "core/tensor.h"
#include "io/weights.h"

namespace tetra {

// ---- tensor views (pointer arithmetic only: valid for device memory too) --------------------
// Same memory, new shape (numel must match). Keeps the owner.
tensor tensor_reshape(const tensor& t, std::vector<int64_t> shape);
// Rows [row0, row0 + n_rows) of t (outermost dimension), as a view sharing the owner.
tensor tensor_rows(const tensor& t, int64_t row0, int64_t n_rows);

// ---- rope ------------------------------------------------------------------------------------
enum class rope_scaling_type : uint8_t { NONE, LLAMA3 };

struct rope_params {
    float theta = 10000.0f;  // rope_theta
    int n_rot = 0;           // rotated dims per head (partial rotary); 0 = head_dim
    rope_scaling_type scaling = rope_scaling_type::NONE;
    // LLAMA3 (HF rope_scaling {"rope_type": "llama3", ...}):
    float factor = 8.0f;
    float low_freq_factor = 1.0f;
    float high_freq_factor = 4.0f;
    int64_t original_max_position_embeddings = 8192;
};

// inv_freq f32 [n_rot/2], computed in f32 exactly as HF transformers does
// (_compute_default_rope_parameters / _compute_llama3_parameters). A host tensor: upload it once.
tensor rope_inv_freq(const rope_params& p, int64_t head_dim);

// ---- attention batch metadata -----------------------------------------------------------------
// One batch mixes prefill chunks and decode tokens (nano-vllm style): the query rows of sequence s
// are [cu_seqlens_q[s], cu_seqlens_q[s+1]); its keys/values are the first seq_lens_kv[s] slots of
// its block table (this step's tokens already stored by kv_store). Query token t at position p
// sees kv positions j ≤ p (and j > p - sliding_window when a window is set).
// Tensors live on the backend's device; the scalars are host-side bounds for launch sizing.
struct attn_metadata {
    int n_seqs = 0;
    int max_seqlen_q = 0;   // max over s of the query rows of s
    int max_seqlen_kv = 0;  // max over s of seq_lens_kv[s]
    int block_size = 16;    // tokens per kv block
    tensor cu_seqlens_q;    // i32 [n_seqs + 1], cu_seqlens_q[0] = 0, cu_seqlens_q[n_seqs] = n_tokens
    tensor seq_lens_kv;     // i32 [n_seqs]
    tensor positions;       // i32 [n_tokens]: position of each query token (also used by rope)
    tensor block_tables;    // i32 [n_seqs, max_blocks]: physical block ids, any order
    tensor slot_mapping;    // i32 [n_tokens]: cache slot (block * block_size + offset); < 0 = skip
};

// ---- matmul ------------------------------------------------------------------------------------
// Dense weights always run DENSE (so one mode can be passed for every linear of a model).
// NVFP4 weights: AUTO → W4A4 when the checkpoint has an input scale (quant_algo NVFP4), else W4A16;
// W4A16/W4A4 force that path (W4A4 needs the input scale); DENSE is an error.
enum class matmul_mode : uint8_t { AUTO, DENSE, W4A16, W4A4 };
const char* matmul_mode_name(matmul_mode m);

struct decode_layers_args;  // ops.h

// ---- the backend ---------------------------------------------------------------------------------
class backend {
  public:
    explicit backend(device_info dev) : dev_(std::move(dev)) {}
    virtual ~backend() = default;
    backend(const backend&) = delete;
    backend& operator=(const backend&) = delete;

    const device_info& device() const { return dev_; }

    // Memory. alloc: zero-filled tensor on this device. upload: a device copy of a host tensor
    // (the CPU backend returns the same memory, no copy: do not mutate the host tensor while the
    // result is in use). download: copies dev.nbytes() to host and waits for pending work.
    virtual tensor alloc(dtype t, std::vector<int64_t> shape) = 0;
    virtual tensor upload(const tensor& host) = 0;
    virtual void download(const tensor& dev, void* host) = 0;
    // dst = src, both on this device, same dtype and numel (asynchronous on CUDA).
    virtual void copy(const tensor& src, const tensor& dst) = 0;
    virtual void synchronize() = 0;
    // dst (on this device) = dst.nbytes() bytes at `host`, asynchronous on CUDA: `host` must stay
    // unchanged until the next synchronize()/download(). The persistent-buffer upload of a step.
    virtual void copy_from_host(const void* host, const tensor& dst) = 0;
    // Device memory: bytes free now and in total (CPU: MemAvailable and MemTotal).
    virtual void memory_info(int64_t* free_bytes, int64_t* total_bytes) = 0;
    // Graphs: capture_graph runs fn() while recording every op it enqueues (no host sync, no
    // allocation may happen inside) and returns a replayable graph; replay_graph re-issues it on
    // the same buffers. Backends without graphs (CPU) return nullptr and callers just run fn().
    virtual bool supports_graphs() const { return false; }
    virtual std::shared_ptr<void> capture_graph(const std::function<void()>& fn) {
        (void)fn;
        return nullptr;
    }
    // Runs fn (one kernel launch) and returns its device time in ms, waiting for it (CUDA: events
    // around it on the stream; CPU: wall time). Only for the op profiler below.
    virtual double time_op(const std::function<void()>& fn);
    // false when the graph is stale (memory it used was reallocated): capture again.
    virtual bool replay_graph(const std::shared_ptr<void>& graph) {
        (void)graph;
        return false;
    }
    // A linear weight ready for this backend's matmul kernels (uploaded, re-laid if the kernels
    // want it). The canonical host bytes stay the truth tests compare against. CPU: identity.
    virtual linear_weight prepare_linear(const linear_weight& host) = 0;

    // ---- ops (act = activation dtype: f32 | bf16 | f16 as the kernel accepts) --------------------
    // out[i, :] = table[ids[i], :]; ids out of range are errors (CPU) / undefined (CUDA).
    // table: [n_vocab, n_embd] bf16|f16|f32; ids: i32 [n_tokens]; out: [n_tokens, n_embd] act
    void embedding(const tensor& table, const tensor& ids, const tensor& out);
    // Same op (registry name "get_rows"): select rows, e.g. the last token of each sequence.
    // src: [n_rows, n] act; ids: i32 [m]; out: [m, n] act
    void get_rows(const tensor& src, const tensor& ids, const tensor& out);
    // out = x / sqrt(mean(x²) + eps) · w, per row of length n (out may alias x). For qk-norm,
    // reshape q to [n_tokens·n_head, head_dim].
    // x: [n_rows, n] act; w: [n] bf16|f16|f32; out: [n_rows, n] act
    void rms_norm(const tensor& x, const tensor& w, float eps, const tensor& out);
    // residual += x; out = rms_norm(residual) · w   (residual is updated in place)
    // residual: [n_rows, n] act (in/out); x: [n_rows, n] act; w: [n]; out: [n_rows, n] act
    void add_rms_norm(const tensor& residual, const tensor& x, const tensor& w, float eps,
                      const tensor& out);
    // NeoX/HF half-rotation (rotate_half) on the first n_rot = 2·inv_freq.numel() dims of every
    // head, in place: angle = positions[t] · inv_freq[i] (f32), pairs (i, i + n_rot/2).
    // q: [n_tokens, n_head, head_dim] act; k: [n_tokens, n_head_kv, head_dim] act;
    // positions: i32 [n_tokens]; inv_freq: f32 [n_rot/2] (rope_inv_freq, uploaded)
    void rope(const tensor& q, const tensor& k, const tensor& positions, const tensor& inv_freq);
    // k_cache[slot / block_size, slot % block_size] = k[t] for slot = slot_mapping[t] ≥ 0.
    // k, v: [n_tokens, n_head_kv, head_dim] act; k_cache, v_cache: [n_blocks, block_size,
    // n_head_kv, head_dim] f32|bf16; slot_mapping: i32 [n_tokens]
    void kv_store(const tensor& k, const tensor& v, const tensor& k_cache, const tensor& v_cache,
                  const tensor& slot_mapping);
    // The attention input stage of a decoder layer in one op (fewer launches): from the fused
    // projection qkv = [q heads | k heads | v heads] per token, per-head rms_norm of q and k (when
    // q_norm / k_norm are given; empty tensors: none), rope on q and k, q → q_out, k and v → the
    // caches at slot_mapping. Same result as get_rows + rms_norm + rope + kv_store. Not every
    // backend has a kernel for every shape: ask has_qkv_rope_store() and fall back to those ops.
    // qkv: [n_tokens, n_head + 2·n_head_kv, head_dim] act; q_norm, k_norm: [head_dim] or empty;
    // q_out: [n_tokens, n_head, head_dim] act; positions, inv_freq, caches, slot_mapping as above.
    void qkv_rope_store(const tensor& qkv, const tensor& q_norm, const tensor& k_norm, float eps,
                        const tensor& positions, const tensor& inv_freq, const tensor& q_out,
                        const tensor& k_cache, const tensor& v_cache, const tensor& slot_mapping);
    bool has_qkv_rope_store(const tensor& qkv, const tensor& q_norm, const tensor& k_norm,
                            const tensor& inv_freq, const tensor& q_out, const tensor& k_cache) const;
    // Paged causal attention over the batch (prefill chunks and decode together), GQA with
    // n_head % n_head_kv == 0 (query head h uses kv head h / (n_head / n_head_kv)).
    // q: [n_tokens, n_head, head_dim] act; caches as kv_store; out: [n_tokens, n_head·head_dim] act
    // scale: usually 1/sqrt(head_dim); sliding_window: 0 = none, else keys j > p - window.
    void attention(const tensor& q, const tensor& k_cache, const tensor& v_cache,
                   const attn_metadata& meta, float scale, const tensor& out,
                   int sliding_window = 0);
    // out = x · Wᵀ with f32 accumulation. W: [N, K] = w (dense bf16|f16|f32 or NVFP4).
    // W4A16: W dequantized exactly (e2m1·e4m3·scale_global). W4A4: each row of x is quantized to
    // NVFP4 per 16-block with w.input_global_quant, dequantized (code·SF/G) and multiplied
    // (reference/nvfp4-format.md §3.5: the oracle of the native FP4 path).
    // x: [M, K] act; out: [M, N] act
    void matmul(const tensor& x, const linear_weight& w, const tensor& out,
                matmul_mode mode = matmul_mode::AUTO);
    // out = silu(gate) · up.  gate, up, out: [n_rows, n_ff] act
    void silu_mul(const tensor& gate, const tensor& up, const tensor& out);
    // The same on the two halves of each row of a fused gate/up projection (one matmul over the
    // stacked [gate; up] weight): out[r, j] = silu(gate_up[r, j]) · gate_up[r, n_ff + j], each
    // element computed exactly as silu_mul computes it (no split copy needed).
    // gate_up: [n_rows, 2·n_ff] act; out: [n_rows, n_ff] act (must not overlap gate_up)
    void silu_mul_gate_up(const tensor& gate_up, const tensor& out);
    // matmul(x, gate_up, gu, mode) then silu_mul_gate_up(gu, out) as one op ("matmul_silu"): a
    // kernel may fuse the two (the CUDA W4A16 decode kernel does, without writing gu); the result is
    // the two-step result within the matmul's tolerance (bit for bit where both sum k in the same
    // order: docs/cuda-backend.md). gate_up: the stacked [gate; up] weight [2·n_ff, K]; x: [M, K] act;
    // gu: [M, 2·n_ff] act scratch; out: [M, n_ff] act (must not overlap gu or x)
    void matmul_silu(const tensor& x, const linear_weight& gate_up, const tensor& gu, const tensor& out,
                     matmul_mode mode = matmul_mode::AUTO);
    // The decoder layers of a batch-1 decode step as one op (ops.h decode_layers_args: the op, its
    // shapes and the state it leaves). has_decode_layers: whether the kernel the registry would run
    // fuses the layers (not a composition: every backend's priority-0 answer, and the CPU oracle).
    void decode_layers(const decode_layers_args& a);
    bool has_decode_layers(const decode_layers_args& a) const;
    // out = a + b (out may alias a or b).  a, b, out: same shape, act
    void add(const tensor& a, const tensor& b, const tensor& out);
    // out[r] = index of the max of x[r, :] (first on ties; a NaN counts as the max, as torch).
    // x: [n_rows, n] act; out: i32 [n_rows]
    void argmax(const tensor& x, const tensor& out);
    // Element-wise dtype conversion (f32 ↔ bf16 ↔ f16, RNE). src, out: same numel.
    void cast(const tensor& src, const tensor& out);
    // NVFP4 activation quantization (the W4A4 input, reference/nvfp4-format.md §3.5), bit-exact
    // with nvfp4_quantize_activation_row on the f32 value of every element: per 16-block
    // SF = e4m3(G·(amax/6)) saturating, codes = e2m1(x / (SF/G)) with exact f32 division.
    // x: [n_rows, n] act (n % 16 == 0); global_quant: G (finite, > 0);
    // codes: u8 [n_rows, n/2] (even element in the low nibble); scales: e4m3|u8 [n_rows, n/16]
    void quantize_nvfp4_act(const tensor& x, float global_quant, const tensor& codes, const tensor& scales);

  private:
    device_info dev_;
};

// ---- op profiler (tetra bench --profile) ---------------------------------------------------------
// While on, every op launch is timed (and waited for: only for diagnosis, never while capturing a
// graph) and accumulated per "kernel shape" key.
struct op_profile_entry {
    std::string kernel;  // "matmul_nvfp4_w4a16_sm80 [4096, 2048]" (kernel + the last operand's shape)
    int64_t calls = 0;
    double ms = 0;
};
void set_op_profiling(bool on);
std::vector<op_profile_entry> op_profile();  // by total time, largest first
void reset_op_profile();

// The CPU backend: host memory, plain f32-accumulating kernels (the oracle) plus AVX2 fast paths.
std::unique_ptr<backend> make_cpu_backend();

// The CUDA backend on device `device` (cudaMalloc'd tensors, one stream, kernels from
// src/backend/cuda/). A build without CUDA, a bad index, or a device none of the compiled images
// runs on is a tetra::error saying so.
std::unique_ptr<backend> make_cuda_backend(int device = 0);
// Number of CUDA devices visible (0 in a build without CUDA or when the driver reports none).
int cuda_device_count();

}  // namespace tetra

// server/openai_format: the response side of the OpenAI / vLLM wire format (serving.md §1.5–1.11):
// error bodies, SSE events, chunk envelopes, usage, logprobs, /v1/models. Pure functions of their
// arguments (ids and timestamps are passed in), so tests pin the exact bytes.
// Strings are dumped with invalid UTF-8 replaced by U+FFFD: formatting never throws on model text.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop.h"
#include "server/openai_request.h"

namespace tetra {

// Compact JSON as the wire carries it.
std::string dump_json(const ojson& j);

// {"error": {"message", "type", "param", "code"}} (vLLM >= 0.10.1).
ojson error_body(int status, const std::string& message, const std::optional<std::string>& param = std::nullopt);
ojson error_body(const api_error& e);

// "data: <json>\n\n" and the terminator "data: [DONE]\n\n".
std::string sse_event(const ojson& j);
std::string sse_done();

// prefix + 32 random hex digits ("chatcmpl-", "cmpl-", "chatcmpl-tool-").
std::string random_id(const std::string& prefix);

ojson usage_json(int64_t n_prompt, int64_t n_completion);

// {"id", "object", "created", "model", "choices": choices} (+ "usage" when not null).
ojson response_envelope(const std::string& id, const char* object, int64_t created, const std::string& model,
                        ojson choices, const ojson& usage = nullptr);

// Chat streaming choice: {"index", "delta", "logprobs", "finish_reason"} (+ "stop_reason" once finished).
ojson chat_chunk_choice(int index, ojson delta, const ojson& logprobs, const char* finish_reason,
                        const ojson& stop_reason = nullptr);
// Completion choice, streaming or not: {"index", "text", "logprobs", "finish_reason", "stop_reason"}.
ojson completion_choice(int index, const std::string& text, const ojson& logprobs, const char* finish_reason,
                        const ojson& stop_reason);

// stop_reason: the stop string or stop token id, null for EOS / length / abort.
ojson stop_reason_json(const stop_status& s);

// The text of one token for logprobs (the caller decodes with special tokens kept).
using token_text_fn = std::function<std::string(int32_t)>;
// Chat logprobs entries, one per token: {"token", "logprob", "bytes", "top_logprobs": [...]}.
ojson chat_logprobs_content(const std::vector<int32_t>& ids, const std::vector<sample_result>& lps,
                            const token_text_fn& text);
// Completion logprobs: {"text_offset", "token_logprobs", "tokens", "top_logprobs"}; offsets start
// at text_offset0 and advance by each token's text length in bytes.
ojson completion_logprobs(const std::vector<int32_t>& ids, const std::vector<sample_result>& lps,
                          const token_text_fn& text, int64_t text_offset0);
// Appends b's entries to a (same shapes as produced above; a null a becomes b).
void append_completion_logprobs(ojson& a, const ojson& b);

// GET /v1/models: one entry per served name.
ojson models_json(const std::vector<std::string>& names, const std::string& root, int64_t max_model_len,
                  int64_t created);

}  // namespace tetra

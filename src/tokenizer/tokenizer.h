// Hugging Face tokenizer.json loader and byte-level BPE tokenizer, bit-exact with the `tokenizers`
// library for the supported components (serving.md §2). Thread-safe: a loaded tokenizer is
// immutable except for an internal, mutex-guarded BPE cache, so encode/decode may run concurrently.
// Not supported (load fails naming the field): WordPiece/Unigram/WordLevel models, byte_fallback,
// normalizers other than NFC/Sequence, pre-tokenizers other than Sequence/Split/ByteLevel/Digits.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tetra {

struct tokenizer_impl;
class detokenizer;

// Supported tokenizer.json components:
//   model          BPE (vocab; merges as "a b" strings or [a, b] pairs; ignore_merges; unk_token)
//   added_tokens   special or not; lstrip/rstrip/single_word/normalized (HF AddedVocabulary:
//                  leftmost-longest match on the raw text first, then on the normalized text)
//   normalizer     null | NFC | Sequence of those
//   pre_tokenizer  null | Sequence | Split (Regex via PCRE2 UTF+UCP, or String; behaviours
//                  Removed/Isolated/MergedWithPrevious/MergedWithNext/Contiguous; invert) |
//                  ByteLevel (add_prefix_space, use_regex = GPT-2 regex) | Digits
//   post_processor null | ByteLevel | TemplateProcessing (single template) | Sequence of those
//   decoder        ByteLevel | Sequence of ByteLevel
class tokenizer {
public:
    // Loads tokenizer.json and, when config_path is not empty, tokenizer_config.json (bos_token,
    // eos_token, add_bos_token, add_eos_token). Throws tetra::error naming the file and field.
    static std::shared_ptr<const tokenizer> load(const std::string& tokenizer_json_path,
                                                 const std::string& config_path = "");
    // dir/tokenizer.json plus dir/tokenizer_config.json when that file exists.
    static std::shared_ptr<const tokenizer> load_dir(const std::string& dir);

    ~tokenizer();
    tokenizer(const tokenizer&) = delete;
    tokenizer& operator=(const tokenizer&) = delete;

    // text must be valid UTF-8 (else tetra::error with the byte offset). Special tokens typed in
    // the text are matched (HF split_special_tokens=false). add_special_tokens runs the
    // post-processor (e.g. Llama-3 BOS) and, when tokenizer_config asks for it and the
    // post-processor did not already add it, prepends BOS / appends EOS (LlamaTokenizerFast).
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;

    // As HF Tokenizer.decode: every token (model or added) goes through the ByteLevel decoder
    // (byte-level chars -> bytes; a token with other chars is kept as its UTF-8 text), the bytes
    // are concatenated and decoded with each invalid subpart -> U+FFFD. Unknown ids are dropped;
    // special tokens are dropped when skip_special_tokens.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

    // -1 when the token (model or added) is unknown.
    int32_t token_to_id(std::string_view token) const;
    // The token string as stored in tokenizer.json (byte-level alphabet); "" for unknown ids.
    std::string id_to_token(int32_t id) const;
    bool is_special(int32_t id) const;
    // Highest model or added token id + 1 (the model's embedding may be padded beyond it).
    int32_t n_vocab() const;
    // From tokenizer_config.json; else BOS is the TemplateProcessing's leading special token.
    // -1 when there is none.
    int32_t bos_id() const;
    int32_t eos_id() const;

    detokenizer make_detokenizer(bool skip_special_tokens) const;

private:
    friend class detokenizer;
    explicit tokenizer(std::unique_ptr<tokenizer_impl> impl);
    std::unique_ptr<tokenizer_impl> impl_;
};

// Streaming detokenizer: push ids one at a time, get back only newly completed text. Never emits
// part of a UTF-8 character: an incomplete trailing byte sequence is held until a later id
// completes it; bytes are replaced by U+FFFD only once provably invalid (or at finish()).
// The concatenation of all push() results and finish() equals tokenizer::decode(ids, skip).
// Keeps a pointer to the tokenizer, which must outlive it. Not thread-safe (one per sequence).
class detokenizer {
public:
    detokenizer(const tokenizer& tok, bool skip_special_tokens);
    std::string push(int32_t id);
    // Flushes held bytes (as U+FFFD) at end of stream; the detokenizer may be reused after.
    std::string finish();
    // Bytes currently held back (0..3 for valid streams).
    size_t n_pending() const { return pending_.size(); }

private:
    const tokenizer* tok_;
    bool skip_special_;
    std::string pending_;
};

}  // namespace tetra

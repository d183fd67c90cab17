// Internal pieces of the tokenizer (not part of the public API): PCRE2 regex wrapper, the
// pre-tokenizer steps, the BPE model with its bounded thread-safe cache, the added vocabulary.
// Text flowing between stages is valid UTF-8; byte-level mapping happens in the ByteLevel step.
#pragma once
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tetra {

// A compiled PCRE2 pattern (UTF | UCP, JIT when available). Immutable, shareable across threads.
class regex {
public:
    // where: the JSON field, for the error message when the pattern does not compile.
    regex(const std::string& pattern, bool literal, const std::string& where);
    ~regex();
    regex(const regex&) = delete;
    regex& operator=(const regex&) = delete;
    // Byte ranges [start, end) of successive non-overlapping matches in s (valid UTF-8). After an
    // empty match the search resumes one character later.
    void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

private:
    void* code_;  // pcre2_code_8*
};

enum class split_behavior { REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS };

struct pre_tokenizer_step {
    enum class kind { SPLIT, BYTE_LEVEL, DIGITS } type = kind::SPLIT;
    std::shared_ptr<const regex> re;  // SPLIT pattern; BYTE_LEVEL GPT-2 regex (use_regex); DIGITS \p{N}
    split_behavior behavior = split_behavior::ISOLATED;
    bool invert = false;
    bool add_prefix_space = false;  // BYTE_LEVEL
};

// Applies the steps in order; each step re-splits every piece produced by the previous one.
// Empty pieces are dropped (as HF PreTokenizedString::split).
void pre_tokenize(const std::vector<pre_tokenizer_step>& steps, std::string_view text,
                  std::vector<std::string>& pieces);
void split_pieces(const regex& re, split_behavior behavior, bool invert, std::string_view s,
                  std::vector<std::string>& out);

struct bpe_model {
    std::unordered_map<std::string, int32_t> vocab;
    std::vector<std::string> id_to_token;  // "" for ids not in the model vocab
    // (left id << 32 | right id) -> (rank, merged id)
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
    bool ignore_merges = false;
    int32_t unk_id = -1;
    bool fuse_unk = false;

    // Appends the ids of one pre-token (already in the byte-level alphabet when ByteLevel ran).
    void tokenize(const std::string& piece, std::vector<int32_t>& out) const;

    static constexpr size_t cache_capacity = 65536;   // entries; cleared when full
    static constexpr size_t cache_max_piece = 256;    // bytes; longer pieces are not cached
    mutable std::shared_mutex cache_mu;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

private:
    void merge_word(const std::string& piece, std::vector<int32_t>& out) const;
};

struct added_token {
    std::string content;
    int32_t id = -1;
    bool special = false, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

// A byte trie over added-token contents for leftmost-longest matching.
struct token_trie {
    struct node { std::vector<std::pair<unsigned char, int32_t>> next; int32_t token = -1; };
    std::vector<node> nodes{node{}};
    void insert(std::string_view s, int32_t token_index);
    // Longest token starting at s[pos]: (token index, length) or (-1, 0).
    std::pair<int32_t, size_t> longest_at(std::string_view s, size_t pos) const;
};

struct text_segment {
    int32_t id;  // -1: plain text to normalize / pre-tokenize
    std::string_view text;
};

struct added_vocab {
    std::vector<added_token> tokens;
    std::unordered_map<std::string, int32_t> by_content;
    std::unordered_map<int32_t, std::string> content_by_id;
    token_trie raw_trie;   // normalized == false: matched on the raw text
    token_trie norm_trie;  // normalized == true: matched on the normalized text
    // HF AddedVocabulary::find_matches over one string.
    void split(std::string_view s, const token_trie& trie, std::vector<text_segment>& out) const;
};

struct template_piece { bool is_sequence; std::vector<int32_t> ids; };

// Per-id decode information, precomputed at load.
struct id_info {
    bool known = false;  // in the model vocab or an added token
    bool special = false;
    std::string bytes;   // the token string through the ByteLevel decoder
};

struct tokenizer_impl {
    std::string path;
    bpe_model model;
    added_vocab added;
    bool nfc = false;
    std::vector<pre_tokenizer_step> pre_steps;
    bool has_template = false;
    std::vector<template_piece> template_single;
    std::vector<id_info> ids;
    int32_t bos_id = -1, eos_id = -1;
    bool add_bos = false, add_eos = false;

    void encode_text(std::string_view text, std::vector<int32_t>& out) const;
};

// Parses tokenizer.json (+ optional tokenizer_config.json) into impl. tokenizer_load.cpp.
void load_tokenizer_json(tokenizer_impl& impl, const std::string& path);
void load_tokenizer_config(tokenizer_impl& impl, const std::string& path);

}  // namespace tetra

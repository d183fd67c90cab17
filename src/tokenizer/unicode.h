// Unicode helpers for the tokenizer: UTF-8 walking, lossy UTF-8 (U+FFFD per maximal ill-formed
// subpart, as Rust's String::from_utf8_lossy), the GPT-2 byte-level alphabet, White_Space, NFC.
// Invariant: functions taking "valid" text assume utf8_valid() held; nothing here allocates tables
// at run time except the byte-level maps (built once, immutable).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tetra {

// Length of the UTF-8 sequence starting at s[i] (1..4); s must be valid UTF-8.
size_t utf8_len(unsigned char lead);
// Decodes the code point at s[i] of valid UTF-8 and advances i.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);

// Byte offset of the first ill-formed sequence, or npos when s is valid UTF-8.
size_t utf8_invalid_at(std::string_view s);
inline bool utf8_valid(std::string_view s) { return utf8_invalid_at(s) == std::string_view::npos; }

// Appends the valid text of bytes[0, n) to out, each maximal ill-formed subpart as U+FFFD.
// When `final` is false, an incomplete but so-far-valid sequence at the end is not consumed.
// Returns the number of bytes consumed (== bytes.size() when final).
size_t utf8_lossy_append(std::string& out, std::string_view bytes, bool final);

// GPT-2 byte-level alphabet: byte b <-> code point byte_to_cp(b) (printable bytes map to
// themselves, the 68 others to U+0100.. in order). cp_to_byte returns -1 outside the alphabet.
uint32_t byte_level_cp(uint8_t b);
int byte_level_byte(uint32_t cp);
// Maps every byte of s to its byte-level code point (UTF-8 encoded).
std::string byte_level_encode(std::string_view s);

// Rust char::is_whitespace (Unicode White_Space property).
bool is_white_space(uint32_t cp);

// Unicode Normalization Form C of valid UTF-8 text (data: unicode_nfc_table.cpp).
std::string nfc(std::string_view s);

// Generated tables (unicode_nfc_table.cpp).
struct nfc_decomp { uint32_t cp, first, second; };      // second == 0: singleton
struct nfc_ccc_range { uint32_t first, last, ccc; };
struct nfc_comp { uint32_t first, second, composite; };  // sorted by (first, second)
extern const nfc_decomp nfc_decomps[];
extern const size_t nfc_n_decomps;
extern const nfc_ccc_range nfc_ccc_ranges[];
extern const size_t nfc_n_ccc_ranges;
extern const nfc_comp nfc_comps[];
extern const size_t nfc_n_comps;
extern const char* const nfc_unicode_version;

}  // namespace tetra

// Unicode helpers: UTF-8 validation and lossy decoding (maximal-subpart U+FFFD, matching Rust's
// from_utf8_lossy that HF decoders use), the GPT-2 byte-level alphabet, and NFC (UAX #15:
// full canonical decomposition, canonical ordering, canonical composition) over generated tables.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace tetra {

size_t utf8_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    return 4;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
    size_t n = utf8_len(p[0]);
    uint32_t cp;
    switch (n) {
        case 1: cp = p[0]; break;
        case 2: cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu); break;
        case 3: cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); break;
        default:
            cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
                 (p[3] & 0x3Fu);
    }
    i += n;
    return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

namespace {

// For a lead byte: sequence length and the allowed range of the second byte (Unicode Table 3-7);
// len 0 marks a byte that can never start a sequence.
struct lead_info { int len; unsigned char lo, hi; };

lead_info lead_of(unsigned char b) {
    if (b < 0x80) return {1, 0, 0};
    if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

// Scans the sequence at p[i]: returns its length when complete and valid; otherwise sets
// *bad to the maximal ill-formed subpart length (>= 1), or to 0 when it is a valid but
// truncated prefix at the end of the input.
size_t scan_seq(const unsigned char* p, size_t n, size_t i, size_t* bad) {
    lead_info li = lead_of(p[i]);
    *bad = 1;
    if (li.len == 0) return 0;
    for (int j = 1; j < li.len; j++) {
        if (i + j >= n) { *bad = 0; return 0; }
        unsigned char c = p[i + j];
        unsigned char lo = j == 1 ? li.lo : 0x80, hi = j == 1 ? li.hi : 0xBF;
        if (c < lo || c > hi) { *bad = size_t(j); return 0; }
    }
    return size_t(li.len);
}

}  // namespace

size_t utf8_invalid_at(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    size_t i = 0, n = s.size(), bad;
    while (i < n) {
        if (p[i] < 0x80) { i++; continue; }
        size_t len = scan_seq(p, n, i, &bad);
        if (len == 0) return i;
        i += len;
    }
    return std::string_view::npos;
}

size_t utf8_lossy_append(std::string& out, std::string_view bytes, bool final) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    size_t i = 0, n = bytes.size(), bad;
    while (i < n) {
        if (p[i] < 0x80) { out += char(p[i]); i++; continue; }
        size_t len = scan_seq(p, n, i, &bad);
        if (len > 0) {
            out.append(bytes.data() + i, len);
            i += len;
        } else if (bad > 0) {
            out += "\xEF\xBF\xBD";
            i += bad;
        } else if (!final) {
            return i;  // hold back an incomplete sequence: more bytes may complete it
        } else {
            out += "\xEF\xBF\xBD";  // a truncated sequence at the very end is one subpart
            return n;
        }
    }
    return n;
}

namespace {

struct byte_level_maps {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 512> to_byte{};  // every byte-level code point is < 0x144
    byte_level_maps() {
        to_byte.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; b++) {
            bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            to_cp[b] = keep ? uint32_t(b) : next++;
            to_byte[to_cp[b]] = int16_t(b);
        }
    }
};

const byte_level_maps& bl_maps() {
    static const byte_level_maps m;
    return m;
}

}  // namespace

uint32_t byte_level_cp(uint8_t b) { return bl_maps().to_cp[b]; }

int byte_level_byte(uint32_t cp) { return cp < 512 ? bl_maps().to_byte[cp] : -1; }

std::string byte_level_encode(std::string_view s) {
    const auto& m = bl_maps();
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char c : s) utf8_append(out, m.to_cp[c]);
    return out;
}

bool is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ---- NFC -------------------------------------------------------------------------------------

namespace {

constexpr uint32_t hangul_s = 0xAC00, hangul_l = 0x1100, hangul_v = 0x1161, hangul_t = 0x11A7;
constexpr uint32_t hangul_l_count = 19, hangul_v_count = 21, hangul_t_count = 28;
constexpr uint32_t hangul_n_count = hangul_v_count * hangul_t_count;
constexpr uint32_t hangul_s_count = hangul_l_count * hangul_n_count;

uint32_t ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    const nfc_ccc_range* end = nfc_ccc_ranges + nfc_n_ccc_ranges;
    const nfc_ccc_range* it = std::upper_bound(
        nfc_ccc_ranges, end, cp, [](uint32_t c, const nfc_ccc_range& r) { return c < r.first; });
    if (it == nfc_ccc_ranges) return 0;
    --it;
    return cp <= it->last ? it->ccc : 0;
}

const nfc_decomp* decomp_of(uint32_t cp) {
    if (cp < 0xC0) return nullptr;
    const nfc_decomp* end = nfc_decomps + nfc_n_decomps;
    const nfc_decomp* it = std::lower_bound(
        nfc_decomps, end, cp, [](const nfc_decomp& d, uint32_t c) { return d.cp < c; });
    return it != end && it->cp == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
    if (cp >= hangul_s && cp < hangul_s + hangul_s_count) {
        uint32_t s = cp - hangul_s;
        out.push_back(hangul_l + s / hangul_n_count);
        out.push_back(hangul_v + (s % hangul_n_count) / hangul_t_count);
        if (s % hangul_t_count != 0) out.push_back(hangul_t + s % hangul_t_count);
        return;
    }
    const nfc_decomp* d = decomp_of(cp);
    if (!d) { out.push_back(cp); return; }
    decompose(d->first, out);
    if (d->second) decompose(d->second, out);
}

// Primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= hangul_l && a < hangul_l + hangul_l_count && b >= hangul_v &&
        b < hangul_v + hangul_v_count)
        return hangul_s + ((a - hangul_l) * hangul_v_count + (b - hangul_v)) * hangul_t_count;
    if (a >= hangul_s && a < hangul_s + hangul_s_count && (a - hangul_s) % hangul_t_count == 0 &&
        b > hangul_t && b < hangul_t + hangul_t_count)
        return a + (b - hangul_t);
    const nfc_comp* end = nfc_comps + nfc_n_comps;
    const nfc_comp* it = std::lower_bound(nfc_comps, end, std::make_pair(a, b),
                                          [](const nfc_comp& c, std::pair<uint32_t, uint32_t> k) {
                                              return c.first < k.first ||
                                                     (c.first == k.first && c.second < k.second);
                                          });
    return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string nfc(std::string_view s) {
    bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return (unsigned char)c < 0x80; });
    if (ascii) return std::string(s);

    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t i = 0; i < s.size();) decompose(utf8_next(s, i), cps);

    // Canonical ordering: stable sort of each run of non-starters by combining class.
    std::vector<uint32_t> cls(cps.size());
    for (size_t i = 0; i < cps.size(); i++) cls[i] = ccc_of(cps[i]);
    for (size_t i = 0; i < cps.size();) {
        if (cls[i] == 0) { i++; continue; }
        size_t j = i;
        while (j < cps.size() && cls[j] != 0) j++;
        for (size_t a = i + 1; a < j; a++)  // insertion sort: runs are short, must be stable
            for (size_t b = a; b > i && cls[b - 1] > cls[b]; b--) {
                std::swap(cls[b - 1], cls[b]);
                std::swap(cps[b - 1], cps[b]);
            }
        i = j;
    }

    // Canonical composition: a character joins the last starter unless blocked by an
    // intervening character of class 0 or of class >= its own.
    std::vector<uint32_t> out;
    out.reserve(cps.size());
    size_t starter_pos = 0;
    int last_class = -1;  // -1: no starter seen yet
    for (size_t i = 0; i < cps.size(); i++) {
        uint32_t c = cps[i];
        int ch_class = int(cls[i]);
        if (last_class >= 0 && !out.empty()) {
            bool adjacent_or_unblocked = last_class == 0 ? out.size() - 1 == starter_pos
                                                          : last_class < ch_class;
            uint32_t comp = adjacent_or_unblocked ? compose(out[starter_pos], c) : 0;
            if (comp) { out[starter_pos] = comp; continue; }
        }
        if (ch_class == 0) {
            starter_pos = out.size();
            last_class = 0;
        } else if (last_class >= 0) {
            last_class = ch_class;
        }
        out.push_back(c);
    }
    std::string r;
    r.reserve(s.size());
    for (uint32_t c : out) utf8_append(r, c);
    return r;
}

}  // namespace tetra

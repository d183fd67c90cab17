// Module-name exclusion matching for quantized checkpoints (docs/formats.md "Exclusions").
// Names are HF module names without ".weight" ("model.layers.3.mlp.gate"). Two syntaxes:
//   MODELOPT (exclude_modules / ignore with quant_method modelopt, and `tetra quantize --exclude`):
//     exact name, dot-prefix (pattern "a.b" covers "a.b.c"), or fnmatch (`*` `?` `[..]`, `*` crosses
//     dots), so "name*" covers "name", "name.*" and also "name_x" (ModelOpt's own reading; its
//     exporter only writes "name*" when no quantized module starts with "name"). STRICT matching
//     applies vLLM's rewrite instead: "name*" (no '.' before the '*') means only "name" and "name.*".
//     The loader rejects a quantized module only on a STRICT match, and accepts a dense one on a
//     BROAD match, so the two readings never turn a well-formed checkpoint into an error.
//   COMPRESSED_TENSORS (ignore): exact name, or "re:<regex>" matched from the start of the name
//     (Python re.match: anchored at the start, not at the end), regex in ECMAScript syntax.
// Both syntaxes accept "re:" patterns; both also try the vLLM fused name (q/k/v_proj → qkv_proj,
// gate/up_proj → gate_up_proj) and the name without a leading "language_model." segment.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tetra {

enum class exclude_syntax : uint8_t { MODELOPT, COMPRESSED_TENSORS };

// Python fnmatch.fnmatchcase semantics: `*` any run (incl. '.'), `?` one char, `[abc]`, `[!abc]`,
// `[a-z]`; an unclosed '[' is a literal.
bool fnmatch_case(const std::string& pattern, const std::string& name);

class exclude_matcher {
  public:
    exclude_matcher() = default;
    // Throws tetra::error naming the pattern if a "re:" pattern does not compile.
    exclude_matcher(std::vector<std::string> patterns, exclude_syntax syntax);
    // The first pattern matching `module` (or an alias of it), or nullptr. `strict`: see above.
    const std::string* match(const std::string& module, bool strict = false) const;
    bool matches(const std::string& module, bool strict = false) const { return match(module, strict) != nullptr; }
    const std::vector<std::string>& patterns() const { return patterns_; }

  private:
    struct compiled;
    std::vector<std::string> patterns_;
    exclude_syntax syntax_ = exclude_syntax::MODELOPT;
    std::shared_ptr<const compiled> re_;  // regexes for the "re:" patterns, by pattern index
    bool match_one(size_t i, const std::string& name, bool strict) const;
};

// Names under which a module may be listed: itself, its vLLM fused name, and both again without a
// leading "language_model." segment (vLLM does the same for multimodal wrappers).
std::vector<std::string> exclude_aliases(const std::string& module);

}  // namespace tetra

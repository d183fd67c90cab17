// Recursive-descent parser for the Jinja subset; grammar and precedence follow jinja2/parser.py
// (condexpr > or > and > not > compare > + - > ~ > * / // % > ** > unary > postfix/filters/tests).
// Unknown tags are reported at parse time; unknown filters/tests too, except inside if-statements
// and inline if-expressions, where jinja2 (3.x "soft frames") defers the error to run time.
#include <set>

#include "chat/jinja_ast.h"

namespace tetra {

namespace {

const std::set<std::string> k_stmt_ends = {"endif", "elif", "else", "endfor", "endset", "endmacro",
                                           "endcall", "endfilter", "endgeneration"};

// Nesting limit for expressions and blocks: keeps hostile templates from overflowing the stack
// (parser and evaluator recurse per level).
constexpr int k_max_nesting = 200;

struct parser {
    const jsource& src;
    std::vector<jtoken> toks;
    size_t i = 0;
    int depth = 0;

    struct nest_guard {
        parser& p;
        explicit nest_guard(parser& pp) : p(pp) {
            if (++p.depth > k_max_nesting) p.fail("template nesting too deep (more than 200 levels)");
        }
        ~nest_guard() { --p.depth; }
    };

    const jtoken& cur() const { return toks[i]; }
    const jtoken& peek(size_t n = 1) const { return toks[std::min(i + n, toks.size() - 1)]; }
    bool is_op(const char* op) const { return cur().type == jtok::OP && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == jtok::NAME && cur().text == n; }

    [[noreturn]] void fail(const std::string& msg) const { jinja_error_at(src, cur().pos, msg); }
    [[noreturn]] void fail_at(size_t pos, const std::string& msg) const { jinja_error_at(src, pos, msg); }

    std::string describe(const jtoken& t) const {
        switch (t.type) {
            case jtok::VAR_END: return "end of print statement";
            case jtok::BLOCK_END: return "end of statement block";
            case jtok::END: return "end of template";
            case jtok::TEXT: return "template data";
            case jtok::STRING: return "string";
            case jtok::INT: return "integer";
            case jtok::FLOAT: return "float";
            default: return t.text;
        }
    }
    void expect_op(const char* op) {
        if (!is_op(op)) fail(std::string("expected token '") + op + "', got '" + describe(cur()) + "'");
        ++i;
    }
    void expect_block_end() {
        if (cur().type != jtok::BLOCK_END)
            fail("expected token 'end of statement block', got '" + describe(cur()) + "'");
        ++i;
    }
    std::string expect_name() {
        if (cur().type != jtok::NAME) fail("expected name, got '" + describe(cur()) + "'");
        return toks[i++].text;
    }

    static jexpr_ptr node(jexpr_kind k, size_t pos) {
        auto e = std::make_unique<jexpr>();
        e->kind = k;
        e->pos = pos;
        return e;
    }

    // ---- expressions -------------------------------------------------------------------

    jexpr_ptr parse_expression(bool with_condexpr = true) {
        return with_condexpr ? parse_condexpr() : parse_or();
    }

    jexpr_ptr parse_condexpr() {
        jexpr_ptr e = parse_or();
        while (is_name("if")) {
            size_t pos = cur().pos;
            ++i;
            jexpr_ptr c = parse_or();
            jexpr_ptr other;
            if (is_name("else")) { ++i; other = parse_condexpr(); }
            jexpr_ptr n = node(jexpr_kind::COND, pos);
            n->args.push_back(std::move(e));
            n->args.push_back(std::move(c));
            n->args.push_back(std::move(other));
            e = std::move(n);
        }
        return e;
    }

    jexpr_ptr binary(jexpr_kind k, size_t pos, jexpr_ptr a, jexpr_ptr b, std::string op = "") {
        jexpr_ptr n = node(k, pos);
        n->name = std::move(op);
        n->args.push_back(std::move(a));
        n->args.push_back(std::move(b));
        return n;
    }

    jexpr_ptr parse_or() {
        jexpr_ptr e = parse_and();
        while (is_name("or")) {
            size_t pos = toks[i++].pos;
            e = binary(jexpr_kind::OR, pos, std::move(e), parse_and());
        }
        return e;
    }
    jexpr_ptr parse_and() {
        jexpr_ptr e = parse_not();
        while (is_name("and")) {
            size_t pos = toks[i++].pos;
            e = binary(jexpr_kind::AND, pos, std::move(e), parse_not());
        }
        return e;
    }
    jexpr_ptr parse_not() {
        if (is_name("not")) {
            jexpr_ptr n = node(jexpr_kind::NOT, toks[i++].pos);
            n->args.push_back(parse_not());
            return n;
        }
        return parse_compare();
    }
    jexpr_ptr parse_compare() {
        size_t pos = cur().pos;
        jexpr_ptr first = parse_math1();
        jexpr_ptr n;
        static const std::pair<const char*, const char*> cmp[] = {
            {"==", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"<=", "lteq"}, {">", "gt"}, {">=", "gteq"}};
        while (true) {
            std::string op;
            if (cur().type == jtok::OP)
                for (auto& c : cmp)
                    if (cur().text == c.first) op = c.second;
            if (!op.empty()) ++i;
            else if (is_name("in")) { op = "in"; ++i; }
            else if (is_name("not") && peek().type == jtok::NAME && peek().text == "in") { op = "notin"; i += 2; }
            else break;
            if (!n) {
                n = node(jexpr_kind::COMPARE, pos);
                n->args.push_back(std::move(first));
            }
            n->ops.push_back(op);
            n->args.push_back(parse_math1());
        }
        return n ? std::move(n) : std::move(first);
    }
    jexpr_ptr parse_math1() {
        jexpr_ptr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            std::string op = cur().text;
            size_t pos = toks[i++].pos;
            e = binary(jexpr_kind::BINARY, pos, std::move(e), parse_concat(), op);
        }
        return e;
    }
    jexpr_ptr parse_concat() {
        jexpr_ptr e = parse_math2();
        if (!is_op("~")) return e;
        jexpr_ptr n = node(jexpr_kind::CONCAT, cur().pos);
        n->args.push_back(std::move(e));
        while (is_op("~")) {
            ++i;
            n->args.push_back(parse_math2());
        }
        return n;
    }
    jexpr_ptr parse_math2() {
        jexpr_ptr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            std::string op = cur().text;
            size_t pos = toks[i++].pos;
            e = binary(jexpr_kind::BINARY, pos, std::move(e), parse_pow(), op);
        }
        return e;
    }
    jexpr_ptr parse_pow() {
        jexpr_ptr e = parse_unary();
        while (is_op("**")) {
            size_t pos = toks[i++].pos;
            e = binary(jexpr_kind::BINARY, pos, std::move(e), parse_unary(), "**");
        }
        return e;
    }
    jexpr_ptr parse_unary(bool with_filter = true) {
        nest_guard guard(*this);
        jexpr_ptr e;
        if (is_op("-") || is_op("+")) {
            jexpr_kind k = is_op("-") ? jexpr_kind::NEG : jexpr_kind::POS;
            e = node(k, toks[i++].pos);
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    jexpr_ptr parse_primary(bool with_namespace = false) {
        const jtoken& t = cur();
        size_t pos = t.pos;
        if (t.type == jtok::NAME) {
            ++i;
            jexpr_ptr n = node(jexpr_kind::CONST, pos);
            if (t.text == "true" || t.text == "True") n->value = jvalue::boolean(true);
            else if (t.text == "false" || t.text == "False") n->value = jvalue::boolean(false);
            else if (t.text == "none" || t.text == "None") n->value = jvalue::none();
            else if (with_namespace && is_op(".")) {
                ++i;
                n->kind = jexpr_kind::NSREF;
                n->name = t.text;
                n->attr = expect_name();
            } else {
                n->kind = jexpr_kind::NAME;
                n->name = t.text;
            }
            return n;
        }
        if (t.type == jtok::STRING) {
            std::string s;
            while (cur().type == jtok::STRING) s += toks[i++].text;
            jexpr_ptr n = node(jexpr_kind::CONST, pos);
            n->value = jvalue::string(std::move(s));
            return n;
        }
        if (t.type == jtok::INT || t.type == jtok::FLOAT) {
            jexpr_ptr n = node(jexpr_kind::CONST, pos);
            n->value = t.type == jtok::INT ? jvalue::integer(t.ival) : jvalue::floating(t.fval);
            ++i;
            return n;
        }
        if (is_op("(")) {
            ++i;
            jexpr_ptr n = parse_tuple(false, true, {}, true);
            expect_op(")");
            return n;
        }
        if (is_op("[")) {
            ++i;
            jexpr_ptr n = node(jexpr_kind::LIST, pos);
            while (!is_op("]")) {
                if (!n->args.empty()) expect_op(",");
                if (is_op("]")) break;
                n->args.push_back(parse_expression());
            }
            expect_op("]");
            return n;
        }
        if (is_op("{")) {
            ++i;
            jexpr_ptr n = node(jexpr_kind::DICT, pos);
            while (!is_op("}")) {
                if (!n->args.empty()) expect_op(",");
                if (is_op("}")) break;
                n->args.push_back(parse_expression());
                expect_op(":");
                n->args.push_back(parse_expression());
            }
            expect_op("}");
            return n;
        }
        fail("unexpected '" + describe(t) + "'");
    }

    // Comma-separated expressions; a tuple when a comma occurs (jinja2 parse_tuple).
    jexpr_ptr parse_tuple(bool simplified, bool with_condexpr, const std::set<std::string>& extra_end,
                          bool explicit_parens, bool with_namespace = false) {
        size_t pos = cur().pos;
        std::vector<jexpr_ptr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            const jtoken& t = cur();
            if (t.type == jtok::VAR_END || t.type == jtok::BLOCK_END || is_op(")") ||
                (t.type == jtok::NAME && extra_end.count(t.text)))
                break;
            if (simplified) items.push_back(parse_primary(with_namespace));
            else items.push_back(parse_expression(with_condexpr));
            if (is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) fail("expected an expression, got '" + describe(cur()) + "'");
        }
        jexpr_ptr n = node(jexpr_kind::TUPLE, pos);
        n->args = std::move(items);
        return n;
    }

    jexpr_ptr parse_postfix(jexpr_ptr e) {
        while (true) {
            if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
            else if (is_op("(")) e = parse_call(std::move(e));
            else return e;
        }
    }

    jexpr_ptr parse_filter_expr(jexpr_ptr e) {
        while (true) {
            if (is_op("|")) e = parse_filter(std::move(e));
            else if (is_name("is")) e = parse_test(std::move(e));
            else if (is_op("(")) e = parse_call(std::move(e));
            else return e;
        }
    }

    jexpr_ptr parse_subscript(jexpr_ptr e) {
        const jtoken& t = toks[i++];
        if (t.text == ".") {
            if (cur().type == jtok::NAME) {
                jexpr_ptr n = node(jexpr_kind::ATTR, cur().pos);
                n->name = toks[i++].text;
                n->args.push_back(std::move(e));
                return n;
            }
            if (cur().type != jtok::INT) fail("expected name or number");
            jexpr_ptr key = node(jexpr_kind::CONST, cur().pos);
            key->value = jvalue::integer(toks[i++].ival);
            jexpr_ptr n = node(jexpr_kind::ITEM, key->pos);
            n->args.push_back(std::move(e));
            n->args.push_back(std::move(key));
            return n;
        }
        size_t pos = t.pos;
        jexpr_ptr start, stop, step;
        if (!is_op(":")) {
            start = parse_expression();
            if (!is_op(":")) {
                if (is_op(",")) fail("tuple subscripts are not supported");
                expect_op("]");
                jexpr_ptr n = node(jexpr_kind::ITEM, pos);
                n->args.push_back(std::move(e));
                n->args.push_back(std::move(start));
                return n;
            }
        }
        expect_op(":");
        if (!is_op("]") && !is_op(":")) stop = parse_expression();
        if (is_op(":")) {
            ++i;
            if (!is_op("]")) step = parse_expression();
        }
        expect_op("]");
        jexpr_ptr n = node(jexpr_kind::SLICE, pos);
        n->args.push_back(std::move(e));
        n->args.push_back(std::move(start));
        n->args.push_back(std::move(stop));
        n->args.push_back(std::move(step));
        return n;
    }

    void parse_call_args(jexpr& n) {
        expect_op("(");
        bool first = true;
        while (!is_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (is_op(")")) break;
            if (is_op("*") || is_op("**")) fail("*args/**kwargs in calls are not supported");
            if (cur().type == jtok::NAME && peek().type == jtok::OP && peek().text == "=") {
                std::string key = toks[i].text;
                i += 2;
                n.kwargs.emplace_back(key, parse_expression());
            } else {
                if (!n.kwargs.empty()) fail("positional argument follows keyword argument");
                n.args.push_back(parse_expression());
            }
        }
        expect_op(")");
    }

    jexpr_ptr parse_call(jexpr_ptr e) {
        jexpr_ptr n = node(jexpr_kind::CALL, e->pos);
        n->args.push_back(std::move(e));
        parse_call_args(*n);
        return n;
    }

    jexpr_ptr parse_filter(jexpr_ptr e, bool start_inline = false) {
        if (!start_inline) expect_op("|");
        size_t pos = cur().pos;
        std::string name = expect_name();
        while (is_op(".")) { ++i; name += "." + expect_name(); }
        jexpr_ptr n = node(jexpr_kind::FILTER, pos);
        n->name = name;
        n->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*n);
        return n;
    }

    jexpr_ptr parse_test(jexpr_ptr e) {
        ++i;  // 'is'
        bool negated = false;
        if (is_name("not")) { negated = true; ++i; }
        size_t pos = cur().pos;
        std::string name = expect_name();
        while (is_op(".")) { ++i; name += "." + expect_name(); }
        jexpr_ptr n = node(jexpr_kind::TEST, pos);
        n->name = name;
        n->negated = negated;
        n->args.push_back(std::move(e));
        const jtoken& t = cur();
        if (is_op("(")) {
            parse_call_args(*n);
        } else if ((t.type == jtok::NAME || t.type == jtok::STRING || t.type == jtok::INT ||
                    t.type == jtok::FLOAT || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail("You cannot chain multiple tests with is");
            n->args.push_back(parse_postfix(parse_primary()));
        }
        return n;
    }

    // ---- statements --------------------------------------------------------------------

    static std::string closer(const std::set<std::string>& ends) {
        for (auto& e : ends)
            if (e.compare(0, 3, "end") == 0) return e;
        return *ends.begin();
    }

    jbody parse_body(const std::set<std::string>& ends) {
        jbody body;
        while (true) {
            const jtoken& t = cur();
            if (t.type == jtok::END) {
                if (!ends.empty()) fail("unexpected end of template, expected '" + closer(ends) + "'");
                return body;
            }
            if (t.type == jtok::TEXT) {
                auto s = std::make_unique<jstmt>();
                s->kind = jstmt_kind::TEXT;
                s->pos = t.pos;
                s->text = t.text;
                body.push_back(std::move(s));
                ++i;
            } else if (t.type == jtok::VAR_BEGIN) {
                auto s = std::make_unique<jstmt>();
                s->kind = jstmt_kind::OUTPUT;
                s->pos = t.pos;
                ++i;
                s->expr = parse_tuple(false, true, {}, false);
                if (cur().type != jtok::VAR_END)
                    fail("expected token 'end of print statement', got '" + describe(cur()) + "'");
                ++i;
                body.push_back(std::move(s));
            } else if (t.type == jtok::BLOCK_BEGIN) {
                const jtoken& name = peek();
                if (name.type != jtok::NAME) fail_at(name.pos, "tag name expected");
                if (ends.count(name.text)) { ++i; return body; }  // caller consumes the name
                if (k_stmt_ends.count(name.text))
                    fail_at(name.pos, "unexpected tag '" + name.text + "'" +
                                          (ends.empty() ? "" : ", expected '" + closer(ends) + "'"));
                ++i;
                body.push_back(parse_statement());
            } else {
                fail("unexpected '" + describe(t) + "'");
            }
        }
    }

    std::unique_ptr<jstmt> make_stmt(jstmt_kind k, size_t pos) {
        auto s = std::make_unique<jstmt>();
        s->kind = k;
        s->pos = pos;
        return s;
    }

    std::unique_ptr<jstmt> parse_statement() {
        nest_guard guard(*this);
        size_t pos = cur().pos;
        std::string tag = toks[i++].text;
        if (tag == "if") return parse_if(pos);
        if (tag == "for") return parse_for(pos);
        if (tag == "set") return parse_set(pos);
        if (tag == "macro") return parse_macro(pos);
        if (tag == "call") return parse_call_block(pos);
        if (tag == "filter") {
            auto s = make_stmt(jstmt_kind::FILTER_BLOCK, pos);
            s->expr = parse_block_filters(pos);
            expect_block_end();
            s->body = parse_body({"endfilter"});
            ++i;
            expect_block_end();
            return s;
        }
        if (tag == "break" || tag == "continue") {
            expect_block_end();
            return make_stmt(tag == "break" ? jstmt_kind::BREAK : jstmt_kind::CONTINUE, pos);
        }
        if (tag == "generation") {  // transformers' AssistantTracker: renders its body as is
            auto s = make_stmt(jstmt_kind::SCOPE, pos);
            expect_block_end();
            s->body = parse_body({"endgeneration"});
            ++i;
            expect_block_end();
            return s;
        }
        fail_at(pos, "unknown tag '" + tag + "'");
    }

    // `name(args) | name2 ...` applied to the block body variable.
    jexpr_ptr parse_block_filters(size_t pos) {
        jexpr_ptr e = node(jexpr_kind::NAME, pos);
        e->name = jinja_block_var();
        e = parse_filter(std::move(e), true);
        while (is_op("|")) e = parse_filter(std::move(e));
        return e;
    }

    std::unique_ptr<jstmt> parse_if(size_t pos) {
        auto s = make_stmt(jstmt_kind::IF, pos);
        jexpr_ptr c = parse_tuple(false, false, {}, false);
        expect_block_end();
        while (true) {
            jbody b = parse_body({"elif", "else", "endif"});
            s->branches.emplace_back(std::move(c), std::move(b));
            std::string tag = toks[i++].text;
            if (tag == "elif") {
                c = parse_tuple(false, false, {}, false);
                expect_block_end();
            } else if (tag == "else") {
                expect_block_end();
                s->branches.emplace_back(nullptr, parse_body({"endif"}));
                ++i;
                expect_block_end();
                return s;
            } else {
                expect_block_end();
                return s;
            }
        }
    }

    std::unique_ptr<jstmt> parse_for(size_t pos) {
        auto s = make_stmt(jstmt_kind::FOR, pos);
        s->target = parse_tuple(true, true, {"in"}, false);
        if (!is_name("in")) fail("expected token 'in', got '" + describe(cur()) + "'");
        ++i;
        s->expr = parse_tuple(false, false, {"recursive"}, false);
        if (is_name("if")) { ++i; s->cond = parse_expression(); }
        if (is_name("recursive")) fail("recursive for loops are not supported");
        expect_block_end();
        s->body = parse_body({"endfor", "else"});
        if (toks[i++].text == "else") {
            expect_block_end();
            s->else_body = parse_body({"endfor"});
            ++i;
        }
        expect_block_end();
        return s;
    }

    std::unique_ptr<jstmt> parse_set(size_t pos) {
        jexpr_ptr target = parse_tuple(true, true, {}, false, true);
        if (is_op("=")) {
            ++i;
            auto s = make_stmt(jstmt_kind::SET, pos);
            s->target = std::move(target);
            s->expr = parse_tuple(false, true, {}, false);
            expect_block_end();
            return s;
        }
        auto s = make_stmt(jstmt_kind::SET_BLOCK, pos);
        if (target->kind != jexpr_kind::NAME && target->kind != jexpr_kind::NSREF)
            fail_at(target->pos, "block set needs a single name");
        s->target = std::move(target);
        if (is_op("|")) {
            ++i;
            s->expr = parse_block_filters(cur().pos);
        }
        expect_block_end();
        s->body = parse_body({"endset"});
        ++i;
        expect_block_end();
        return s;
    }

    void parse_params(jstmt& s) {
        expect_op("(");
        while (!is_op(")")) {
            if (!s.params.empty()) expect_op(",");
            std::string p = expect_name();
            jexpr_ptr def;
            if (is_op("=")) { ++i; def = parse_expression(); }
            else if (!s.params.empty() && s.params.back().second)
                fail("non-default argument follows default argument");
            s.params.emplace_back(p, std::move(def));
        }
        expect_op(")");
    }

    std::unique_ptr<jstmt> parse_macro(size_t pos) {
        auto s = make_stmt(jstmt_kind::MACRO, pos);
        s->name = expect_name();
        parse_params(*s);
        expect_block_end();
        s->body = parse_body({"endmacro"});
        ++i;
        expect_block_end();
        return s;
    }

    std::unique_ptr<jstmt> parse_call_block(size_t pos) {
        auto s = make_stmt(jstmt_kind::CALL_BLOCK, pos);
        if (is_op("(")) parse_params(*s);
        s->expr = parse_expression();
        if (s->expr->kind != jexpr_kind::CALL) fail_at(s->expr->pos, "expected call");
        expect_block_end();
        s->body = parse_body({"endcall"});
        ++i;
        expect_block_end();
        return s;
    }
};

// jinja2's compiler checks filter/test names unless the frame is "soft": the test and bodies of
// an if-statement and all parts of an inline if-expression (loops and macros start hard again).
void check_names(const jsource& src, const jexpr* e, bool soft) {
    if (!e) return;
    bool child_soft = soft || e->kind == jexpr_kind::COND;
    if (!soft && e->kind == jexpr_kind::FILTER && !jinja_has_filter(e->name))
        jinja_error_at(src, e->pos, "unknown filter '" + e->name + "'");
    if (!soft && e->kind == jexpr_kind::TEST && !jinja_has_test(e->name))
        jinja_error_at(src, e->pos, "unknown test '" + e->name + "'");
    for (auto& a : e->args) check_names(src, a.get(), child_soft);
    for (auto& kw : e->kwargs) check_names(src, kw.second.get(), child_soft);
}

void check_names(const jsource& src, const jbody& body, bool soft) {
    for (auto& s : body) {
        check_names(src, s->expr.get(), soft);
        check_names(src, s->target.get(), soft);
        for (auto& p : s->params) check_names(src, p.second.get(), false);
        if (s->kind == jstmt_kind::IF) {
            for (auto& br : s->branches) {
                check_names(src, br.first.get(), true);
                check_names(src, br.second, true);
            }
            continue;
        }
        check_names(src, s->cond.get(), false);
        check_names(src, s->body, false);
        check_names(src, s->else_body, false);
    }
}

}  // namespace

jbody jinja_parse(const jsource& src) {
    parser p{src, jinja_lex(src)};
    jbody body = p.parse_body({});
    check_names(src, body, false);
    return body;
}

}  // namespace tetra

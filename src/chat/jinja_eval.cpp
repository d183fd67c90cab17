// Tree-walking evaluator: scopes as in jinja2 (a for-loop iteration, macro call and block set get a
// fresh child scope; if does not), loop.*, macros with closures, call blocks, break/continue, and
// the transformers globals. Runtime failures become located errors at the innermost node.
#include <ctime>
#include <unordered_map>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "core/error.h"

namespace tetra {

struct jbody_holder {
    jsource src;
    jbody body;
};

namespace {

struct frame {
    std::unordered_map<std::string, jvalue> vars;
    std::shared_ptr<frame> parent;
};
using frame_ptr = std::shared_ptr<frame>;

frame_ptr child(const frame_ptr& parent) {
    auto f = std::make_shared<frame>();
    f->parent = parent;
    return f;
}

constexpr int k_max_call_depth = 256;

struct renderer {
    const jsource& src;
    const jinja_render_options& opts;
    std::string* out = nullptr;
    enum class ctl { NONE, BREAK, CONTINUE } control = ctl::NONE;
    int depth = 0;
    // Macro closures reference their defining scope, which holds the macro: a cycle that is
    // broken when the render ends.
    std::vector<frame_ptr> closures;

    ~renderer() {
        for (auto& f : closures) f->vars.clear();
    }

    jvalue lookup(const frame_ptr& f, const std::string& name) const {
        for (frame* p = f.get(); p; p = p->parent.get()) {
            auto it = p->vars.find(name);
            if (it != p->vars.end()) return it->second;
        }
        return jvalue::undefined("'" + name + "' is undefined");
    }

    jvalue eval(const jexpr& e, const frame_ptr& f) {
        try {
            return eval_inner(e, f);
        } catch (const jinja_fail& fail) {
            jinja_error_at(src, e.pos, fail.msg);
        }
    }

    jcall eval_args(const jexpr& e, const frame_ptr& f) {
        jcall c;
        for (size_t k = 1; k < e.args.size(); ++k) c.args.push_back(eval(*e.args[k], f));
        for (auto& kw : e.kwargs) c.kwargs.emplace_back(kw.first, eval(*kw.second, f));
        return c;
    }

    jvalue eval_inner(const jexpr& e, const frame_ptr& f);
    bool compare(const std::string& op, const jvalue& a, const jvalue& b);
    jvalue call(const jvalue& callee, jcall& c);

    void exec(const jbody& body, const frame_ptr& f);
    void exec_stmt(const jstmt& s, const frame_ptr& f);
    void exec_for(const jstmt& s, const frame_ptr& f);
    void assign(const jexpr& target, const jvalue& v, const frame_ptr& f);
    std::string capture(const jbody& body, const frame_ptr& f);
    jvalue make_macro(const jstmt& s, const frame_ptr& f, const std::string& name);
};

jvalue renderer::eval_inner(const jexpr& e, const frame_ptr& f) {
    switch (e.kind) {
        case jexpr_kind::CONST: return e.value;
        case jexpr_kind::NAME: return lookup(f, e.name);
        case jexpr_kind::NSREF: return jinja_getattr(lookup(f, e.name), e.attr);
        case jexpr_kind::LIST: case jexpr_kind::TUPLE: {
            jlist items;
            for (auto& a : e.args) items.push_back(eval(*a, f));
            return e.kind == jexpr_kind::LIST ? jvalue::make_list(std::move(items))
                                              : jvalue::make_tuple(std::move(items));
        }
        case jexpr_kind::DICT: {
            jvalue d = jvalue::make_dict();
            for (size_t k = 0; k + 1 < e.args.size(); k += 2)
                d.dict->set(eval(*e.args[k], f), eval(*e.args[k + 1], f));
            return d;
        }
        case jexpr_kind::ATTR: {
            jvalue obj = eval(*e.args[0], f);
            jinja_check_defined(obj);
            return jinja_getattr(obj, e.name);
        }
        case jexpr_kind::ITEM: {
            jvalue obj = eval(*e.args[0], f);
            jvalue key = eval(*e.args[1], f);
            jinja_check_defined(obj);
            return jinja_getitem(obj, key);
        }
        case jexpr_kind::SLICE: {
            jvalue obj = eval(*e.args[0], f);
            jvalue part[3];
            for (int k = 0; k < 3; ++k)
                part[k] = e.args[k + 1] ? eval(*e.args[k + 1], f) : jvalue::none();
            jinja_check_defined(obj);
            return jinja_slice(obj, part[0], part[1], part[2]);
        }
        case jexpr_kind::CALL: {
            jvalue callee = eval(*e.args[0], f);
            jcall c = eval_args(e, f);
            return call(callee, c);
        }
        case jexpr_kind::FILTER: {
            jvalue subject = eval(*e.args[0], f);
            jcall c = eval_args(e, f);
            return jinja_filter(e.name, subject, c);
        }
        case jexpr_kind::TEST: {
            jvalue subject = eval(*e.args[0], f);
            jcall c = eval_args(e, f);
            return jvalue::boolean(jinja_test(e.name, subject, c) != e.negated);
        }
        case jexpr_kind::NEG: case jexpr_kind::POS: {
            jvalue v = eval(*e.args[0], f);
            jinja_check_defined(v);
            if (e.kind == jexpr_kind::POS && v.is_number()) return v;
            if (v.kind == jkind::INT) return jvalue::integer(-v.i);
            if (v.kind == jkind::BOOL) return jvalue::integer(-(int64_t)v.b);
            if (v.kind == jkind::FLOAT) return jvalue::floating(-v.f);
            jinja_throw("bad operand type for unary " + std::string(e.kind == jexpr_kind::NEG ? "-" : "+") +
                        ": '" + v.type_name() + "'");
        }
        case jexpr_kind::BINARY:
            return jinja_binary(e.name, eval(*e.args[0], f), eval(*e.args[1], f));
        case jexpr_kind::COMPARE: {
            jvalue left = eval(*e.args[0], f);
            for (size_t k = 0; k < e.ops.size(); ++k) {
                jvalue right = eval(*e.args[k + 1], f);
                if (!compare(e.ops[k], left, right)) return jvalue::boolean(false);
                left = right;
            }
            return jvalue::boolean(true);
        }
        case jexpr_kind::AND: {
            jvalue a = eval(*e.args[0], f);
            return a.truthy() ? eval(*e.args[1], f) : a;
        }
        case jexpr_kind::OR: {
            jvalue a = eval(*e.args[0], f);
            return a.truthy() ? a : eval(*e.args[1], f);
        }
        case jexpr_kind::NOT: return jvalue::boolean(!eval(*e.args[0], f).truthy());
        case jexpr_kind::CONCAT: {
            std::string s;
            for (auto& a : e.args) s += eval(*a, f).str();
            return jvalue::string(std::move(s));
        }
        case jexpr_kind::COND: {
            if (eval(*e.args[1], f).truthy()) return eval(*e.args[0], f);
            if (e.args[2]) return eval(*e.args[2], f);
            return jvalue::undefined("the inline if-expression evaluated to false and no else "
                                     "section was defined");
        }
    }
    return jvalue::undefined("");
}

bool renderer::compare(const std::string& op, const jvalue& a, const jvalue& b) {
    if (op == "eq") return py_equal(a, b);
    if (op == "ne") return !py_equal(a, b);
    if (op == "in") return jinja_contains(b, a);
    if (op == "notin") return !jinja_contains(b, a);
    int c = py_compare(a, b);
    if (op == "lt") return c < 0;
    if (op == "lteq") return c <= 0;
    if (op == "gt") return c > 0;
    return c >= 0;
}

jvalue renderer::call(const jvalue& callee, jcall& c) {
    jinja_check_defined(callee);
    if (callee.kind != jkind::CALLABLE) jinja_throw("'" + callee.type_name() + "' object is not callable");
    if (++depth > k_max_call_depth) {
        depth = 0;
        jinja_throw("maximum call depth exceeded");
    }
    jvalue r = callee.fn->fn(c);
    --depth;
    return r;
}

std::string renderer::capture(const jbody& body, const frame_ptr& f) {
    std::string buf;
    std::string* saved = out;
    out = &buf;
    try {
        exec(body, f);
    } catch (...) {
        out = saved;
        throw;
    }
    out = saved;
    return buf;
}

void renderer::exec(const jbody& body, const frame_ptr& f) {
    for (auto& s : body) {
        exec_stmt(*s, f);
        if (control != ctl::NONE) return;
    }
}

void renderer::assign(const jexpr& target, const jvalue& v, const frame_ptr& f) {
    if (target.kind == jexpr_kind::NAME) {
        f->vars[target.name] = v;
        return;
    }
    if (target.kind == jexpr_kind::NSREF) {
        jvalue ns = lookup(f, target.name);
        if (ns.kind != jkind::NAMESPACE)
            jinja_error_at(src, target.pos, "cannot assign attribute on non-namespace object");
        ns.dict->set(target.attr, v);
        return;
    }
    if (target.kind == jexpr_kind::TUPLE) {
        jlist items;
        try {
            items = jinja_iterate(v);
        } catch (const jinja_fail& fail) {
            jinja_error_at(src, target.pos, "cannot unpack non-iterable " + v.type_name() + " object");
        }
        if (items.size() != target.args.size())
            jinja_error_at(src, target.pos,
                           items.size() > target.args.size()
                               ? strfmt("too many values to unpack (expected %zu)", target.args.size())
                               : strfmt("not enough values to unpack (expected %zu, got %zu)",
                                        target.args.size(), items.size()));
        for (size_t k = 0; k < items.size(); ++k) assign(*target.args[k], items[k], f);
        return;
    }
    jinja_error_at(src, target.pos, "can't assign to this expression");
}

jvalue renderer::make_macro(const jstmt& s, const frame_ptr& f, const std::string& name) {
    const jstmt* def = &s;
    frame_ptr closure = f;
    closures.push_back(f);
    renderer* self = this;
    return jvalue::callable(name, [self, def, closure, name](jcall& c) -> jvalue {
        frame_ptr mf = child(closure);
        if (c.args.size() > def->params.size())
            jinja_throw("macro '" + name + "' takes not more than " + std::to_string(def->params.size()) +
                        " argument(s)");
        for (auto& kw : c.kwargs) {
            bool known = kw.first == "caller";
            for (auto& p : def->params) known = known || p.first == kw.first;
            if (!known) jinja_throw("macro '" + name + "' takes no keyword argument '" + kw.first + "'");
        }
        for (size_t k = 0; k < def->params.size(); ++k) {
            const auto& p = def->params[k];
            jvalue v = c.arg(k, p.first.c_str(), jvalue::undefined("'" + p.first + "' is undefined"));
            if (!c.has(k, p.first.c_str()) && p.second) v = self->eval(*p.second, mf);
            mf->vars[p.first] = v;
        }
        for (auto& kw : c.kwargs)
            if (kw.first == "caller") mf->vars["caller"] = kw.second;
        auto saved = self->control;
        self->control = ctl::NONE;
        std::string text = self->capture(def->body, mf);
        self->control = saved;
        return jvalue::string(std::move(text));
    });
}

void renderer::exec_for(const jstmt& s, const frame_ptr& f) {
    jvalue seq = eval(*s.expr, f);
    jlist items;
    try {
        items = jinja_iterate(seq);
    } catch (const jinja_fail& fail) {
        jinja_error_at(src, s.expr->pos, fail.msg);
    }
    if (s.cond) {
        jlist kept;
        for (auto& it : items) {
            frame_ptr cf = child(f);
            assign(*s.target, it, cf);
            if (eval(*s.cond, cf).truthy()) kept.push_back(it);
        }
        items = std::move(kept);
    }
    if (items.empty()) {
        exec(s.else_body, child(f));
        return;
    }
    int64_t n = (int64_t)items.size();
    for (int64_t k = 0; k < n; ++k) {
        frame_ptr lf = child(f);
        assign(*s.target, items[k], lf);
        jvalue loop = jvalue::make_dict();
        jdict& d = *loop.dict;
        d.set("index", jvalue::integer(k + 1));
        d.set("index0", jvalue::integer(k));
        d.set("revindex", jvalue::integer(n - k));
        d.set("revindex0", jvalue::integer(n - k - 1));
        d.set("first", jvalue::boolean(k == 0));
        d.set("last", jvalue::boolean(k == n - 1));
        d.set("length", jvalue::integer(n));
        d.set("depth", jvalue::integer(1));
        d.set("depth0", jvalue::integer(0));
        d.set("previtem", k > 0 ? items[k - 1] : jvalue::undefined("there is no previous item"));
        d.set("nextitem", k + 1 < n ? items[k + 1] : jvalue::undefined("there is no next item"));
        d.set("cycle", jvalue::callable("cycle", [k](jcall& c) -> jvalue {
                  if (c.args.empty()) jinja_throw("no items for cycling given");
                  return c.args[(size_t)k % c.args.size()];
              }));
        lf->vars["loop"] = loop;
        exec(s.body, lf);
        if (control == ctl::BREAK) { control = ctl::NONE; break; }
        if (control == ctl::CONTINUE) control = ctl::NONE;
    }
}

void renderer::exec_stmt(const jstmt& s, const frame_ptr& f) {
    switch (s.kind) {
        case jstmt_kind::TEXT: *out += s.text; return;
        case jstmt_kind::OUTPUT: *out += eval(*s.expr, f).str(); return;
        case jstmt_kind::IF:
            for (auto& br : s.branches) {
                if (!br.first || eval(*br.first, f).truthy()) {
                    exec(br.second, f);
                    return;
                }
            }
            return;
        case jstmt_kind::FOR: exec_for(s, f); return;
        case jstmt_kind::SET: assign(*s.target, eval(*s.expr, f), f); return;
        case jstmt_kind::SET_BLOCK:
        case jstmt_kind::FILTER_BLOCK: {
            frame_ptr bf = child(f);
            jvalue v = jvalue::string(capture(s.body, bf));
            if (s.expr) {
                bf->vars[jinja_block_var()] = v;
                v = eval(*s.expr, bf);
            }
            if (s.kind == jstmt_kind::SET_BLOCK) assign(*s.target, v, f);
            else *out += v.str();
            return;
        }
        case jstmt_kind::MACRO: f->vars[s.name] = make_macro(s, f, s.name); return;
        case jstmt_kind::CALL_BLOCK: {
            const jexpr& ce = *s.expr;
            jvalue callee = eval(*ce.args[0], f);
            jcall c = eval_args(ce, f);
            c.kwargs.emplace_back("caller", make_macro(s, f, "caller"));
            try {
                *out += call(callee, c).str();
            } catch (const jinja_fail& fail) {
                jinja_error_at(src, ce.pos, fail.msg);
            }
            return;
        }
        case jstmt_kind::BREAK: control = ctl::BREAK; return;
        case jstmt_kind::CONTINUE: control = ctl::CONTINUE; return;
        case jstmt_kind::SCOPE: exec(s.body, f); return;
    }
}

std::string strftime_py(const std::string& fmt, const std::tm& tm) {
    if (fmt.empty()) return "";
    std::vector<char> buf(256);
    for (int tries = 0; tries < 8; ++tries) {
        size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
        if (n > 0) return std::string(buf.data(), n);
        buf.resize(buf.size() * 4);
    }
    return "";
}

void add_globals(frame& g, const jinja_render_options& opts) {
    g.vars["raise_exception"] = jvalue::callable("raise_exception", [](jcall& c) -> jvalue {
        jinja_throw(c.arg(0, "message", jvalue::string("")).str());
    });
    std::optional<std::tm> now = opts.now;
    g.vars["strftime_now"] = jvalue::callable("strftime_now", [now](jcall& c) -> jvalue {
        jvalue fmt = c.arg(0, "format");
        if (!fmt.is_string()) jinja_throw("strftime_now: format must be a string");
        std::tm tm{};
        if (now) {
            tm = *now;
        } else {
            std::time_t t = std::time(nullptr);
            localtime_r(&t, &tm);
        }
        return jvalue::string(strftime_py(fmt.s, tm));
    });
    g.vars["namespace"] = jvalue::callable("namespace", [](jcall& c) -> jvalue {
        jvalue ns = jvalue::make_namespace();
        for (auto& a : c.args) {
            if (a.kind != jkind::DICT) jinja_throw("namespace() positional argument must be a dict");
            for (auto& kv : a.dict->items) ns.dict->set(kv.first, kv.second);
        }
        for (auto& kw : c.kwargs) ns.dict->set(kw.first, kw.second);
        return ns;
    });
    g.vars["dict"] = jvalue::callable("dict", [](jcall& c) -> jvalue {
        jvalue d = jvalue::make_dict();
        for (auto& a : c.args)
            if (a.kind == jkind::DICT)
                for (auto& kv : a.dict->items) d.dict->set(kv.first, kv.second);
        for (auto& kw : c.kwargs) d.dict->set(kw.first, kw.second);
        return d;
    });
    g.vars["range"] = jvalue::callable("range", [](jcall& c) -> jvalue {
        int64_t start = 0, stop = 0, step = 1;
        for (auto& a : c.args)
            if (a.kind != jkind::INT && a.kind != jkind::BOOL)
                jinja_throw("'" + a.type_name() + "' object cannot be interpreted as an integer");
        if (c.args.size() == 1) stop = c.args[0].i;
        else if (c.args.size() >= 2) { start = c.args[0].i; stop = c.args[1].i; }
        if (c.args.size() >= 3) step = c.args[2].i;
        if (c.args.empty() || c.args.size() > 3) jinja_throw("range expected 1 to 3 arguments");
        if (step == 0) jinja_throw("range() arg 3 must not be zero");
        jlist items;
        for (int64_t v = start; step > 0 ? v < stop : v > stop; v += step) {
            if (items.size() >= 100000)
                jinja_throw("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
            items.push_back(jvalue::integer(v));
        }
        return jvalue::make_list(std::move(items));
    });
}

}  // namespace

jinja_template::jinja_template(const std::string& source, std::string name)
    : impl_(std::make_unique<jbody_holder>()) {
    impl_->src.name = std::move(name);
    impl_->src.text = jinja_normalize_source(source);
    try {
        impl_->body = jinja_parse(impl_->src);
    } catch (const tetra::error&) {
        throw;
    } catch (const std::exception& e) {
        TETRA_FAIL("%s: parse failed: %s", impl_->src.name.c_str(), e.what());
    }
}
jinja_template::~jinja_template() = default;
jinja_template::jinja_template(jinja_template&&) noexcept = default;
jinja_template& jinja_template::operator=(jinja_template&&) noexcept = default;

std::string jinja_template::render(const jvalue& context, const jinja_render_options& opts) const {
    TETRA_CHECK(context.kind == jkind::DICT, "%s: render context must be a dict, got %s",
                impl_->src.name.c_str(), context.type_name().c_str());
    auto globals = std::make_shared<frame>();
    add_globals(*globals, opts);
    frame_ptr top = child(globals);
    for (auto& kv : context.dict->items) top->vars[kv.first.str()] = kv.second;
    std::string result;
    renderer r{impl_->src, opts};
    r.out = &result;
    try {
        r.exec(impl_->body, top);
    } catch (const tetra::error&) {
        throw;
    } catch (const jinja_fail& f) {  // safety net: every jinja_fail should have been located
        TETRA_FAIL("%s: %s", impl_->src.name.c_str(), f.msg.c_str());
    } catch (const std::exception& e) {  // safety net: library exceptions become input errors
        TETRA_FAIL("%s: render failed: %s", impl_->src.name.c_str(), e.what());
    }
    return result;
}

std::string jinja_template::render(const nlohmann::ordered_json& context,
                                   const jinja_render_options& opts) const {
    TETRA_CHECK(context.is_object(), "%s: render context must be a JSON object, got %s",
                impl_->src.name.c_str(), context.type_name());
    return render(jvalue_from_json(context), opts);
}

}  // namespace tetra

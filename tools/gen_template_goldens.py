#!/usr/bin/env python3
"""Generate the chat-template goldens for tests/chat from Python jinja2 via transformers.

Oracle: transformers.utils.chat_template_utils (render_jinja_template / _compile_jinja_template),
i.e. the exact environment apply_chat_template uses (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, json.dumps tojson, raise_exception, strftime_now, namespace, dict),
with datetime.now() pinned to FIXED_NOW so strftime_now is reproducible.

Writes tests/data/templates/goldens_chat.json (real templates x conversations; each case names its
template file and conversation, whose messages/tools/kwargs and special tokens are stored once) and
tests/data/templates/goldens_features.json (small feature templates). Errors are recorded as
{"error": "<exception type>: <message>"}.

Usage: python3 tools/gen_template_goldens.py   (needs: pip install jinja2 transformers)
"""
import datetime as _dt
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "templates")
FIXED_NOW = _dt.datetime(2024, 7, 26, 13, 45, 7)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = _FixedDatetime  # strftime_now() reads the module global at call time

# ---- real templates -------------------------------------------------------------------------

TEMPLATES = {
    # file: special tokens from the model's tokenizer_config.json (None = not set)
    "HuggingFaceTB-SmolLM2-135M-Instruct.jinja": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "meta-llama-Llama-3.1-8B-Instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.2-3B-Instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "Qwen-Qwen2.5-7B-Instruct.jinja": {"bos_token": None, "eos_token": "<|im_end|>"},
    "Qwen-Qwen3-0.6B.jinja": {"bos_token": None, "eos_token": "<|im_end|>"},
    "openai-gpt-oss-120b.jinja": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"},
    "NVIDIA-Nemotron-Nano-v2.jinja": {"bos_token": "<SPECIAL_10>", "eos_token": "<SPECIAL_12>"},
    # Further families (broader feature coverage); same token convention.
    "HuggingFaceTB-SmolLM3-3B.jinja": {"bos_token": None, "eos_token": "<|im_end|>"},
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "Qwen-QwQ-32B.jinja": {"bos_token": None, "eos_token": "<|im_end|>"},
    "Qwen3-Coder.jinja": {"bos_token": None, "eos_token": "<|im_end|>"},
    "Qwen3.5-4B.jinja": {"bos_token": None, "eos_token": "<|im_end|>"},
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "deepseek-ai-DeepSeek-V3.1.jinja": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "google-gemma-2-2b-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "meetkai-functionary-medium-v3.1.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "microsoft-Phi-3.5-mini-instruct.jinja": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": {"bos_token": "<s>", "eos_token": "</s>"},
    "tencent-Hy3.jinja": {"bos_token": "<｜hy_begin▁of▁sentence｜>", "eos_token": "<｜hy_eos｜>"},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days", "default": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web (résumé: ünïcödé)",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["query"],
        },
    },
}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "What is the capital of France?"}
A1 = {"role": "assistant", "content": "The capital of France is Paris."}
U2 = {"role": "user", "content": "And of Germany?"}
CALL1 = {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL2 = {"id": "call_2", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Berlin"}}}
UW = {"role": "user", "content": "What's the weather in Paris?"}

CONVERSATIONS = {
    "user_only": {"messages": [U1]},
    "system_user": {"messages": [SYS, U1]},
    "multi_turn": {"messages": [SYS, U1, A1, U2]},
    "ends_with_assistant": {"messages": [U1, A1]},
    "tools_given": {"messages": [SYS, UW], "tools": [WEATHER_TOOL, SEARCH_TOOL]},
    "tool_call_and_result": {
        "messages": [UW, {"role": "assistant", "content": "", "tool_calls": [CALL1]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"sunny\"}"},
                     {"role": "assistant", "content": "It is 21°C and sunny in Paris."}],
        "tools": [WEATHER_TOOL]},
    "parallel_tool_calls": {
        "messages": [{"role": "user", "content": "Weather in Paris and Berlin?"},
                     {"role": "assistant", "content": None, "tool_calls": [CALL1, CALL2]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "21"},
                     {"role": "tool", "tool_call_id": "call_2", "content": "18"}],
        "tools": [WEATHER_TOOL]},
    "parallel_tool_calls_empty_content": {
        "messages": [{"role": "user", "content": "Weather in Paris and Berlin?"},
                     {"role": "assistant", "content": "", "tool_calls": [CALL1, CALL2]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "21"},
                     {"role": "tool", "tool_call_id": "call_2", "content": "18"}],
        "tools": [WEATHER_TOOL]},
    "reasoning_content": {
        "messages": [U1, {"role": "assistant", "content": "Paris.",
                          "reasoning_content": "The user asks about France.\nIts capital is Paris."},
                     U2]},
    "reasoning_last_turn": {
        "messages": [U1, {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy one."}]},
    "think_inline": {
        "messages": [U1, {"role": "assistant", "content": "<think>\nFrance -> Paris\n</think>\n\nParis."}, U2]},
    "enable_thinking_false": {"messages": [U1], "kwargs": {"enable_thinking": False}},
    "enable_thinking_true": {"messages": [SYS, U1], "kwargs": {"enable_thinking": True}},
    "unicode": {"messages": [{"role": "system", "content": "Réponds en français. 日本語もOK 🌍"},
                             {"role": "user", "content": "Grüße! \"quotes\" 'single' \\backslash\\ tab\tnew\nline"}]},
    "empty_content": {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""},
                                   {"role": "user", "content": "  padded  "}]},
    "llama_builtin_tools": {
        "messages": [SYS, UW], "tools": [WEATHER_TOOL],
        "kwargs": {"builtin_tools": ["code_interpreter", "brave_search"], "date_string": "01 Jan 2025"}},
    "llama_tools_in_system": {"messages": [SYS, UW], "tools": [WEATHER_TOOL],
                              "kwargs": {"tools_in_user_message": False}},
    "llama_ipython_result": {
        "messages": [UW, {"role": "assistant", "tool_calls": [CALL1]},
                     {"role": "ipython", "content": {"temp": 21}}],
        "tools": [WEATHER_TOOL]},
    "reasoning_effort_high": {"messages": [SYS, U1], "kwargs": {"reasoning_effort": "high"}},
    "no_messages_tools": {"messages": [], "tools": [WEATHER_TOOL]},
}


def render_chat(template_src, tokens, conv, add_generation_prompt):
    kwargs = {k: v for k, v in tokens.items() if v is not None}
    kwargs.update(conv.get("kwargs", {}))
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[json.loads(json.dumps(conv["messages"]))],
            tools=conv.get("tools"),
            chat_template=template_src,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        return {"expected": rendered[0]}
    except Exception as e:  # recorded: the C++ engine must fail too
        return {"error": f"{type(e).__name__}: {e}"}


def chat_goldens():
    out = []
    for fname, tokens in TEMPLATES.items():
        with open(os.path.join(DATA, fname), encoding="utf-8") as f:
            src = f.read()
        for cname, conv in CONVERSATIONS.items():
            for agp in (False, True):
                case = {"template": fname, "conversation": cname, "add_generation_prompt": agp}
                case.update(render_chat(src, tokens, conv, agp))
                out.append(case)
    return out


def conversations_json():
    return {name: {"messages": c["messages"], "tools": c.get("tools"), "kwargs": c.get("kwargs", {})}
            for name, c in CONVERSATIONS.items()}


# ---- feature templates ----------------------------------------------------------------------

CTX = {
    "s": "Hello World", "n": 42, "f": 2.5, "neg": -7, "t": True, "fl": False, "nil": None,
    "lst": [3, 1, 2], "words": ["b", "A", "c", "a"], "empty": [], "es": "",
    "d": {"b": 1, "a": 2, "items": "key-items"},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo", "extra": None}],
    "people": [{"name": "Ann", "age": 30, "tags": ["x"]}, {"name": "bob", "age": 25},
               {"name": "Cid", "age": 35, "tags": []}],
    "uni": "héllo wörld 🌍", "ws": "  \t spaced out \n ", "nested": {"x": {"y": [10, 20, {"z": "deep"}]}},
    "floats": [0.1, 1.0, 1e-05, 1e16, 123456789.125, -0.0, 3.0e20], "big": 9007199254740993,
}

FEATURES = [
    # whitespace control (trim_blocks, lstrip_blocks, -, +)
    ("ws_trim_blocks", "{% if t %}\nyes\n{% endif %}\nafter"),
    ("ws_lstrip_blocks", "line\n    {% if t %}\n    indented\n    {% endif %}\nend"),
    ("ws_minus_both", "a  {{- s -}}  b\n  {%- if t -%}  c  {%- endif -%}  d"),
    ("ws_plus_disables", "x\n    {%+ if t %}y{% endif +%}\nz"),
    ("ws_comment", "a\n  {# note #}\nb {#- gone -#}   c"),
    ("ws_var_no_lstrip", "  {{ n }}\n  {% if t %}k{% endif %}\n"),
    ("ws_trailing_newline", "{{ s }}\n"),
    ("ws_two_trailing_newlines", "{{ s }}\n\n"),
    ("ws_crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\nc"),
    ("ws_raw", "{% raw %}{{ not parsed }} {% if %}{% endraw %}|{{ n }}"),
    ("ws_lstrip_tab", "\t{% if t %}T{% endif %}\n\t{{ n }}"),
    ("ws_block_at_start_after_text", "ab  {% if t %}x{% endif %}"),
    # literals and printing
    ("lit_strings", "{{ 'a\\'b' }}|{{ \"c\\\"d\" }}|{{ 'tab\\there' }}|{{ 'nl\\nx' }}|{{ '\\u00e9\\x41' }}|{{ 'a' 'b' }}"),
    ("lit_numbers", "{{ 1 }} {{ 1.0 }} {{ 1_000 }} {{ 1e3 }} {{ 2.5e-3 }} {{ -3 }} {{ 0.1 + 0.2 }}"),
    ("lit_bool_none", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ nil }}"),
    ("lit_containers", "{{ [1, 'a', none, true, 1.5, {'k': [1]}] }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ {} }}"),
    ("print_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'é🌍'] }}"),
    ("print_floats", "{% for x in floats %}{{ x }} {% endfor %}"),
    ("print_dict", "{{ d }} {{ msgs[2] }}"),
    ("print_big_int", "{{ big }} {{ big + 1 }}"),
    # arithmetic and operators
    ("arith_basic", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 8 }}"),
    ("arith_negative", "{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -7.5 // 2 }} {{ 7.5 % 2 }} {{ 2 ** -1 }}"),
    ("arith_mixed", "{{ n + f }} {{ n * 1.0 }} {{ true + 1 }} {{ 10 / 4 }} {{ 4 / 2 }}"),
    ("arith_precedence", "{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ -2 ** 2 }} {{ 2 * 3 ~ 4 }} {{ 'a' ~ 1 + 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }}"),
    ("str_concat_repeat", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ [1] * 3 }} {{ [1] + [2] }} {{ s ~ n ~ nil }}"),
    ("compare_chain", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 != 2 }}"),
    ("logic_operands", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ nil or [] }} {{ not 0 }} {{ not s }} {{ 1 and 0 }}"),
    ("in_operator", "{{ 'World' in s }} {{ 2 in lst }} {{ 'a' in d }} {{ 'z' not in d }} {{ 5 not in lst }}"),
    ("ternary", "{{ 'y' if t else 'n' }} {{ 'y' if fl else 'n' }} [{{ 'y' if fl }}] {{ 1 if fl else 2 if t else 3 }}"),
    ("filter_precedence", "{{ 'a' + ws | trim + 'b' }} {{ -3 | abs }} {{ lst | length + 1 }}"),
    # subscripts and slices
    ("subscript", "{{ lst[0] }} {{ lst[-1] }} {{ d['a'] }} {{ d.b }} {{ nested.x.y[2].z }} {{ msgs[1]['role'] }} {{ lst.1 }}"),
    ("slices", "{{ lst[1:] }} {{ lst[:-1] }} {{ lst[::-1] }} {{ lst[::2] }} {{ s[1:4] }} {{ s[-5:] }} {{ s[::-1] }} {{ uni[1:5] }}"),
    ("slice_oob", "{{ lst[5:] }} {{ lst[-10:2] }} {{ lst[2:0:-1] }} {{ lst[10] }}|{{ s[100] }}|"),
    ("attr_vs_item", "{{ d.items is defined }} {{ d['items'] }} {{ d.get('a') }} {{ d.get('zz', 'def') }} {{ d.get('zz') }}"),
    # tests
    ("tests_types", "{{ n is number }} {{ f is float }} {{ n is integer }} {{ t is boolean }} {{ t is number }} "
                    "{{ s is string }} {{ d is mapping }} {{ lst is iterable }} {{ s is sequence }} {{ nil is none }} "
                    "{{ lst is mapping }} {{ n is string }}"),
    ("tests_defined", "{{ x is defined }} {{ x is undefined }} {{ s is defined }} {{ d.zz is defined }} "
                      "{{ msgs[2].extra is none }} {{ msgs[2].extra is defined }} {{ x is iterable }}"),
    ("tests_values", "{{ t is true }} {{ 1 is true }} {{ fl is false }} {{ 4 is even }} {{ 3 is odd }} "
                     "{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is eq 'a' }} {{ 2 is equalto 3 }} "
                     "{{ 3 is gt 2 }} {{ 2 is in lst }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ n is not none }}"),
    # statements
    ("if_elif_else", "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %} {% endfor %}"),
    ("for_loop_vars", "{% for x in lst %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/"
                      "{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}"),
    ("for_else", "{% for x in empty %}{{ x }}{% else %}none!{% endfor %}"),
    ("for_inline_if", "{% for x in lst if x > 1 %}{{ x }}@{{ loop.index }}/{{ loop.length }} {% endfor %}"),
    ("for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d | items %}{{ k }}:{{ v }},{% endfor %}"),
    ("for_dict_keys", "{% for k in d %}{{ k }} {% endfor %}"),
    ("for_string", "{% for c in 'héy' %}[{{ c }}]{% endfor %}"),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}"),
    ("for_cycle", "{% for x in lst %}{{ loop.cycle('odd', 'even') }} {% endfor %}"),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("for_scope", "{% set x = 5 %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}[{{ x }}]{% endfor %}{{ x }}"),
    ("for_undefined_iter", "{% for x in undefined_var %}{{ x }}{% else %}empty{% endfor %}"),
    ("set_basic", "{% set a = 1 %}{% set b, c = [2, 3] %}{{ a }}{{ b }}{{ c }}{% set msgs2 = msgs[1:] %}{{ msgs2 | length }}"),
    ("set_in_if_leaks", "{% set x = 1 %}{% if t %}{% set x = 2 %}{% endif %}{{ x }}"),
    ("set_block", "{% set block %}Hello {{ s }}!{% endset %}[{{ block }}]{% set up | upper %}abc{% endset %}{{ up }}"),
    ("namespace", "{% set ns = namespace(count=0, found=false) %}{% for x in lst %}{% set ns.count = ns.count + x %}"
                  "{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} "
                  "{% set ns.new_attr = 'added' %}{{ ns.new_attr }}"),
    ("macro_defaults", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}"
                       "{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(name='Cy', punct='?') }} [{{ greet() }}]"),
    ("macro_recursive", "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}"),
    ("macro_capture", "{% macro m(x) %}<{{ x }}>{% endmacro %}{% set r = m(3) %}{{ r | length }} {{ r }}"),
    ("macro_closure", "{% set c = 9 %}{% macro m(a) %}{{ a }}-{{ c }}{% endmacro %}{{ m(1) }}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ n }}{% endcall %}"),
    ("filter_block", "{% filter upper %}shout {{ s }}{% endfilter %}|{% filter replace('a', 'o') | trim %}  banana  {% endfilter %}"),
    ("generation_block", "A{% generation %}gen {{ n }}{% endgeneration %}B"),
    ("raise_exception_ok", "{% if fl %}{{ raise_exception('nope') }}{% endif %}fine"),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %H:%M:%S') }}"),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict(a=1).a }}"),
    ("range_global", "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }}"),
    # string methods
    ("str_strip", "[{{ ws.strip() }}][{{ ws.lstrip() }}][{{ ws.rstrip() }}][{{ 'xxhixx'.strip('x') }}][{{ '\\n\\nA\\n'.lstrip('\\n') }}]"),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'x</think>y'.split('</think>')[-1] }}"),
    ("str_starts_ends", "{{ s.startswith('Hell') }} {{ s.endswith('World') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith('x') }}"),
    ("str_case", "{{ s.upper() }} {{ s.lower() }} {{ 'hello wORLD foo-bar'.title() }} {{ 'hELLO world'.capitalize() }}"),
    ("str_replace_find", "{{ s.replace('o', '0') }} {{ s.replace('o', '0', 1) }} {{ s.find('World') }} {{ s.find('zz') }} {{ s.count('l') }} {{ uni.find('w') }}"),
    ("str_join_misc", "{{ '-'.join(['a', 'b']) }} {{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ '  '.isspace() }} {{ 'a\\nb\\r\\nc'.splitlines() }}"),
    # filters
    ("filter_trim_length", "[{{ ws | trim }}] {{ s | length }} {{ uni | length }} {{ lst | count }} {{ d | length }} [{{ 'xxax' | trim('x') }}]"),
    ("filter_first_last", "{{ lst | first }} {{ lst | last }} {{ s | first }} {{ empty | first }}|"),
    ("filter_join", "{{ lst | join }} {{ lst | join(', ') }} {{ people | join(', ', attribute='name') }}"),
    ("filter_default", "{{ x | default('dflt') }} {{ nil | default('dflt') }} {{ es | default('dflt', true) }} {{ s | d('z') }} {{ fl | default('dflt', boolean=true) }}"),
    ("filter_case", "{{ s | upper }} {{ s | lower }} {{ 'hello wORLD foo-bar (x' | title }} {{ 'hELLO' | capitalize }}"),
    ("filter_replace", "{{ s | replace('l', 'L') }} {{ s | replace('l', 'L', 2) }}"),
    ("filter_tojson", "{{ d | tojson }} {{ msgs[2] | tojson }} {{ uni | tojson }} {{ floats | tojson }} {{ 'q\"\\\\\\n' | tojson }}"),
    ("filter_tojson_indent", "{{ nested | tojson(indent=2) }}\n{{ people | tojson(indent=4) }}\n{{ empty | tojson(indent=2) }}"),
    ("filter_tojson_opts", "{{ uni | tojson(ensure_ascii=true) }} {{ d | tojson(sort_keys=true) }}"),
    ("filter_string_int_float", "{{ n | string }} {{ '42' | int + 1 }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 2.9 | int }} {{ '2.5' | float }} {{ n | float }} {{ 'z' | float }}"),
    ("filter_list", "{{ 'abc' | list }} {{ d | list }} {{ lst | list }}"),
    ("filter_map_select", "{{ people | map(attribute='name') | list }} {{ people | map(attribute='tags', default='-') | list }} "
                          "{{ words | map('upper') | list }} {{ lst | select('odd') | list }} {{ lst | reject('odd') | list }}"),
    ("filter_selectattr", "{{ people | selectattr('age', 'gt', 26) | map(attribute='name') | join(',') }} "
                          "{{ people | rejectattr('tags') | map(attribute='name') | join(',') }} "
                          "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}"),
    ("filter_reject_equalto", "{{ ['code_interpreter', 'brave_search', 'wolfram'] | reject('equalto', 'code_interpreter') | join(', ') }}"),
    ("filter_items_dictsort", "{{ d | items | list }} {{ d | dictsort }} {% set e = {'b': 1, 'a': 2, 'C': 0} %}{{ e | dictsort(by='value') }} {{ e | dictsort(reverse=true) }} {{ e | dictsort(true) }}"),
    ("filter_unique_reverse_sort", "{{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }} {{ lst | reverse | list }} "
                                   "{{ s | reverse }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ lst | sort(reverse=true) }} "
                                   "{{ people | sort(attribute='age') | map(attribute='name') | join }}"),
    ("filter_numbers", "{{ neg | abs }} {{ f | round }} {{ 3.14159 | round(2) }} {{ 2.675 | round(2) }} {{ 3.5 | round }} {{ 4.5 | round }} "
                       "{{ 3.2 | round(method='ceil') }} {{ 3.8 | round(0, 'floor') }} {{ lst | sum }} {{ people | sum(attribute='age') }} "
                       "{{ lst | max }} {{ lst | min }} {{ words | max }}"),
    ("filter_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}"),
    ("filter_misc", "{{ s | wordcount }} {{ '<a href=\"x\">&\\'</a>' | e }} {{ s | safe }} {{ 'ab' | center(6) }}| {{ d | attr('b') }}"),
    # lazy iterators (generators) returned by map/select/items/unique/reverse
    ("gen_truthy_when_empty", "{% if lst | select('gt', 100) %}truthy{% else %}falsy{% endif %} "
                              "{% if lst | select('gt', 100) | list %}T{% else %}F{% endif %}"),
    ("gen_single_use", "{% set g = lst | map('string') %}[{{ g | join(',') }}][{{ g | join(',') }}]"),
    ("gen_first_consumes", "{% set g = lst | reverse %}{{ g | first }} {{ g | first }} {{ g | list }}"),
    ("gen_falsy_input_is_empty", "{{ nil | selectattr('x') | list }} {{ nil | map('upper') | list }} {{ x | reject | list }}"),
    ("gen_for_loop_length", "{% for p in people | selectattr('age', 'gt', 20) %}{{ loop.length }}{{ p.name }} {% endfor %}"),
    ("err_gen_length", "{{ lst | map('string') | length }}"),
    ("err_gen_tojson", "{{ people | map(attribute='name') | tojson }}"),
    ("err_gen_last", "{{ lst | map('string') | last }}"),
    # str.format (sandboxed formatter)
    ("str_format", "{{ '{}-{}'.format(1, 'a') }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='Ann') }} "
                   "{{ '{{literal}} {0!r}'.format('q') }} {{ '{:>6}|{:<4}|{:^7}'.format('ab', 'c', 'mid') }} "
                   "{{ '{:05d} {:+d} {:,}'.format(42, 7, 1234567) }} {{ '{:.2f} {:.1%} {:e}'.format(3.14159, 0.256, 12345.678) }} "
                   "{{ '{0[role]} {0.content}'.format(msgs[1]) }} {{ '{}'.format(none) }} {{ '{:x}'.format(255) }}"),
    # unknown filters/tests are compile errors, except in if-statements / inline ifs (runtime)
    ("soft_unknown_filter_in_if", "{% if fl %}{{ s | no_such_filter }}{% endif %}ok {{ s if t else (s | nosuch) }}"),
    ("soft_unknown_test_in_if", "{% if fl and s is no_such_test %}x{% else %}ok{% endif %}"),
    ("err_soft_unknown_filter_reached", "{% if t %}{{ s | no_such_filter }}{% endif %}"),
    ("err_unknown_filter_in_for_in_if", "{% if fl %}{% for x in lst %}{{ x | no_such_filter }}{% endfor %}{% endif %}"),
    # more whitespace control and lexer corners
    ("ws_nested_braces", "{{ {'a': {'b': 1}} }}|{{ '}}' }}|{{ '{%' ~ '%}' }}|{{ [[1], [2]] }}"),
    ("ws_raw_strip", "a\n  {%- raw -%}  {{ x }}  {%- endraw -%}  \nb"),
    ("ws_lstrip_indented_comment", "x\n    {# c #}\n    y"),
    ("ws_trim_after_var_not_applied", "{{ n }}\n{{ n }}\n"),
    ("ws_minus_on_var_eats_newlines", "a\n\n  {{- n -}}\n\n  b"),
    ("ws_block_end_minus_then_text", "{% if t -%}   \n\n  x{%- endif %}\ny"),
    ("ws_lstrip_only_spaces_tabs", "a\n \t {% if t %}b{% endif %}\n"),
    ("ws_lstrip_not_after_text", "a  {% if t %}b{% endif %}"),
    ("ws_crlf_in_string_literal", "{{ 'x\r\ny' | length }}"),
    ("ws_unicode_space_before_block", "a\n\u3000{% if t %}b{% endif %}"),
    ("ws_generation_trim", "{% generation %}\n  gen\n{% endgeneration %}\nend"),
    # Markup (no autoescape): |safe and |e mark strings; `+` with a Markup escapes the other side
    ("markup_concat", "{{ 'a<'|safe + '<b>' }} {{ '<x>' + '&'|safe }} {{ ('q'|safe + d | tojson) }} {{ '<'|safe ~ '<' }}"),
    ("markup_escape_idempotent", "{{ '<a>'|e|e }} {{ ('<'|e + '>') }} {{ '<'|e is escaped }} {{ '<' is escaped }} {{ ('x'|safe|trim + '\"') }}"),
    # assorted corners
    ("call_block_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                        "{% call(item) each(lst) %}<{{ item }}>{% endcall %}"),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }} {{ ns }}"),
    ("tojson_tuple_nested", "{{ (1, 'a', [none, true]) | tojson }} {{ {'k': (1,)} | tojson(indent=1) }}"),
    ("int_bases", "{{ '0x1A' | int(0, 16) }} {{ '1A' | int(base=16) }} {{ ' 12 ' | int }} {{ '1_000' | int }} {{ true | int }} {{ '-3.9' | int }}"),
    ("sameas_and_none_tests", "{{ nil is sameas none }} {{ t is sameas true }} {{ 1 is sameas 1 }} {{ lst is sameas lst }}"),
    ("loop_over_dictsort", "{% for k, v in d | dictsort %}{{ k }}={{ v }} {% endfor %}"),
    ("nested_loop_outer_ref", "{% for a in lst %}{% set outer = loop %}{% for b in [0] %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}"),
    ("string_escapes_more", "{{ 'a\\b' }}|{{ 'q\\'' }}|{{ \"it's\" }}|{{ '\\u0041\\x42' }}|{{ 'line\\\ncont' }}"),
    ("compare_mixed_eq", "{{ 1 == true }} {{ 0 == false }} {{ 1.0 == 1 }} {{ 'a' == ['a'] }} {{ none == none }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }}"),
    ("in_dict_list_str", "{{ 'ro' in msgs[0].role }} {{ {'role': 'user', 'content': 'hi'} in msgs }} {{ 'role' in msgs[0] }} {{ '' in s }}"),
    ("slice_negative_steps", "{{ lst[-1:0:-1] }} {{ lst[::-2] }} {{ 'abcdef'[4:1:-2] }} {{ lst[-100:100] }} {{ ''[::-1] }}"),
    ("filter_chain_whitespace", "{{- '  x  ' | trim | upper -}}\n  {{- lst | map('string') | join('-') -}}"),
    # undefined semantics
    ("undefined_print", "[{{ x }}][{{ d.zz }}][{{ lst[10] }}][{{ x | length }}][{{ x | string }}][{{ x ~ 'a' }}][{{ 'a' in x }}]"),
    ("undefined_compare", "{{ x == x }} {{ x == none }} {{ not x }} {{ x is none }}"),
    # errors (jinja2 raises; so must we)
    ("err_undefined_add", "{{ x + 1 }}"),
    ("err_undefined_attr", "{{ x.y }}"),
    ("err_undefined_attr_chain", "{{ d.zz.y }}"),
    ("err_raise_exception", "{{ raise_exception('custom failure') }}"),
    ("err_tojson_undefined", "{{ x | tojson }}"),
    ("err_div_zero", "{{ 1 / 0 }}"),
    ("err_str_plus_int", "{{ 'a' + 1 }}"),
    ("err_list_append", "{{ lst.append(4) }}"),
    ("err_unknown_filter", "{{ s | nosuchfilter }}"),
    ("err_syntax_unclosed", "{% if t %}open"),
    ("err_syntax_bad_expr", "{{ 1 + }}"),
    ("err_unpack", "{% set a, b = [1, 2, 3] %}"),
    ("err_iter_int", "{% for x in n %}{% endfor %}"),
    ("err_compare_types", "{{ 1 < 'a' }}"),
    ("err_call_non_callable", "{{ s() }}"),
]


def feature_goldens():
    out = []
    for name, src in FEATURES:
        case = {"name": name, "template": src}
        try:
            case["expected"] = ctu._compile_jinja_template(src).render(**CTX)
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    return out


def main():
    meta = {"generator": "tools/gen_template_goldens.py", "jinja2": jinja2.__version__,
            "transformers": transformers.__version__, "now": FIXED_NOW.isoformat()}
    feats = {"meta": meta, "context": CTX, "cases": feature_goldens()}
    chats = {"meta": meta, "templates": TEMPLATES, "conversations": conversations_json(), "cases": chat_goldens()}
    for fname, obj in (("goldens_features.json", feats), ("goldens_chat.json", chats)):
        with open(os.path.join(DATA, fname), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1)
            f.write("\n")
    n_err = sum("error" in c for c in feats["cases"])
    print(f"features: {len(feats['cases'])} cases ({n_err} errors)", file=sys.stderr)
    n_err = sum("error" in c for c in chats["cases"])
    print(f"chat: {len(chats['cases'])} cases ({n_err} errors)", file=sys.stderr)


if __name__ == "__main__":
    main()

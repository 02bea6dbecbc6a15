"""toykv.Tokenizer on bad input: ids that are not ids, text that is not text, flags that are not
bools, GGUF vocabularies that lie, and chat templates that never stop (rendered with limits).

A tiny byte-level BPE is built here from GGUF-style metadata (the 256 byte characters, two
merges, three special tokens), so every test runs in milliseconds without a model.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from toykv import tokenizer as tk
from toykv.tokenizer import load_tokenizer, tokenizer_from_gguf

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def gguf_metadata(tokens=None, merges=None, template=None) -> dict:
    """tokenizer.* metadata of a tiny byte-level BPE: bytes, 'th', 'the', then the specials."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = tokens or [*alphabet, "th", "the", *SPECIALS]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.merges": merges or ["t h", "th e"],
            "tokenizer.ggml.token_type": [3 if t in SPECIALS else 1 for t in tokens],
            "tokenizer.ggml.eos_token_id": tokens.index("<|im_end|>")}
    if template is not None:
        meta["tokenizer.chat_template"] = template
    return meta


def tiny(template=None) -> tk.Tokenizer:
    meta = gguf_metadata(template=template)
    return tokenizer_from_gguf(meta, len(meta["tokenizer.ggml.tokens"]))


USER = [{"role": "user", "content": "the cache"}]


# -- ids ------------------------------------------------------------------------------------
def test_decode_takes_any_sequence_of_integer_ids():
    tok = tiny()
    ids = tok.encode("the cache")
    assert tok.decode(ids) == "the cache"
    for same in (tuple(ids), np.array(ids), np.array(ids, np.uint16), [np.int64(i) for i in ids]):
        assert tok.decode(same) == "the cache"
    assert tok.decode([]) == ""


@pytest.mark.parametrize("ids, message", [
    (42, "sequence of token ids.*int"),                       # one id, not a sequence
    ("65", "sequence of token ids.*str"),                     # would read '6' and '5'
    (b"AB", "sequence of token ids.*bytes"),
    ([1.7, 2.2], r"ids\[0\] must be an integer.*1.7"),        # would truncate to 1, 2
    ([65, 66.0], r"ids\[1\] must be an integer.*66.0"),        # even an integral float
    (np.array([65.0, 66.0]), "1-D array of integers.*float64"),
    (np.array([[65, 66]]), r"1-D array.*\(1, 2\)"),
    ([True, False], r"ids\[0\] must be an integer.*True"),
    ({65, 66}, "set"),                                         # no order
    (iter([65, 66]), "list_iterator"),                         # no length: may never end
    ([65, None], r"ids\[1\].*None"),
    ([65, "66"], r"ids\[1\].*'66'"),
    ([10**400], r"outside \[0, 261\)"),
    ([-1], "outside"),
    ([261], "outside"),
])
def test_decode_refuses_what_is_not_a_list_of_ids(ids, message):
    with pytest.raises(ValueError, match=message):
        tiny().decode(ids)


# -- text and flags -------------------------------------------------------------------------
@pytest.mark.parametrize("text, index", [("\ud800", 0), ("a\udfffb", 1), ("ok \ud83d", 3)])
def test_a_lone_surrogate_is_refused_with_its_position(text, index):
    tok = tiny()
    with pytest.raises(ValueError, match=f"text holds a lone surrogate .* at index {index}"):
        tok.encode(text)
    with pytest.raises(ValueError, match=r"messages\[0\]\['content'\] holds a lone surrogate"):
        tok.apply_chat_template([{"role": "user", "content": text}])
    assert tok.decode(tok.encode("🙂")) == "🙂"                    # a real pair is fine


@pytest.mark.parametrize("text", [None, 42, ["the"], b"the"])
def test_encode_takes_a_str_only(text):
    with pytest.raises(ValueError, match="text must be a str"):
        tiny().encode(text)


FLAGS = ["no", "False", "", 0, 1, None, np.bool_(True), [True]]


@pytest.mark.parametrize("flag", FLAGS)
def test_flags_are_bools(flag):
    tok = tiny()
    calls = {"add_special_tokens": lambda: tok.encode("the", add_special_tokens=flag),
             "skip_special_tokens": lambda: tok.decode([65], skip_special_tokens=flag),
             "add_generation_prompt": lambda: tok.apply_chat_template(USER, flag)}
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"{name} must be True or False"):
            call()
    with pytest.raises(ValueError, match="add_generation_prompt must be True or False"):
        tok.encode_chat(USER, add_generation_prompt=flag)


def test_a_refused_flag_is_refused_before_the_template_runs():
    tok = tiny(template="{{ raise_exception('the template ran') }}")
    with pytest.raises(ValueError, match="add_generation_prompt"):
        tok.apply_chat_template(USER, add_generation_prompt="no")


# -- GGUF vocabularies that lie -------------------------------------------------------------
def test_a_token_listed_twice_is_refused():
    meta = gguf_metadata()
    tokens = meta["tokenizer.ggml.tokens"]
    tokens[tokens.index("the")] = "th"                           # 'th' at two ids
    with pytest.raises(ValueError, match=r"'tokenizer.ggml.tokens' holds the same token twice: "
                                         r"ids 256 \('th'\) and 257 \('th'\)"):
        tokenizer_from_gguf(meta, len(tokens))


def test_two_spellings_of_the_same_bytes_are_refused():
    meta = gguf_metadata()
    tokens = meta["tokenizer.ggml.tokens"]
    tokens[tokens.index("the")] = " "                            # spelled 'Ġ', already a byte
    with pytest.raises(ValueError, match=r"same token twice: ids \d+ \('Ġ'\) and 257 \(' '\)"):
        tokenizer_from_gguf(meta, len(tokens))


@pytest.mark.parametrize("merge, unknown", [("t x9", "x9"), ("q9 h", "q9"),
                                            ("h e", "he")])    # the merged token, too
def test_a_merge_naming_an_unknown_token_is_named(merge, unknown):
    meta = gguf_metadata(merges=["t h", "th e", merge])
    with pytest.raises(ValueError, match=f"merges' entry 2 \\('{merge}'\\) needs the token "
                                         f"'{unknown}', which is not in the vocabulary"):
        tokenizer_from_gguf(meta, len(meta["tokenizer.ggml.tokens"]))


# -- chat_template.jinja in a model folder --------------------------------------------------
@pytest.fixture
def folder(tmp_path):
    """A folder with tokenizer.json (the tiny BPE) and a tokenizer_config.json template."""
    tiny().inner.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "config: {{ messages[0]['content'] }}", "eos_token": "<|im_end|>"}))
    return tmp_path


def test_chat_template_jinja_overrides_tokenizer_config(folder):
    assert load_tokenizer(folder).apply_chat_template(USER) == "config: the cache"
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}jinja file: {{ m['content'] }}\n{% endfor %}")
    tok = load_tokenizer(folder)
    assert tok.apply_chat_template(USER) == "jinja file: the cache\n"
    assert tok.stop_ids == (tok.inner.token_to_id("<|im_end|>"),)   # the config still counts


def test_chat_template_jinja_alone_and_unreadable(folder):
    (folder / "tokenizer_config.json").unlink()
    (folder / "chat_template.jinja").write_text("only: {{ messages[0]['content'] }}")
    assert load_tokenizer(folder).apply_chat_template(USER) == "only: the cache"
    (folder / "chat_template.jinja").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ValueError, match="chat_template.jinja is not UTF-8"):
        load_tokenizer(folder)


# -- chat templates are untrusted: rendered with limits -------------------------------------
GOOD_TEMPLATES = [
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ '.' if loop.last }}"
    "{% endfor %}{% for x in [] %}x{% else %}none{% endfor %}",
    "{% set ns = namespace(n=0) %}{% for m in messages if m.role == 'user' %}"
    "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }} {{ messages|map(attribute='role')|join(',') }}",
    "{% macro turn(m) %}[{{ m.role|upper }}] {{ m.content|trim }}{% endmacro %}"
    "{% for m in messages %}{{ turn(m) ~ '|' }}{% endfor %}{{ '%s-%d' % ('x', 3) }}",
    "{% for x in [[1, [2]], [3]] recursive %}{% if x is iterable %}({{ loop(x) }})"
    "{% else %}{{ x }}{% endif %}{% endfor %}{{ '{:>4}'.format('ab') }}{{ 2 ** 10 }}",
]


@pytest.mark.parametrize("template", GOOD_TEMPLATES)
def test_ordinary_templates_render_as_plain_jinja_does(template):
    messages = [{"role": "system", "content": " Be brief. "}, *USER]
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    expected = plain.from_string(template).render(messages=messages, add_generation_prompt=True,
                                                  bos_token="", eos_token="<|im_end|>")
    assert tiny(template=template).apply_chat_template(messages) == expected


# Each is finite, so that without the limits a test fails (no ValueError) instead of hanging;
# each is at least ten times past the limit it meets.
RUNAWAY = {
    "nested loops": "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}"
                    "{% endfor %}",
    "loops over messages": "{% for a in messages * 100 %}{% for b in messages * 100 %}"
                           "{% for c in messages * 100 %}{% endfor %}{% endfor %}{% endfor %}",
    "branching macro": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                       "{% endmacro %}{{ f(18) }}",
    "recursive loop": "{% for x in [1] recursive %}{% for y in range(1000) %}{% endfor %}"
                      "{{ loop([1]) }}{% endfor %}",
}
ENDLESS = {
    "macro calling itself": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "loop recursing forever": "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
}
HUGE = {
    "string repeat": "{% set s = 'a' * 10**8 %}{{ s|length }}",
    "list repeat": "{{ ([1] * 10**8)|length }}",
    "doubling with ~": "{% set ns = namespace(s='x') %}{% for i in range(27) %}"
                       "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "doubling with +": "{% set ns = namespace(s='x') %}{% for i in range(27) %}"
                       "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "power": "{{ 7 ** 3000000 > 0 }}",
    "filter width": "{{ ('x'|center(10**8))|length }}",
    "method width": "{{ 'x'.ljust(10**8)|length }}",
    "% width": "{{ ('%100000000s' % 'x')|length }}",
    "format width": "{{ '{:>100000000}'.format('x')|length }}",
    "format filter": "{{ ('%100000000s'|format('x'))|length }}",
    "long output": "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
}


@pytest.fixture
def small_budget(monkeypatch):
    """A budget of 20,000 steps, so the runaway templates stop in a blink."""
    monkeypatch.setattr(tk, "TEMPLATE_STEPS", 20_000)
    monkeypatch.setattr(tk, "TEMPLATE_CHARS", 10**6)


def stopped(template, match):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        tiny(template=template).apply_chat_template(USER)
    return time.perf_counter() - start


@pytest.mark.parametrize("name", RUNAWAY)
def test_runaway_loops_and_recursion_are_stopped(name, small_budget):
    assert stopped(RUNAWAY[name], "stopped: it ran more than 20,000 loop iterations") < 5


@pytest.mark.parametrize("name", ENDLESS)
def test_endless_recursion_is_stopped(name):
    assert stopped(ENDLESS[name], "stopped: it recursed too deeply") < 5


@pytest.mark.parametrize("name", HUGE)
def test_huge_strings_numbers_and_outputs_are_refused(name, small_budget):
    assert stopped(HUGE[name], "stopped: it (built|repeats|passed)|stopped: its (output|format)"
                               "|stopped: .* too large") < 5


def test_the_real_limits_stop_a_runaway_and_a_huge_template():
    nested = "{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
    assert stopped(nested, "more than 1,000,000 loop iterations") < 30
    assert stopped(HUGE["string repeat"], "repeats a str of 1 items 100000000 times") < 5


def test_a_template_past_its_time_is_stopped(monkeypatch):
    monkeypatch.setattr(tk, "TEMPLATE_SECONDS", 0.0)
    stopped(GOOD_TEMPLATES[0], r"stopped: it ran for more than 0 s")


@pytest.mark.parametrize("template, match", [
    ("{{ raise_exception('no system turns') }}", "refused the messages: no system turns"),
    ("{% for %}", "could not be rendered"),
    ("{{ 1 // 0 }}", "could not be rendered: ZeroDivisionError"),
    ("{{ 2.0 ** 100000 }}", "could not be rendered: OverflowError"),
    ("{{ lipsum(1000000) }}", "could not be rendered: 'lipsum' is undefined"),
    ("{{ ''.__class__.__mro__ }}", "could not be rendered"),
])
def test_template_errors_are_value_errors(template, match):
    stopped(template, match)


@pytest.mark.parametrize("call, message", [
    (lambda: tokenizer_from_gguf([("tokenizer.ggml.model", "gpt2")], 261), "metadata must be"),
    (lambda: tokenizer_from_gguf(gguf_metadata(), 261.0), "vocab_size"),
    (lambda: load_tokenizer(42), "path must be a path"),
    (lambda: load_tokenizer(".", vocab_size="320"), "vocab_size"),
])
def test_the_builders_check_their_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()

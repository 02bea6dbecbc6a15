"""Tokenizer: text -> token ids and back, and the chat format a model was tuned on.

A thin layer over the `tokenizers` library. It is built from a model folder's tokenizer.json
(`load_tokenizer`) or from a GGUF file's metadata (`tokenizer_from_gguf`: byte-level BPE, the
GPT-2 split, the file's vocabulary, merges and control tokens, as transformers builds it).
"""
from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path

from . import validate

# Control tokens that end a turn in the chat formats toykv meets (llama.cpp treats the same
# texts as end of generation even when the metadata names only one of them).
END_OF_TURN_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")
GGUF_CONTROL = 3                 # tokenizer.ggml.token_type of a control (special) token
GGUF_USER_DEFINED = 4            # an added token matched whole, but not special
GGUF_PRE_SPLITS_AS_GPT2 = (None, "default", "gpt2", "smollm")   # tokenizer.ggml.pre values
CHATML_TURN = "<|im_start|>{role}\n{content}<|im_end|>\n"        # the fallback chat format


class Tokenizer:
    """Text -> ids (`encode`) and back (`decode`); `apply_chat_template` writes a conversation in
    the model's chat format, and `stop_ids` are the token ids at which a reply ends."""

    def __init__(self, inner, chat_template: str | None = None, stop_ids=(),
                 bos_token: str | None = None, eos_token: str | None = None):
        self.inner = inner                           # a tokenizers.Tokenizer
        self.chat_template = chat_template
        self.stop_ids = tuple(sorted({int(i) for i in stop_ids}))
        self.bos_token, self.eos_token = bos_token, eos_token

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of text; special-token texts such as '<|im_end|>' become their one id."""
        text = validate.text("text", text)
        validate.flag("add_special_tokens", add_special_tokens)
        return list(self.inner.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """The text of ids (a list or 1-D array of ints); special tokens are left out unless
        skip_special_tokens=False."""
        ids = validate.token_ids("ids", ids, self.vocab_size)
        validate.flag("skip_special_tokens", skip_special_tokens)
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        return self.inner.get_vocab_size(with_added_tokens=True)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        """The conversation as the model expects it; messages: [{"role", "content"}, ...] with
        roles system/user/assistant. add_generation_prompt opens the assistant's turn.
        The template is untrusted input: it renders in Jinja's sandbox with limits
        (TEMPLATE_STEPS, TEMPLATE_CHARS, TEMPLATE_SECONDS), and one that passes them, or
        fails, raises a ValueError."""
        validate.flag("add_generation_prompt", add_generation_prompt)
        messages = _check_messages(messages)
        if self.chat_template is None:
            if "<|im_start|>" not in self.inner.get_vocab():
                raise ValueError("this tokenizer has no chat template and no ChatML tokens")
            text = "".join(CHATML_TURN.format(**m) for m in messages)
            return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")
        return _render(self.chat_template, messages, add_generation_prompt,
                       bos_token=self.bos_token or "", eos_token=self.eos_token or "")

    def encode_chat(self, messages, add_generation_prompt: bool = True) -> list[int]:
        """Token ids of apply_chat_template's text (the template writes any special tokens)."""
        validate.flag("add_generation_prompt", add_generation_prompt)
        return self.encode(self.apply_chat_template(messages, add_generation_prompt),
                           add_special_tokens=False)


def _check_messages(messages) -> list[dict]:
    if isinstance(messages, (str, dict)) or not hasattr(messages, "__iter__"):
        raise ValueError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, "
                         f"got {type(messages).__name__}")
    messages = list(messages)
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise ValueError(f"messages[{i}] must be a dict with keys 'role' and 'content', "
                             f"got {m!r}"[:200])
        if m["role"] not in ("system", "user", "assistant") or not isinstance(m["content"], str):
            raise ValueError(f"messages[{i}] needs role 'system', 'user' or 'assistant' and "
                             f"str content, got role {m['role']!r} and "
                             f"{type(m['content']).__name__} content")
        validate.text(f"messages[{i}]['content']", m["content"])
    if not messages:
        raise ValueError("messages is empty: give at least one turn")
    return messages


# A chat template comes with a model's files, so it is untrusted input: it is rendered in
# Jinja's sandbox with these limits, and a template that passes one gets a ValueError.
TEMPLATE_STEPS = 1_000_000        # loop iterations plus calls in one rendering
TEMPLATE_CHARS = 10_000_000       # the longest string (or list) it may build, and its output
TEMPLATE_SECONDS = 10.0           # wall-clock time of one rendering
# the width and precision fields of printf-style ('%9999s') and str.format ('{:>9999}') specs
_FORMAT_FIELDS = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d*))?|\{[^{}:]*:[^{}\d]*(\d*)"
                            r"(?:[^{}\d]*(\d*))?")


class _TemplateLimit(Exception):
    """A chat template went past one of the limits above."""


class _Refused(Exception):
    """The template itself refused the messages (its raise_exception())."""


def _limited_sandbox():
    """A Jinja sandbox that counts every loop iteration and call, bounds the sizes of the
    strings and lists it builds, and stops at TEMPLATE_STEPS or TEMPLATE_SECONDS."""
    from jinja2.runtime import LoopContext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class LimitedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+", "%"])

        def __init__(self):
            super().__init__(trim_blocks=True, lstrip_blocks=True)   # as transformers renders
            self.steps, self.deadline = 0, time.monotonic() + TEMPLATE_SECONDS
            self.globals.pop("lipsum", None)                         # a loop no template needs
            self.globals["_toykv_counted"] = self.counted
            self.globals["_toykv_sized"] = _check_size
            self.filters = {name: self.checked_filter(f) for name, f in self.filters.items()}

        def tick(self):
            self.steps += 1
            if self.steps > TEMPLATE_STEPS:
                raise _TemplateLimit(f"it ran more than {TEMPLATE_STEPS:,} loop iterations "
                                     "and calls (a runaway loop or recursion?)")
            if time.monotonic() > self.deadline:
                raise _TemplateLimit(f"it ran for more than {TEMPLATE_SECONDS:g} s")

        def counted(self, iterable):
            """The items of a loop, one step each."""
            for item in iterable:
                self.tick()
                yield item

        def call(__self, __context, __obj, *args, **kwargs):       # noqa: N805 (jinja's names)
            __self.tick()
            _check_arguments(args, kwargs)
            method = getattr(__obj, "__wrapped__", __obj)            # the sandbox wraps .format
            if getattr(method, "__name__", "") in ("format", "format_map") and \
                    isinstance(getattr(method, "__self__", None), str):
                _check_format(method.__self__)                       # '{:>99999999}'.format()
            if isinstance(__obj, LoopContext) and args:              # a recursive loop's items
                args = (__self.counted(args[0]), *args[1:])
            return super().call(__context, __obj, *args, **kwargs)

        def call_binop(self, context, operator, left, right):
            self.tick()
            if operator == "*":
                _check_repeat(left, right)
            elif operator == "**" and isinstance(left, int) and isinstance(right, int):
                if right > 0 and right * max(abs(left), 2).bit_length() > 64 * 1024:
                    raise _TemplateLimit(f"{left} ** {right} is a number too large to compute")
            elif operator == "%" and isinstance(left, str):
                _check_format(left)
            return _check_size(super().call_binop(context, operator, left, right))

        def checked_filter(self, function):
            @functools.wraps(function)                               # keeps pass_context marks
            def checked(*args, **kwargs):
                self.tick()
                _check_arguments(args[1:], kwargs)
                if function.__name__ == "do_format" and args and isinstance(args[0], str):
                    _check_format(args[0])
                return _check_size(function(*args, **kwargs))
            return checked

    return LimitedSandbox()


def _counting_pass():
    """A pass over the parsed template: every loop's items are counted (_toykv_counted) and
    every string joined with ~ is size-checked (_toykv_sized), which the sandbox cannot see."""
    from jinja2 import nodes
    from jinja2.visitor import NodeTransformer

    def wrapped(function: str, node):
        return nodes.Call(nodes.Name(function, "load", lineno=node.lineno), [node], [], None,
                          None, lineno=node.lineno)

    class Bounded(NodeTransformer):
        def visit_For(self, node):
            node = self.generic_visit(node)
            node.iter = wrapped("_toykv_counted", node.iter)
            return node

        def visit_Concat(self, node):
            return wrapped("_toykv_sized", self.generic_visit(node))

    return Bounded()


def _check_size(value):
    """value, unless it is a string or list longer than TEMPLATE_CHARS."""
    if isinstance(value, (str, list, tuple)) and len(value) > TEMPLATE_CHARS:
        unit = "characters" if isinstance(value, str) else "items"
        raise _TemplateLimit(f"it built a {type(value).__name__} of {len(value):,} {unit}, "
                             f"more than {TEMPLATE_CHARS:,}")
    return value


def _check_arguments(args, kwargs):
    """No number above TEMPLATE_CHARS as an argument (a width or a count: 'x'|center(10**9))."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and abs(value) > TEMPLATE_CHARS:
            raise _TemplateLimit(f"it passed the number {value} to a function, more than "
                                 f"{TEMPLATE_CHARS:,}")


def _check_repeat(left, right):
    """A sequence * n must not outgrow TEMPLATE_CHARS ('a' * 10**10)."""
    for seq, n in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
            if len(seq) * max(n, 0) > TEMPLATE_CHARS:
                raise _TemplateLimit(f"it repeats a {type(seq).__name__} of {len(seq):,} items "
                                     f"{n} times, more than {TEMPLATE_CHARS:,} items")


def _check_format(text: str):
    """No width or precision above TEMPLATE_CHARS in a format string ('%999999999s')."""
    limit = str(TEMPLATE_CHARS)
    numbers = [n for fields in _FORMAT_FIELDS.findall(text) for n in fields if n]
    if any(len(n) > len(limit) or int(n) > TEMPLATE_CHARS for n in numbers):
        raise _TemplateLimit("its format string asks for a field wider than "
                             f"{TEMPLATE_CHARS:,} characters")


def _render(template: str, messages, add_generation_prompt: bool, **tokens) -> str:
    """A Jinja chat template rendered as transformers renders it (sandboxed, trimmed blocks),
    with limits: every loop counted, calls counted, sizes bounded, output streamed."""
    try:
        from jinja2 import TemplateError
    except ImportError:
        raise ImportError("chat templates need the jinja2 package (pip install jinja2)") from None

    def raise_exception(message):
        raise _Refused(f"the chat template refused the messages: {message}")

    env = _limited_sandbox()
    env.globals["raise_exception"] = raise_exception
    try:
        tree = _counting_pass().visit(env.parse(template))
        tree.set_environment(env)
        compiled = env.template_class.from_code(env, env.compile(tree), env.make_globals(None))
        pieces, length = [], 0
        for piece in compiled.generate(messages=messages,
                                       add_generation_prompt=add_generation_prompt, **tokens):
            length += len(piece)
            if length > TEMPLATE_CHARS:
                raise _TemplateLimit(f"its output is longer than {TEMPLATE_CHARS:,} characters")
            pieces.append(piece)
        return "".join(pieces)
    except _Refused as err:
        raise ValueError(str(err)) from None
    except _TemplateLimit as err:
        raise ValueError(f"the chat template was stopped: {err}") from None
    except RecursionError:
        raise ValueError("the chat template was stopped: it recursed too deeply (a macro or "
                         "loop that calls itself without end?)") from None
    except TemplateError as err:
        raise ValueError(f"the chat template could not be rendered: {err}") from None
    except Exception as err:                 # anything else the template's own code raised
        raise ValueError(f"the chat template could not be rendered: {type(err).__name__}: "
                         f"{err}") from None


# -- from a model folder ------------------------------------------------------------------
def load_tokenizer(path, vocab_size: int | None = None) -> Tokenizer | None:
    """The folder's tokenizer.json as a Tokenizer, or None when it has none. The chat template
    is chat_template.jinja when present (transformers' own file, which takes precedence),
    else tokenizer_config.json's chat_template; the end-of-turn token is its eos_token."""
    path = validate.file_path("path", path)
    validate.optional_count("vocab_size", vocab_size, 1)
    file = path / "tokenizer.json"
    if not file.is_file():
        return None
    from tokenizers import Tokenizer as HFTokenizer
    try:
        inner = HFTokenizer.from_file(str(file))
    except Exception as err:                        # tokenizers raises a bare Exception
        raise ValueError(f"{file} is not a readable tokenizer.json: {err}") from None
    settings = _read_json_object(path / "tokenizer_config.json")
    template = _read_template(path / "chat_template.jinja")
    if template is None:
        template = settings.get("chat_template")
    eos = settings.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    stop = [inner.token_to_id(eos)] if isinstance(eos, str) else []
    tokenizer = Tokenizer(inner, template if isinstance(template, str) else None,
                          [i for i in stop if i is not None], eos_token=eos)
    if vocab_size is not None and tokenizer.vocab_size > vocab_size:
        raise ValueError(f"tokenizer.json has {tokenizer.vocab_size} tokens but the model's "
                         f"vocab_size is {vocab_size}: ids would fall outside the embedding")
    return tokenizer


def _read_template(file: Path) -> str | None:
    """A chat_template.jinja file's text; None when the folder has none."""
    if not file.is_file():
        return None
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{file} is not UTF-8 text: {err}") from None


def _read_json_object(file: Path) -> dict:
    """A JSON object file's contents; {} when the file is absent."""
    if not file.is_file():
        return {}
    try:
        value = json.loads(file.read_text())
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as err:
        raise ValueError(f"{file} is not a readable JSON file: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{file} must hold a JSON object, got {type(value).__name__}")
    return value


# -- from GGUF metadata -------------------------------------------------------------------
def tokenizer_from_gguf(metadata: dict, vocab_size: int) -> Tokenizer:
    """A Tokenizer from a GGUF's tokenizer.* metadata (key -> value, arrays as lists), as
    transformers builds it: byte-level BPE, the GPT-2 split, control tokens kept whole."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    if not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict of GGUF keys, got {type(metadata).__name__}")
    validate.count("vocab_size", vocab_size, 1)
    tokens, merges, types = _gguf_vocab(metadata, vocab_size)
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())    # the 256 characters bytes map to
    spelled = [t if set(t) <= alphabet else _byte_spelling(t) for t in tokens]
    vocab = {}
    for i, token in enumerate(spelled):          # a token twice: encode and decode lose one
        if vocab.setdefault(token, i) != i:
            j = vocab[token]
            raise ValueError(f"GGUF metadata 'tokenizer.ggml.tokens' holds the same token "
                             f"twice: ids {j} ({tokens[j]!r}) and {i} ({tokens[i]!r})")
    _check_merges(merges, vocab)
    inner = HFTokenizer(models.BPE(vocab=vocab,
                                   merges=[tuple(m.split(" ")) for m in merges],
                                   dropout=None, continuing_subword_prefix="",
                                   end_of_word_suffix="", fuse_unk=False))
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    # a control token outside the byte alphabet is a llama.cpp mislabel: transformers skips it
    control = [t for t, kind in zip(tokens, types) if kind == GGUF_CONTROL and set(t) <= alphabet]
    inner.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    inner.add_tokens([AddedToken(t, special=False, normalized=False)
                      for t, kind in zip(spelled, types) if kind == GGUF_USER_DEFINED])

    def token(key):                                 # the text of a special token id, or None
        index = metadata.get(f"tokenizer.ggml.{key}")
        return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else None

    stop = {metadata.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")}
    stop |= {i for i, t in enumerate(tokens) if t in END_OF_TURN_TEXTS and t in control}
    template = metadata.get("tokenizer.chat_template")
    return Tokenizer(inner, template if isinstance(template, str) else None,
                     [i for i in stop if isinstance(i, int) and 0 <= i < len(tokens)],
                     bos_token=token("bos_token_id"), eos_token=token("eos_token_id"))


def _byte_spelling(token: str) -> str:
    """token's UTF-8 bytes in the byte-level alphabet (GGUFs store some tokens as plain text)."""
    bytes_to_char = _bytes_to_unicode()
    return "".join(bytes_to_char[b] for b in token.encode("utf-8"))


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from the 256 byte values to printable characters (printable ones stay)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}


def _gguf_vocab(metadata: dict, vocab_size: int):
    """(tokens, merges, token types), checked; ValueError naming the metadata key at fault."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind is None:
        raise ValueError("the GGUF has no tokenizer: metadata key 'tokenizer.ggml.model' is "
                         "missing")
    if kind != "gpt2":
        raise ValueError(f"GGUF metadata 'tokenizer.ggml.model' is {kind!r}: toykv builds "
                         "only byte-level BPE tokenizers ('gpt2')")
    pre = metadata.get("tokenizer.ggml.pre")
    if pre not in GGUF_PRE_SPLITS_AS_GPT2:
        raise ValueError(f"GGUF metadata 'tokenizer.ggml.pre' is {pre!r}: toykv knows the "
                         f"GPT-2 split only, used by {GGUF_PRE_SPLITS_AS_GPT2[1:]}")
    lists = {}
    for key, item in (("tokens", str), ("merges", str), ("token_type", int)):
        value = metadata.get(f"tokenizer.ggml.{key}")
        if value is None and key == "token_type":
            value = [1] * len(lists["tokens"])            # 1: every token normal
        if not isinstance(value, list) or not value or not all(isinstance(v, item) for v in value):
            got = "missing" if value is None else f"{type(value).__name__} of {len(value) if hasattr(value, '__len__') else '?'}"
            raise ValueError(f"GGUF metadata 'tokenizer.ggml.{key}' must be a non-empty list of "
                             f"{item.__name__}, got {got}")
        lists[key] = value
    tokens, merges, types = lists["tokens"], lists["merges"], lists["token_type"]
    if len(tokens) != vocab_size or len(types) != len(tokens):
        raise ValueError(f"GGUF metadata 'tokenizer.ggml.tokens' has {len(tokens)} tokens and "
                         f"'tokenizer.ggml.token_type' {len(types)}, the model's vocab_size is "
                         f"{vocab_size}")
    bad = next((m for m in merges if len(m.split(" ")) != 2), None)
    if bad is not None:
        raise ValueError(f"GGUF metadata 'tokenizer.ggml.merges' entry {bad!r} is not two "
                         "tokens separated by one space")
    return tokens, merges, types


def _check_merges(merges: list[str], vocab: dict):
    """Every merge 'a b' names two tokens of the vocabulary and makes one (tokenizers would
    fail with a bare Exception, or a panic for the merged token)."""
    for i, merge in enumerate(merges):
        a, b = merge.split(" ")
        unknown = next((t for t in (a, b, a + b) if t not in vocab), None)
        if unknown is not None:
            raise ValueError(f"GGUF metadata 'tokenizer.ggml.merges' entry {i} ({merge!r}) "
                             f"needs the token {unknown!r}, which is not in the vocabulary")


__all__ = ["Tokenizer", "load_tokenizer", "tokenizer_from_gguf"]

"""Tokenizer: text -> token ids and back, and the chat format a model was tuned on.

A thin layer over the `tokenizers` library. It is built from a model folder's tokenizer.json
(`load_tokenizer`) or from a GGUF file's metadata (`tokenizer_from_gguf`: byte-level BPE, the
GPT-2 split, the file's vocabulary, merges and control tokens, as transformers builds it).
"""
from __future__ import annotations

import json
from pathlib import Path

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
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        return list(self.inner.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """The text of ids; special tokens are left out unless skip_special_tokens=False."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside [0, {self.vocab_size})")
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        return self.inner.get_vocab_size(with_added_tokens=True)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        """The conversation as the model expects it; messages: [{"role", "content"}, ...] with
        roles system/user/assistant. add_generation_prompt opens the assistant's turn."""
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
    if not messages:
        raise ValueError("messages is empty: give at least one turn")
    return messages


def _render(template: str, messages, add_generation_prompt: bool, **tokens) -> str:
    """A Jinja chat template rendered as transformers renders it (sandboxed, trimmed blocks)."""
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ImportError("chat templates need the jinja2 package (pip install jinja2)") from None

    def raise_exception(message):
        raise ValueError(f"the chat template refused the messages: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **tokens)
    except TemplateError as err:
        raise ValueError(f"the chat template could not be rendered: {err}") from None


# -- from a model folder ------------------------------------------------------------------
def load_tokenizer(path, vocab_size: int | None = None) -> Tokenizer | None:
    """The folder's tokenizer.json as a Tokenizer (chat template and end-of-turn token from
    tokenizer_config.json when present), or None when it has none."""
    path = Path(path)
    file = path / "tokenizer.json"
    if not file.is_file():
        return None
    from tokenizers import Tokenizer as HFTokenizer
    try:
        inner = HFTokenizer.from_file(str(file))
    except Exception as err:                        # tokenizers raises a bare Exception
        raise ValueError(f"{file} is not a readable tokenizer.json: {err}") from None
    settings = _read_json_object(path / "tokenizer_config.json")
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

    tokens, merges, types = _gguf_vocab(metadata, vocab_size)
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())    # the 256 characters bytes map to
    spelled = [t if set(t) <= alphabet else _byte_spelling(t) for t in tokens]
    inner = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(spelled)},
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


__all__ = ["Tokenizer", "load_tokenizer", "tokenizer_from_gguf"]

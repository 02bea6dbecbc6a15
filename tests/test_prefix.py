"""Prefix reuse: decode_steps continuing a given cache, suffix_after, compare_reuse.

Expected tokens come from independent runs: generation from scratch over the whole prompt,
and greedy argmax of full passes without any cache.
"""
import numpy as np
import pytest
from conftest import VARIANTS, make_model
from conftest import token_ids as ids

from toykv import decode_steps, generate
from toykv.prefix import compare_reuse, suffix_after

PREFIX, QUESTION = ids(10, seed=1), ids(4, seed=2)
PROMPT = PREFIX + QUESTION


def prefix_cache(model):
    cache = model.new_cache()
    model.forward(PREFIX, cache)
    return cache


def greedy_by_full_passes(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(np.argmax(model.forward(seq)[-1])))
    return seq[len(prompt):]


@pytest.mark.parametrize("name", VARIANTS)
def test_generate_from_a_copied_prefix_equals_generation_from_scratch(name):
    model = make_model(name, exact=True)
    cache = prefix_cache(model)
    reused = generate(model, QUESTION, 8, cache=cache.copy())
    assert reused == generate(model, PROMPT, 8) == greedy_by_full_passes(model, PROMPT, 8)
    assert len(cache) == len(PREFIX)                    # the copy was filled, not the prefix


def test_steps_from_a_cache_count_the_whole_context():
    model = make_model("gqa")
    cache = prefix_cache(model).copy()
    steps = list(decode_steps(model, QUESTION, 5, cache=cache))
    P = len(PROMPT)
    assert [s.context for s in steps] == [P + i for i in range(5)]
    assert [s.tokens_in for s in steps] == [len(QUESTION)] + [1] * 4
    assert [s.cache_tokens for s in steps] == [P + i for i in range(5)]
    assert steps[-1].cache_bytes == cache.nbytes and len(cache) == P + 4


def test_a_given_cache_is_checked_before_any_forward_pass():
    model = make_model("gqa")
    cache = prefix_cache(model)
    with pytest.raises(ValueError, match="use_cache=False"):
        list(decode_steps(model, QUESTION, 3, use_cache=False, cache=cache))
    with pytest.raises(ValueError, match="10 cached tokens"):
        list(decode_steps(model, QUESTION, 64, cache=cache))     # 10 + 4 + 63 > 64
    with pytest.raises(ValueError, match="belongs to another ToyTransformer"):
        list(decode_steps(make_model("gqa", seed=1), QUESTION, 3, cache=cache))
    with pytest.raises(ValueError, match="batch"):
        list(decode_steps(model, QUESTION, 3, cache=model.new_cache(batch=2)))
    assert len(cache) == len(PREFIX)


def test_suffix_after():
    assert suffix_after(PROMPT, PREFIX) == QUESTION
    assert suffix_after(np.array(PROMPT), np.array(PREFIX)) == QUESTION
    with pytest.raises(ValueError, match="token 3 is"):
        suffix_after(PROMPT[:3] + [PROMPT[3] + 1] + PROMPT[4:], PREFIX)
    with pytest.raises(ValueError, match="nothing would follow"):
        suffix_after(PREFIX, PREFIX)
    with pytest.raises(ValueError, match="empty"):
        suffix_after(PROMPT, [])
    with pytest.raises(ValueError, match=r"prompt_ids\[0\] must be an integer"):
        suffix_after([1.5, 2], [1])
    with pytest.raises(ValueError, match="prefix_ids must be a sequence of token ids"):
        suffix_after(PROMPT, "12")                       # not the tokens 1 and 2


def test_compare_reuse():
    model = make_model("mha", exact=True)
    cache = prefix_cache(model)
    run = compare_reuse(model, PREFIX, cache, PROMPT, 6)
    expected = greedy_by_full_passes(model, PROMPT, 6)
    assert [s.token for s in run["fresh"]] == [s.token for s in run["reused"]] == expected
    assert run["same_tokens"] and run["suffix"] == QUESTION
    assert run["fresh"][0].tokens_in == len(PROMPT)
    assert run["reused"][0].tokens_in == len(QUESTION)
    assert run["reused"][0].flops < run["fresh"][0].flops
    assert run["first_token_reused"] == run["copy_seconds"] + run["reused"][0].seconds
    assert run["first_token_fresh"] == run["fresh"][0].seconds
    assert len(cache) == len(PREFIX)                     # reusable for the next prompt


def test_compare_reuse_refuses_a_cache_of_another_length():
    model = make_model("mha")
    cache = prefix_cache(model)
    model.forward([1], cache)                            # 11 tokens now, prefix has 10
    with pytest.raises(ValueError, match="KVCache of the 10 prefix tokens, got 11"):
        compare_reuse(model, PREFIX, cache, PROMPT, 3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        compare_reuse(model, PREFIX, prefix_cache(model), PROMPT, 0)


def no_generation(monkeypatch):
    """decode_steps replaced by one that fails the test: nothing may be generated."""
    from toykv import prefix

    def refuse(*args, **kwargs):
        raise AssertionError("a generation ran before the arguments were checked")

    monkeypatch.setattr(prefix, "decode_steps", refuse)


def test_a_foreign_or_batched_prefix_cache_is_refused_before_any_generation(monkeypatch):
    model, other = make_model("mha"), make_model("mha", seed=1)          # equal configs
    foreign = prefix_cache(other)
    batched = model.new_cache(batch=2)
    model.forward(np.array([PREFIX, PREFIX]), batched)
    no_generation(monkeypatch)
    with pytest.raises(ValueError, match="belongs to another ToyTransformer"):
        compare_reuse(model, PREFIX, foreign, PROMPT, 3)
    with pytest.raises(ValueError, match="holds a batch of 2 sequences"):
        compare_reuse(model, PREFIX, batched, PROMPT, 3)
    assert len(foreign) == len(batched) == len(PREFIX)                 # left as they were


MODEL, CACHE = "the model", "its prefix cache"           # stand-ins, filled in by the test


@pytest.mark.parametrize("args, message", [
    (("a config", PREFIX, CACHE, PROMPT, 3), "model must be a toykv.ToyTransformer"),
    ((MODEL, PREFIX, CACHE, "12345", 3), "prompt_ids must be a sequence"),
    ((MODEL, PREFIX, CACHE, 7, 3), "prompt_ids must be a sequence"),
    ((MODEL, PREFIX, CACHE, [float(t) for t in PROMPT], 3), r"prompt_ids\[0\] must be an int"),
    ((MODEL, PREFIX, CACHE, PREFIX + [64], 3), "outside"),              # vocab_size is 64
    ((MODEL, PREFIX, CACHE, range(10**12), 3), "more than the 64 allowed"),
    ((MODEL, PREFIX, CACHE, PROMPT, 2.0), "max_new_tokens"),
    ((MODEL, PREFIX, "cache", PROMPT, 3), "KVCache of the 10 prefix tokens, got str"),
    ((MODEL, PREFIX, "a config", PROMPT, 3), "10 prefix tokens, got ModelConfig"),
])
def test_bad_arguments_are_refused_before_any_generation(monkeypatch, args, message):
    model = make_model("mha")
    fill = {MODEL: model, CACHE: prefix_cache(model), "a config": model.config}
    args = [fill.get(a, a) if isinstance(a, str) else a for a in args]
    no_generation(monkeypatch)
    with pytest.raises(ValueError, match=message):
        compare_reuse(*args)

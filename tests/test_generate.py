"""Greedy generation: the cache changes no token; each Step reports what it did."""
import numpy as np
import pytest
from conftest import BASE, VARIANTS, make_model

from toykv import Step, decode_steps, generate

PROMPT = [5, 17, 3, 42, 8, 8, 1]


def toy(name="mha", seed=0, exact=False):
    return make_model(name, exact=exact, seed=seed)


@pytest.mark.parametrize("name", VARIANTS)
def test_same_tokens_with_and_without_cache(name):
    model = toy(name)
    cached = generate(model, PROMPT, 24)
    assert cached == generate(model, PROMPT, 24, use_cache=False)
    assert len(cached) == 24 and all(0 <= t < 64 for t in cached)


def test_same_tokens_with_and_without_cache_exact_backend():
    model = toy("gqa", exact=True)
    assert generate(model, PROMPT, 12) == generate(model, PROMPT, 12, use_cache=False)


def test_generate_is_greedy_argmax_of_a_full_pass():
    model = toy("gqa")
    ids = list(PROMPT)
    for _ in range(6):
        ids.append(int(np.argmax(model.forward(ids)[-1])))
    assert generate(model, PROMPT, 6) == ids[len(PROMPT):]


@pytest.mark.parametrize("use_cache", [True, False])
def test_decode_steps_report_phase_sizes_and_cache(use_cache):
    model, n = toy("gqa"), 9
    c, P = model.config, len(PROMPT)
    steps = list(decode_steps(model, PROMPT, n, use_cache=use_cache))
    assert [s.index for s in steps] == list(range(n))
    assert [s.phase for s in steps] == ["prefill"] + ["decode"] * (n - 1)
    for s in steps:
        assert isinstance(s, Step)
        assert s.context == P + s.index
        assert s.tokens_in == (1 if use_cache and s.index > 0 else s.context)
        assert s.logits.shape == (c.vocab_size,) and s.token == int(np.argmax(s.logits))
        assert s.seconds > 0 and s.flops > 0
        if use_cache:
            assert s.cache_tokens == s.context
            assert s.cache_bytes == 2 * c.n_layers * c.n_kv_heads * c.head_dim * s.context * 4
        else:
            assert s.cache_tokens == 0 and s.cache_bytes == 0
    assert [s.token for s in steps] == generate(model, PROMPT, n)


def test_decode_steps_with_int8_cache_reports_its_bytes():
    model = toy("mha")
    c = model.config
    last = list(decode_steps(model, PROMPT, 4, kv_dtype="int8"))[-1]
    T = len(PROMPT) + 3
    assert last.cache_bytes == 2 * c.n_layers * c.n_kv_heads * (c.head_dim + 4) * T


def test_zero_new_tokens_gives_empty_list():
    assert generate(toy(), PROMPT, 0) == []
    assert generate(toy(), PROMPT, 0, use_cache=False) == []


@pytest.mark.parametrize("bad", [-1, -5, 2.0, True, "3"])
def test_generate_rejects_bad_max_new_tokens(bad):
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(toy(), PROMPT, bad)


@pytest.mark.parametrize("bad", [[], [64], [1.5], [[1, 2]], [[1, 2], [3]]])
def test_generate_rejects_bad_prompts(bad):
    with pytest.raises(ValueError, match="token"):
        generate(toy(), bad, 3)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_that_cannot_fit_is_refused_before_any_forward_pass(use_cache):
    model = toy()
    fits = BASE["max_seq_len"] - len(PROMPT) + 1     # the last new token is never fed back
    with pytest.raises(ValueError, match="max_seq_len"):
        decode_steps(model, PROMPT, fits + 1, use_cache=use_cache)   # at the call, not later
    with pytest.raises(ValueError, match="max_seq_len"):
        generate(model, PROMPT, 10**9, use_cache=use_cache)
    assert model.flops == 0                          # nothing was run
    assert len(generate(model, PROMPT, fits, use_cache=use_cache)) == 58


def test_prompt_longer_than_max_seq_len_is_refused_even_for_zero_tokens():
    with pytest.raises(ValueError, match="max_seq_len"):
        generate(toy(), [1] * (BASE["max_seq_len"] + 1), 0)


# -- stop tokens ------------------------------------------------------------------------------

@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("name", ["gqa", "mla_absorbed", "mixed"])
def test_stop_ids_end_generation_with_the_stop_token(name, use_cache):
    model = toy(name)
    free = generate(model, PROMPT, 20, use_cache=use_cache)
    stop = free[5]                                   # a token it produces at step 5 (or earlier)
    first = free.index(stop)
    expected = free[:first + 1]                      # as Hugging Face: the stop token is kept
    assert generate(model, PROMPT, 20, use_cache, stop_ids=[stop]) == expected
    assert generate(model, PROMPT, 20, use_cache, stop_ids=stop) == expected
    assert generate(model, PROMPT, 20, use_cache, stop_ids=np.array([stop])) == expected
    steps = list(decode_steps(model, PROMPT, 20, use_cache, stop_ids={stop}))
    assert [s.token for s in steps] == expected and steps[-1].token == stop


def test_stop_ids_never_produced_change_nothing():
    model = toy()
    free = generate(model, PROMPT, 15)
    unused = [t for t in range(BASE["vocab_size"]) if t not in free]
    assert generate(model, PROMPT, 15, stop_ids=unused) == free
    assert generate(model, PROMPT, 15, stop_ids=[]) == free


@pytest.mark.parametrize("bad", [-1, 64, 1.5, True, "2", ["a"], [[1, 2], [3]]])
def test_bad_stop_ids_are_refused(bad):
    with pytest.raises(ValueError, match="stop_ids"):
        generate(toy(), PROMPT, 3, stop_ids=bad)


def test_determinism_same_seed_same_tokens_different_seed_different():
    first = generate(toy(seed=11), PROMPT, 20)
    assert first == generate(toy(seed=11), PROMPT, 20)
    assert first != generate(toy(seed=12), PROMPT, 20)


def test_numpy_prompts_and_counts_are_accepted():
    model = toy()
    free = generate(model, PROMPT, 5)
    assert generate(model, np.array(PROMPT), np.int64(5)) == free
    stop = np.int64(free[2])
    assert generate(model, PROMPT, 5, stop_ids=stop) == free[:free.index(free[2]) + 1]

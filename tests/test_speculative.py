"""Speculative decoding gives greedy decoding's tokens and leaves greedy decoding's cache.

The expected tokens and caches come from toykv.decode_steps (plain greedy decoding, one token
per pass) with the exact backend, so they must agree bit for bit; the formulas are checked
against hand values and against a simulation of independent acceptances.
"""
import numpy as np
import pytest
from conftest import make_model
from conftest import token_ids as ids
from test_cache_steps import assert_same, snapshot

import toykv
from toykv import speculative as sp

KINDS = ["mha", "gqa", "mla_absorbed", "mla_expanded"]


def prompts():
    """Prompts where lookup finds matches (a repeated stretch) and where it finds few."""
    return [ids(12, seed=1) * 2, ids(20, seed=2), ids(5, seed=3) * 4]


def proposers(model):
    return [sp.PromptLookup(k=4), sp.PromptLookup(k=1, max_ngram=2),
            sp.DraftModel(sp.skip_layers(model, [0]), k=3)]


def plain_run(model, prompt, n, stop_ids=None):
    cache = model.new_cache()
    steps = list(toykv.decode_steps(model, prompt, n, stop_ids=stop_ids, cache=cache))
    return [s.token for s in steps], cache


@pytest.mark.parametrize("kind", KINDS)
def test_tokens_and_cache_equal_plain_greedy_decoding(kind):
    model = make_model(kind, exact=True)
    for prompt in prompts():
        tokens, cache = plain_run(model, prompt, 30)
        for proposer in proposers(model):
            mine = model.new_cache()
            steps = list(sp.speculative_steps(model, prompt, 30, proposer, cache=mine))
            assert [t for s in steps for t in s.tokens] == tokens, proposer
            assert_same(snapshot(mine), snapshot(cache))     # bit for bit, len and nbytes
            assert steps[-1].cache_tokens == len(cache)


def test_some_proposals_are_accepted_and_some_rejected():
    model = make_model("gqa", exact=True)
    steps = list(sp.speculative_steps(model, prompts()[0], 30, sp.PromptLookup(k=4)))
    stats = sp.acceptance(steps)
    assert stats["accepted"] > 0 and stats["tokens"] == 29
    assert stats["verify_steps"] < 29                          # fewer passes than tokens
    assert any(s.rolled_back for s in steps)                   # and some were dropped
    assert all(s.rolled_back == len(s.proposed) - s.accepted for s in steps)
    assert stats["tokens_per_step"] == pytest.approx(29 / stats["verify_steps"])


def test_generate_takes_a_proposer_and_stops_where_plain_decoding_stops():
    model = make_model("mha", exact=True)
    prompt = prompts()[2]
    tokens, _ = plain_run(model, prompt, 30)
    stop = tokens[7]                                           # a token the answer makes
    want, cache = plain_run(model, prompt, 30, stop_ids=stop)
    assert want[-1] == stop and len(want) <= 8
    mine = model.new_cache()
    got = toykv.generate(model, prompt, 30, stop_ids=stop, cache=mine,
                         speculative=sp.PromptLookup(k=4))
    assert got == want
    assert_same(snapshot(mine), snapshot(cache))
    assert toykv.generate(model, prompt, 1, speculative=sp.PromptLookup()) == tokens[:1]
    assert toykv.generate(model, prompt, 0, speculative=sp.PromptLookup()) == []


def test_verify_step_keeps_the_agreeing_prefix_and_the_models_next_token():
    model = make_model("mha", exact=True)
    prompt = ids(6)
    tokens, _ = plain_run(model, prompt, 5)
    wrong = (tokens[2] + 1) % 64
    cache = model.new_cache()
    model.forward(prompt[:-1], cache)
    verified = sp.verify_step(model, cache, prompt[-1], tokens[:2] + [wrong, tokens[3]])
    assert verified.accepted == 2 and verified.tokens == tokens[:3]
    assert len(cache) == len(prompt) + 2 and verified.logits.shape == (5, 64)


def test_prompt_lookup_proposes_what_followed_the_earliest_match():
    look = sp.PromptLookup(k=3, max_ngram=2)
    assert look([5, 6, 7, 8, 9, 1, 5, 6], 3) == [7, 8, 9]      # bigram 5 6
    assert look([5, 6, 7, 8, 9, 1, 2, 6], 3) == [7, 8, 9]      # unigram 6
    assert look([5, 6, 7, 5, 6, 1, 5, 6], 2) == [7, 5]         # earliest of two matches
    assert look([1, 2, 3, 4], 3) == []                         # nothing to match
    assert look([4], 3) == []


def test_the_draft_rolls_its_own_cache_back():
    model = make_model("mha", exact=True)
    draft = sp.DraftModel(sp.skip_layers(model, [1]), k=3)
    prompt = ids(8)
    first = draft(prompt, 3)
    assert len(draft.cache) == len(prompt) + 2
    again = draft(prompt + [first[0] ^ 1], 3)                 # its proposal rejected
    fresh = sp.DraftModel(sp.skip_layers(model, [1]), k=3)(prompt + [first[0] ^ 1], 3)
    assert again == fresh


def test_skip_layers_keeps_the_chosen_layers_weights():
    model = make_model("mixed", exact=True)
    draft = sp.skip_layers(model, [1])
    assert draft.config.n_layers == 1 and draft.config.layer_types == ("full",)
    assert np.array_equal(draft.layers[0]["wq"], model.layers[1]["wq"])
    for keep, match in [([], "at least one"), ([1, 0], "increasing"), ([2], r"in \[0, 1\]")]:
        with pytest.raises(ValueError, match=match):
            sp.skip_layers(model, keep)


def test_formulas():
    assert sp.expected_tokens_per_step(0.0, 4) == 1.0
    assert sp.expected_tokens_per_step(1.0, 4) == 5.0
    assert sp.expected_tokens_per_step(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert sp.expected_speedup(0.5, 2, 0.0) == pytest.approx(1.75)
    assert sp.expected_speedup(0.5, 2, 0.5) == pytest.approx(1.75 / 2)
    assert sp.expected_speedup(0.5, 2, 0.5, verify_ratio=2) == pytest.approx(1.75 / 3)
    with pytest.raises(ValueError, match="verify_ratio"):
        sp.expected_speedup(0.5, 2, verify_ratio=0)
    with pytest.raises(ValueError, match="alpha"):
        sp.expected_tokens_per_step(1.5, 2)
    rng = np.random.default_rng(0)                             # the formula's own model
    runs = rng.random((20000, 4)) < 0.7
    made = np.argmin(np.c_[runs, np.zeros(len(runs), bool)], axis=1) + 1
    assert made.mean() == pytest.approx(sp.expected_tokens_per_step(0.7, 4), rel=0.02)


def test_verify_cost_counts_one_read_of_the_weights():
    model = make_model("gqa")
    c = model.config
    step = toykv.variants.decode_step_cost(c, 11)
    zero = sp.verify_cost(c, 10, 0)
    assert (zero["flops"], zero["bytes"]) == (step["flops"], step["bytes"])
    four = sp.verify_cost(c, 10, 4)
    assert four["bytes"] - zero["bytes"] == 4 * toykv.kv_bytes_per_token(c, 4)
    assert four["flops"] == toykv.flops.forward_flops(c, 5, 10) > 4 * zero["flops"]


class Junk:
    k = 2

    def __init__(self, out):
        self.out = out

    def __call__(self, tokens, k):
        return self.out


@pytest.mark.parametrize("out, match", [([64], "outside"), ([1, 2, 3], "more than the k"),
                                        ("12", "sequence of token ids"), ([1.0], "integer")])
def test_bad_proposals_are_refused_and_leave_the_cache_as_it_was(out, match):
    model = make_model("mha", exact=True)
    cache = model.new_cache()
    model.forward(ids(5), cache)
    run = sp.speculative_steps(model, [3, 4], 10, Junk(out), cache=cache)
    first = next(run)                                          # the prefill of [3, 4]
    state = snapshot(cache)
    with pytest.raises(ValueError, match=match):
        next(run)
    assert_same(snapshot(cache), state)
    assert first.tokens and len(cache) == 7


def test_bad_arguments_are_refused_before_anything_runs():
    model, other = make_model("mha"), make_model("mha", seed=1)
    theirs = other.new_cache()
    other.forward(ids(3), theirs)
    state = snapshot(theirs)
    with pytest.raises(ValueError, match="another ToyTransformer"):
        sp.speculative_steps(model, ids(3), 5, sp.PromptLookup(), cache=theirs)
    assert_same(snapshot(theirs), state)
    for kwargs, match in [(dict(k=0), r"k must be an integer in \[1, 64\]"),
                          (dict(proposer=None), "callable"),
                          (dict(proposer=lambda t, k: []), "give k")]:
        args = dict(proposer=sp.PromptLookup()) | kwargs
        with pytest.raises(ValueError, match=match):
            sp.speculative_steps(model, ids(3), 5, **args)
    with pytest.raises(ValueError, match="k must"):
        sp.PromptLookup(k=0)
    with pytest.raises(ValueError, match="use_cache"):
        toykv.generate(model, ids(3), 5, use_cache=False, speculative=sp.PromptLookup())
    sliding = make_model("sliding")
    with pytest.raises(ValueError, match="ring of 4 slots has wrapped"):
        sp.speculative_steps(sliding, ids(3), 5, sp.PromptLookup())
    assert len(sp.speculative_generate(sliding, ids(2), 3, sp.PromptLookup())) == 3

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


# -- sampling: rejection sampling gives the model's own distribution ---------------------------
def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


# chi-square, 15 degrees of freedom: P(X > 50) is about 1e-5; a seeded draw is deterministic,
# so the bound decides once, and a biased sampler lands in the thousands (shown below)
BOUND_15 = 50.0


def markov_pair_counts(P, Q, rng, n, residual=True):
    """n runs of speculative sampling (k = 2) over the Markov chain P (draft Q) from token 0,
    counts of their first two tokens [V, V]. residual=False resamples a rejection from P
    instead of max(0, P - Q): a wrong sampler, to show the test can fail."""
    V = len(P)
    counts = np.zeros((V, V))
    for _ in range(n):
        out = []
        while len(out) < 2:
            last = out[-1] if out else 0
            x1 = sp.draw(Q[last], rng)
            x2 = sp.draw(Q[x1], rng)
            proposal, q_rows = [x1, x2], np.array([Q[last], Q[x1]])
            p_rows = np.array([P[last], P[x1], P[x2]])
            if residual:
                tokens, _ = sp.sample_verify(p_rows, q_rows, proposal, rng)
            else:
                tokens = []
                for i, x in enumerate(proposal):
                    if rng.random() * q_rows[i][x] < p_rows[i][x]:
                        tokens.append(x)
                        continue
                    tokens.append(sp.draw(p_rows[i], rng))
                    break
                else:
                    tokens.append(sp.draw(p_rows[2], rng))
            out += tokens
        counts[out[0], out[1]] += 1
    return counts


def test_rejection_sampling_gives_the_target_distribution():
    """Seeded draws of two tokens of a Markov chain P, proposed by a different chain Q: their
    joint counts fit P(t1 | 0) P(t2 | t1) (chi-square below the bound), and the sampler that
    resamples from P instead of the residual fails the same bound."""
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(4), size=4)
    Q = rng.dirichlet(np.ones(4), size=4)
    joint = P[0][:, None] * P                         # [t1, t2]
    counts = markov_pair_counts(P, Q, np.random.default_rng(1), 20_000)
    assert chi_square(counts.ravel(), joint.ravel()) < BOUND_15
    wrong = markov_pair_counts(P, Q, np.random.default_rng(1), 20_000, residual=False)
    assert chi_square(wrong.ravel(), joint.ravel()) > 10 * BOUND_15


def test_accept_or_resample_keeps_a_proposal_with_probability_min_1_p_over_q():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.6, 0.2])
    rng, n = np.random.default_rng(2), 20_000
    kept = sum(sp.accept_or_resample(p, q, 1, rng)[1] for _ in range(n))
    assert abs(kept / n - 0.5) < 0.02                 # p/q = 0.3/0.6; sd 0.0035
    assert all(sp.accept_or_resample(p, q, 0, rng) == (0, True) for _ in range(100))


def test_speculative_sample_draws_the_models_own_two_tokens():
    """A model of 4 tokens and a draft (another seed): the first two tokens of seeded runs fit
    the model's own p(t1) p(t2 | t1), computed by plain forward passes."""
    model = make_model("gqa", vocab_size=4)
    draft = make_model("gqa", vocab_size=4, seed=1)
    prompt = [1, 2, 3]
    p1 = sp.probabilities(model.forward(prompt)[-1])
    joint = np.array([p1[a] * sp.probabilities(model.forward(prompt + [a])[-1])
                      for a in range(4)])
    counts = np.zeros((4, 4))
    stats = {"proposed": 0, "accepted": 0}
    for seed in range(1500):
        tokens, s = sp.speculative_sample(model, prompt, 3, draft, k=2, seed=seed)
        counts[tokens[0], tokens[1]] += 1
        stats = {key: stats[key] + s[key] for key in stats}
    assert chi_square(counts.ravel(), joint.ravel()) < BOUND_15
    assert 0 < stats["accepted"] < stats["proposed"]     # some kept, some resampled


def test_speculative_sample_refuses_bad_input():
    model = make_model("gqa")
    with pytest.raises(ValueError, match="vocabulary"):
        sp.speculative_sample(model, [1], 3, make_model("gqa", vocab_size=8))
    with pytest.raises(ValueError, match="temperature"):
        sp.speculative_sample(model, [1], 3, model, temperature=0)
    with pytest.raises(ValueError, match="k must be"):
        sp.speculative_sample(model, [1], 3, model, k=0)

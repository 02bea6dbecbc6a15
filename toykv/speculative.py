"""Speculative decoding: propose several tokens cheaply, check them all in one forward pass.

A decode step reads every weight to produce one token (chapter 5). A forward pass over k + 1
tokens reads them once too, so while decode is memory-bound, scoring k proposed tokens costs
about one step. Greedy verification keeps the longest prefix of the proposal that agrees with
the model's own choices, plus the model's next token, and truncates the cache back over the
rest (leviathan2023fast, chen2023accelerating): the tokens are exactly those of greedy
decoding, only several may come from one pass. With sampling, speculative sampling keeps a
proposal with probability min(1, p/q) and resamples the first rejection from max(0, p - q), so
the tokens are distributed exactly as the model's own samples (sample_verify,
speculative_sample).

Proposers take the tokens so far (prompt and output) and k, and return at most k token ids:
PromptLookup matches the last few tokens against earlier text and proposes what followed them
there (saxena2023prompt: no second model); DraftModel runs a smaller model of the same
vocabulary greedily, and skip_layers makes one from the model itself by leaving layers out, a
layer-skipping self-draft in the spirit of zhang2023draft (which picks the skipped
sublayers by search; we skip whole layers, chosen by hand).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace

import numpy as np

from . import validate
from .layers import check_kv_dtype
from .runcheck import check_run
from .model import ToyTransformer, check_model

MAX_K = 64                     # proposals per step: far past where a verify step is free


# -- proposers ---------------------------------------------------------------------------
def _token_array(name: str, tokens) -> np.ndarray:
    """tokens (a list or a 1-D integer array of ids >= 0) as an int64 array, checked without a
    Python loop over them (a proposer is called at every step). [n]"""
    if isinstance(tokens, (str, bytes, dict)) or not hasattr(tokens, "__len__"):
        raise ValueError(f"{name} must be a sequence of token ids (a list or a 1-D integer "
                         f"array), got {type(tokens).__name__} {tokens!r:.40}")
    try:
        ids = np.asarray(tokens)
    except ValueError:
        raise ValueError(f"{name} must be a flat sequence of token ids, got ragged rows") from None
    if ids.size == 0:
        return np.zeros(0, np.int64)
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.min() < 0:
        checked = validate.token_ids(name, tokens)      # its message names what is wrong
        if checked and max(checked) >= 2 ** 63:
            raise ValueError(f"{name} holds a token id past int64, {max(checked)}: not a token")
        return np.asarray(checked, np.int64)
    return ids


class PromptLookup:
    """Propose by n-gram lookup: find the earliest place where the last n tokens (n =
    max_ngram, then shorter, down to min_ngram) occurred before, and propose the k tokens that
    followed them there (the earliest match has the most tokens after it). Good where the output quotes or edits its input; nothing to propose
    (an ordinary decode step) where it does not."""

    def __init__(self, k: int = 4, max_ngram: int = 3, min_ngram: int = 1):
        self.k = validate.count("k", k, 1, MAX_K)
        self.max_ngram = validate.count("max_ngram", max_ngram, 1)
        self.min_ngram = validate.count("min_ngram", min_ngram, 1, self.max_ngram)

    def __call__(self, tokens: list[int], k: int) -> list[int]:
        ids = _token_array("tokens", tokens)
        k = validate.count("k", k, 0, MAX_K)
        for n in range(min(self.max_ngram, len(ids) - 1), self.min_ngram - 1, -1):
            tail = ids[-n:]
            windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], n)   # starts 0..
            starts = np.flatnonzero((windows == tail).all(axis=1))      # ... each followed
            if starts.size:
                first = int(starts[0]) + n                              # by one token at least
                return [int(t) for t in ids[first:first + k]]
        return []

    def __repr__(self):
        return f"PromptLookup(k={self.k}, max_ngram={self.max_ngram}, min_ngram={self.min_ngram})"


class DraftModel:
    """Propose with a draft model: k greedy tokens of a smaller model with the same vocabulary.

    It keeps its own cache of the text so far and, at each call, truncates it back to the part
    the text still shares (its rejected proposals go) and feeds only what is new.
    """

    def __init__(self, draft, k: int = 4, kv_dtype: str = "float32"):
        self.model = check_model(draft, "draft")
        self.k = validate.count("k", k, 1, MAX_K)
        self.kv_dtype = check_kv_dtype(kv_dtype)
        self.reset()

    def reset(self):
        """Forget the text: the next call starts a new cache."""
        self.cache = self.model.new_cache(kv_dtype=self.kv_dtype)
        self.held: list[int] = []                   # the tokens its cache holds

    def __call__(self, tokens: list[int], k: int) -> list[int]:
        tokens = validate.token_ids("tokens", tokens, self.model.config.vocab_size)
        if not tokens:
            raise ValueError("tokens is empty: give the text so far (at least one token)")
        k = validate.count("k", k, 0, MAX_K)
        room = self.model.config.max_seq_len - len(tokens) + 1    # it feeds k - 1 proposals
        k = min(k, room)
        if k <= 0:
            return []
        common = 0
        for a, b in zip(self.held, tokens[:-1]):      # keep what still matches, feed the rest
            if a != b:
                break
            common += 1
        if common < self.cache.rollback_floor():
            self.reset()
            common = 0
        self.cache.truncate(common)
        self.held = list(tokens[:common])               # what the cache holds, whatever follows
        logits = self.model.forward(tokens[common:], self.cache)[-1]
        self.held = list(tokens)
        proposal = [int(np.argmax(logits))]
        while len(proposal) < k:
            proposal.append(int(np.argmax(self.model.forward(proposal[-1:], self.cache)[-1])))
            self.held.append(proposal[-2])
        return proposal

    def __repr__(self):
        return f"DraftModel({self.model.config.n_layers}-layer draft, k={self.k})"


def skip_layers(model, keep) -> ToyTransformer:
    """A draft made of the model itself with only the layers `keep` (indices, in order): the
    same embedding, head and weights of those layers, so it needs no training and shares the
    vocabulary. The layers left out are skipped, their residual contribution with them."""
    model = check_model(model)
    L = model.config.n_layers
    if isinstance(keep, (str, bytes, dict)) or not hasattr(keep, "__iter__"):
        raise ValueError(f"keep must be a list of layer indices, got {type(keep).__name__} "
                         f"{keep!r:.40}")
    keep = list(itertools.islice(keep, L + 1))          # at most every layer, each once
    if len(keep) > L:
        raise ValueError(f"keep must be layer indices in increasing order, none twice: at "
                         f"most the model's {L} layers, got more")
    keep = [validate.count("keep", i, 0, L - 1) for i in keep]
    if not keep or keep != sorted(set(keep)):
        raise ValueError(f"keep must be layer indices in increasing order, none twice, at least "
                         f"one, got {keep}")
    types = model.config.layer_types
    config = replace(model.config, n_layers=len(keep),
                     layer_types=None if types is None else tuple(types[i] for i in keep))
    weights = {"embed": model.embed, "final_norm": model.final_norm, "lm_head": model.lm_head,
               "layers": [dict(model.layers[i]) for i in keep]}
    return ToyTransformer(config, exact=model.exact, weights=weights, absorb=model.absorb)


# -- one verify step ---------------------------------------------------------------------
@dataclass
class Verified:
    """What one verify step did: `tokens` the model chose (the accepted proposals, then its own
    next token), `accepted` how many proposals it kept, `logits` [k + 1, |V|]."""
    tokens: list
    accepted: int
    logits: np.ndarray


def check_proposal(proposal, k: int, vocab_size: int, name: str = "the proposer's proposal"
                   ) -> list[int]:
    """A proposer's output as a list of at most k token ids in [0, vocab_size); else a
    ValueError that names the proposer's mistake (before the cache is touched)."""
    k = validate.count("k", k, 0)
    vocab_size = validate.count("vocab_size", vocab_size, 1)
    try:
        ids = validate.token_ids("proposal", proposal, vocab_size)
    except ValueError as err:
        raise ValueError(f"{name} is bad: {err}") from None
    if len(ids) > k:
        raise ValueError(f"{name} holds {len(ids)} tokens, more than the k = {k} asked for "
                         "(proposal)")
    return ids


def check_rollback(cache, T: int):
    """Refuse, before the pass, a verify step of T tokens (the newest and T - 1 proposals) that
    the cache could not roll back over (after it, truncate must reach len(cache) + 1), or whose
    one step would not be what greedy's one-token steps give."""
    split = [i for i, layer in enumerate(cache.layers) if not layer.steps_split]
    if split and T > 1:
        layer = cache.layers[split[0]]
        raise ValueError(f"speculative verification feeds several tokens in one step, and layer "
                         f"{split[0]}'s cache ({type(layer).__name__}) does not give in one "
                         f"step what one-token steps give; decode without speculation")
    floor = cache.rollback_floor(ahead=T)
    if floor > len(cache) + 1:
        bad = next(i for i, layer in enumerate(cache.layers)
                   if layer.rollback_floor(len(cache) + T) == floor)
        layer = cache.layers[bad]
        raise ValueError(f"speculative verification rolls the cache back over rejected "
                         f"proposals, and layer {bad}'s cache could not: its "
                         f"{layer.floor_reason(len(cache) + T, len(cache) + 1)}; decode "
                         "without speculation")


def verify_step(model, cache, last: int, proposal: list[int]) -> Verified:
    """Score `proposal` in one forward pass and keep what greedy decoding would have made.

    The cache holds every token before `last` (the newest token, not yet fed). Feeding last and
    the k proposals gives k + 1 rows of logits: row i is the model's choice after proposal i - 1.
    Proposal i is accepted while it equals row i's argmax; the first row that disagrees (or the
    row after the last proposal) gives one token more, the model's own. The cache is then
    truncated to hold last and the accepted proposals, so it is exactly the cache of greedy
    decoding: the rejected proposals' keys and values are dropped. Every argument is checked,
    and a cache that could not roll back refused, before the pass.
    """
    check_model(model)
    model.check_cache(cache, None)
    vocab = model.config.vocab_size
    last = validate.count("last", last, 0, vocab - 1)
    proposal = check_proposal(proposal, MAX_K, vocab, "proposal")
    check_rollback(cache, 1 + len(proposal))
    start = len(cache)
    logits = model.forward([last] + proposal, cache)            # [k + 1, |V|]
    choices = np.argmax(logits, axis=-1)
    accepted = 0
    while accepted < len(proposal) and proposal[accepted] == choices[accepted]:
        accepted += 1
    cache.truncate(start + 1 + accepted)                        # last + the accepted ones
    return Verified(proposal[:accepted] + [int(choices[accepted])], accepted, logits)


# -- generation --------------------------------------------------------------------------
@dataclass
class SpecStep:
    """One forward pass of speculative generation. Step 0 is the prefill (nothing proposed).

    tokens: what the step added to the output (ends at a stop token); proposed, accepted: the
    proposal and how many of it the model kept; tokens_in: tokens the pass fed; context: the
    sequence length after its input; seconds: wall time of the pass (propose_seconds: of the
    proposer); flops: the pass's matmul FLOPs; cache_tokens, cache_bytes: after the step;
    rolled_back, rolled_back_bytes: what truncate dropped."""
    index: int
    phase: str
    tokens: list
    proposed: list
    accepted: int
    tokens_in: int
    context: int
    seconds: float
    propose_seconds: float
    flops: int
    cache_tokens: int
    cache_bytes: int
    rolled_back: int = 0
    rolled_back_bytes: int = 0
    logits: np.ndarray = field(default=None, repr=False)


def _check_proposer(proposer, k):
    if not callable(proposer):
        raise ValueError(f"proposer must be callable as proposer(tokens, k) -> token ids "
                         f"(toykv.speculative.PromptLookup, DraftModel), got {proposer!r}")
    if k is None:
        k = getattr(proposer, "k", None)
        if k is None:
            raise ValueError("give k: the proposer has no k attribute")
    return validate.count("k", k, 1, MAX_K)


def speculative_steps(model, prompt_ids, max_new_tokens: int, proposer, k: int | None = None,
                      stop_ids=None, kv_dtype: str = "float32", cache=None):
    """Greedy generation with speculation: yield a SpecStep per forward pass.

    The output is the tokens of toykv.decode_steps (same arguments), the cache after it holds
    the same tokens as that run's cache. k: most proposals per step (default proposer.k).
    Every argument is checked before the first pass; a proposal out of range or longer than
    asked is refused before the pass that would feed it, leaving the cache as it was.
    A cache that could not roll back over rejected proposals somewhere in the run is refused
    before the first pass (KVCache.rollback_floor): a sliding-window ring the run would wrap, a
    policy that evicts or counts attention.
    """
    k = _check_proposer(proposer, k)
    ids, cache, stops, start = check_run(model, prompt_ids, max_new_tokens, True, kv_dtype,
                                         stop_ids, cache)
    longest = start + len(ids) + max(max_new_tokens - 1, 0)
    if max_new_tokens > 2:
        check_rollback(cache, 2)                    # a kind whose steps do not split
    if max_new_tokens > 1 and cache.rollback_floor(ahead=longest - start) > longest - 1:
        floor_at = longest
        bad = next(i for i, layer in enumerate(cache.layers)
                   if layer.rollback_floor(floor_at) > floor_at - 1)
        layer = cache.layers[bad]
        raise ValueError(f"the run needs {longest} positions, and layer {bad}'s cache could "
                         f"not roll back over rejected proposals there: its "
                         f"{layer.floor_reason(floor_at, floor_at - 1)}; decode without "
                         "speculation")
    return _speculate(model, ids, max_new_tokens, proposer, k, cache, stops, start)


def _speculate(model, ids, max_new_tokens, proposer, k, cache, stops, start):
    """The loop, on checked arguments: a prefill, then verify steps until max_new_tokens."""
    made, index, vocab = 0, 0, model.config.vocab_size
    while made < max_new_tokens:
        t0 = time.perf_counter()
        if index == 0:
            proposal, feed = [], ids
        else:
            room = min(k, max_new_tokens - made - 1)          # never past max_new_tokens
            proposal = check_proposal(proposer(list(ids), room), room, vocab) if room else []
            feed = [ids[-1]] + proposal
        t1 = time.perf_counter()
        flops0, held0 = model.flops, len(cache)
        if index == 0:
            logits = model.forward(feed, cache)
            out, accepted = [int(np.argmax(logits[-1]))], 0
        else:
            verified = verify_step(model, cache, ids[-1], proposal)
            logits, out, accepted = verified.logits, verified.tokens, verified.accepted
        seconds = time.perf_counter() - t1
        for i, token in enumerate(out):                       # a stop token ends the output
            if token in stops:
                out = out[:i + 1]
                break
        if index > 0 and len(out) < accepted + 1:             # stopped inside the accepted
            cache.truncate(held0 + len(out))
        per_token = cache.nbytes // max(len(cache), 1)
        dropped = held0 + len(feed) - len(cache)
        yield SpecStep(index, "prefill" if index == 0 else "verify", out, proposal, accepted,
                       len(feed), start + len(ids) + len(proposal), seconds, t1 - t0,
                       model.flops - flops0, len(cache), cache.nbytes, dropped,
                       dropped * per_token if dropped else 0, logits[-1] if index == 0
                       else logits)
        made += len(out)
        index += 1
        if out[-1] in stops:
            return
        ids.extend(out)


def speculative_generate(model, prompt_ids, max_new_tokens: int, proposer, k=None,
                         stop_ids=None, cache=None) -> list[int]:
    """The new token ids of speculative_steps: those of toykv.generate."""
    return [t for step in speculative_steps(model, prompt_ids, max_new_tokens, proposer, k,
                                            stop_ids, cache=cache) for t in step.tokens]


# -- with sampling: rejection sampling (speculative sampling) ----------------------------
def probabilities(logits, temperature: float = 1.0) -> np.ndarray:
    """softmax(logits / temperature) over the last axis, float64 (rows sum to 1). [..., |V|]"""
    temperature = validate.number("temperature", temperature)
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def draw(p: np.ndarray, rng) -> int:
    """One token drawn from the distribution p [|V|] (inverse CDF with one uniform)."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def accept_or_resample(p: np.ndarray, q: np.ndarray, token: int, rng) -> tuple[int, bool]:
    """One proposal of speculative sampling (leviathan2023fast, chen2023accelerating): `token`
    was drawn from the draft's q [|V|]; keep it with probability min(1, p(token) / q(token)),
    else draw the model's token from max(0, p - q), normalised. The token that comes out is
    distributed as p exactly. Returns (token, accepted)."""
    if rng.random() * q[token] < p[token]:               # u < p / q, without dividing
        return int(token), True
    residual = np.maximum(p - q, 0.0)
    return draw(residual if residual.sum() > 0 else p, rng), False


def sample_verify(p_rows: np.ndarray, q_rows: np.ndarray, proposal: list[int], rng
                  ) -> tuple[list[int], int]:
    """A verify step with sampling: p_rows [k + 1, |V|] the model's distributions after the
    newest token and each proposal, q_rows [k, |V|] the draft's, which drew the k proposals.
    Proposals are kept in order while accept_or_resample keeps them; the first rejection ends
    the step with the model's resampled token, and a step that keeps all k draws one more
    token from p_rows[k]. Returns (tokens, accepted): the tokens are distributed as k + 1
    (or fewer) tokens sampled from the model one at a time."""
    tokens = []
    for i, token in enumerate(proposal):
        token, kept = accept_or_resample(p_rows[i], q_rows[i], token, rng)
        tokens.append(token)
        if not kept:
            return tokens, i
    return tokens + [draw(p_rows[len(proposal)], rng)], len(proposal)


def speculative_sample(model, prompt_ids, max_new_tokens: int, draft, k: int = 4,
                       temperature: float = 1.0, seed: int = 0) -> tuple[list[int], dict]:
    """Sampling at `temperature` with a draft model: the draft samples k tokens from its own
    distributions (q), the model scores them in one pass (p), sample_verify keeps or resamples,
    and the cache is truncated over what was not kept. The tokens are distributed exactly as
    the model's own sampling at that temperature (tests/test_speculative.py checks it on
    seeded draws). Returns (tokens, {'verify_steps', 'proposed', 'accepted'})."""
    model, draft = check_model(model), check_model(draft, "draft")
    if draft.config.vocab_size != model.config.vocab_size:
        raise ValueError(f"draft must share the model's vocabulary ({model.config.vocab_size} "
                         f"tokens), got {draft.config.vocab_size}")
    k = validate.count("k", k, 1, MAX_K)
    validate.number("temperature", temperature)
    rng = np.random.default_rng(validate.count("seed", seed, 0))
    ids, cache, _, _ = check_run(model, prompt_ids, max_new_tokens)
    _, draft_cache, _, _ = check_run(draft, prompt_ids, max_new_tokens)   # its positions too
    if max_new_tokens == 0:
        return [], {"verify_steps": 0, "proposed": 0, "accepted": 0}
    out = [draw(probabilities(model.forward(ids, cache)[-1], temperature), rng)]
    held = []                                                 # the tokens draft_cache holds
    stats = {"verify_steps": 0, "proposed": 0, "accepted": 0}
    while len(out) < max_new_tokens:
        text = ids + out
        room = min(k, max_new_tokens - len(out) - 1)         # never past max_new_tokens
        common = 0
        for a, b in zip(held, text[:-1]):                     # the draft keeps what matches
            if a != b:
                break
            common += 1
        draft_cache.truncate(common)
        proposal, q_rows, feed = [], [], text[common:]
        for _ in range(room):
            q_rows.append(probabilities(draft.forward(feed, draft_cache)[-1], temperature))
            proposal.append(draw(q_rows[-1], rng))
            feed = proposal[-1:]
        held = text + proposal[:-1] if room else held[:common]
        start = len(cache)
        p_rows = probabilities(model.forward([text[-1]] + proposal, cache), temperature)
        tokens, accepted = sample_verify(p_rows, np.array(q_rows), proposal, rng)
        cache.truncate(start + 1 + accepted)
        out += tokens
        stats["verify_steps"] += 1
        stats["proposed"] += room
        stats["accepted"] += accepted
    return out, stats


# -- what it buys ------------------------------------------------------------------------
def acceptance(steps) -> dict:
    """Totals of a run's verify steps: {'verify_steps', 'proposed', 'accepted', 'tokens'
    (made by verify steps), 'tokens_per_step', 'acceptance_rate' (accepted / proposed),
    'alpha' (the per-token acceptance rate of leviathan2023fast's model, estimated: accepted
    proposals over proposals tried, a proposal counting as tried up to the first rejection)}."""
    if isinstance(steps, (str, bytes, dict)) or not hasattr(steps, "__iter__"):
        raise ValueError(f"steps must be a list of SpecStep (speculative_steps yields them), "
                         f"got {type(steps).__name__}")
    steps = list(steps)
    if not all(isinstance(s, SpecStep) for s in steps):
        raise ValueError("steps must be a list of SpecStep (speculative_steps yields them)")
    verify = [s for s in steps if s.phase == "verify"]
    proposed = sum(len(s.proposed) for s in verify)
    accepted = sum(s.accepted for s in verify)
    tried = sum(s.accepted + (s.accepted < len(s.proposed)) for s in verify)
    made = sum(len(s.tokens) for s in verify)
    return {"verify_steps": len(verify), "proposed": proposed, "accepted": accepted,
            "tokens": made, "tokens_per_step": made / len(verify) if verify else 0.0,
            "acceptance_rate": accepted / proposed if proposed else 0.0,
            "alpha": accepted / tried if tried else 0.0}


def expected_tokens_per_step(alpha, k: int) -> float:
    """Expected tokens a verify step makes when each of the k proposals is accepted with
    probability alpha, independently, until the first rejection: (1 - alpha^(k+1)) / (1 -
    alpha) (leviathan2023fast, equation 1); k + 1 at alpha = 1."""
    alpha = validate.number("alpha", alpha, 0.0, allow_minimum=True, maximum=1.0)
    k = validate.count("k", k, 0)
    if alpha == 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_speedup(alpha, k: int, draft_cost=0.0, verify_ratio=1.0) -> float:
    """Expected speed-up over plain decoding: tokens per verify step over what the step costs
    in decode steps, k draft steps of draft_cost each (a draft step's time over a decode
    step's; 0 for prompt lookup) and one verify step of verify_ratio decode steps.
    leviathan2023fast (theorem 3.8) counts the verify step as one decode step (verify_ratio
    1), true while the step stays memory-bound; give a measured ratio where it is not."""
    draft_cost = validate.number("draft_cost", draft_cost, 0.0, allow_minimum=True)
    verify_ratio = validate.number("verify_ratio", verify_ratio, 0.0)
    return expected_tokens_per_step(alpha, k) / (k * draft_cost + verify_ratio)


__all__ = ["MAX_K", "PromptLookup", "DraftModel", "skip_layers", "Verified", "check_proposal",
           "verify_step", "SpecStep", "speculative_steps", "speculative_generate",
           "probabilities", "draw", "accept_or_resample", "sample_verify", "speculative_sample",
           "acceptance", "expected_tokens_per_step", "expected_speedup"]

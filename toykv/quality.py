"""What a smaller cache costs in quality: next-token loss and perplexity on a text (chapter 12),
and how far a changed model's next-token distributions are from the original's (chapter 13).

The same code for every policy: the text goes through one cache with the policy, `chunk`
tokens per step, and each position's logits give the loss of the token that follows it.
A cache that keeps everything gives what one uncached pass gives (the chapter asserts it).
compare() puts three numbers on a change: the perplexity, the share of positions whose most
likely next token is still the original's (top-1 agreement), and the mean KL divergence of the
next-token distributions from the original's.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import validate
from .cache import check_cache
from .model import check_model


def _check_text(model, token_ids) -> np.ndarray:
    ids, batched = model.check_ids(token_ids)
    if batched or ids.shape[1] < 2:
        raise ValueError(f"token_ids must be one sequence [N] of at least 2 tokens, got shape "
                         f"{np.shape(token_ids)}")
    if ids.shape[1] > model.config.max_seq_len:
        raise ValueError(f"token_ids holds {ids.shape[1]} tokens, more than max_seq_len "
                         f"{model.config.max_seq_len}")
    return ids[0]


def token_losses(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, float64: logits [T, |V|] (finite), targets [T]
    (ids in [0, |V|))."""
    try:
        logits, targets = np.asarray(logits), np.asarray(targets)
    except ValueError:                                  # ragged rows
        raise ValueError("logits and targets must be arrays: logits [T, |V|], targets [T]; "
                         "got ragged rows") from None
    if logits.ndim != 2 or logits.dtype.kind not in "fiu" or not logits.shape[1]:
        raise ValueError(f"logits must be a real array [T, |V|] with |V| >= 1, got shape "
                         f"{logits.shape} ({logits.dtype})")
    if targets.shape != (len(logits),) or (targets.size and targets.dtype.kind not in "iu"):
        raise ValueError(f"token_losses takes logits [T, |V|] and integer targets [T], got "
                         f"shapes {logits.shape} and {targets.shape} ({targets.dtype})")
    if targets.size and (targets.min() < 0 or targets.max() >= logits.shape[1]):
        raise ValueError(f"targets must be token ids in [0, {logits.shape[1]}), got "
                         f"{targets.min()} to {targets.max()}")
    if not np.isfinite(logits).all():
        raise ValueError("logits must be finite numbers: they hold NaN or infinities")
    z = logits.astype(np.float64)
    top = z.max(axis=-1)
    log_total = top + np.log(np.exp(z - top[:, None]).sum(axis=-1))        # log-sum-exp [T]
    return log_total - z[np.arange(len(targets)), targets.astype(np.int64)]


def next_token_losses(model, token_ids, policy=None, chunk: int = 64, cache=None):
    """Loss of each next token, [N - 1] float64: position t's logits score token t + 1.

    The N tokens go through one new cache with `policy` (a toykv.CachePolicy; None: no cache,
    one pass), `chunk` tokens per step. cache: fill this empty cache of one sequence instead
    (any kind: a policy's, to read what it received afterwards, a pool's sequence, a quantized
    one); policy is then not given."""
    model = check_model(model)
    ids = _check_text(model, token_ids)
    if policy is None and cache is None:
        return token_losses(model(ids)[:-1], ids[1:])
    chunk = validate.count("chunk", chunk, 1)
    if cache is not None:
        model.check_cache(cache, None)
        if len(cache) or policy is not None:
            raise ValueError("cache must be an empty cache (model.new_cache(...)), given "
                             "without a policy (the cache's own is used)")
    if cache is None:
        cache = model.new_cache(capacity=len(ids), policy=policy)
    cache.check_chunks(len(ids), chunk)  # every step fits (max_seq_len, blocks, the policy)
    losses = []
    for start in range(0, len(ids), chunk):
        logits = model(ids[start:start + chunk], cache)                  # [T, |V|]
        targets = ids[start + 1:start + chunk + 1]
        losses.append(token_losses(logits[:len(targets)], targets))
    return np.concatenate(losses)


def text_logits(model, token_ids, cache=None, chunk: int = 64) -> np.ndarray:
    """Logits [N, |V|] of every position of a text of N tokens: one pass without a cache, or
    through `cache` (empty, of one sequence: any kv_dtype, policy or kind), `chunk` tokens per
    step."""
    model = check_model(model)
    ids = _check_text(model, token_ids)
    if cache is None:
        return model(ids)
    chunk = validate.count("chunk", chunk, 1)
    model.check_cache(cache, None)
    if len(cache):
        raise ValueError(f"cache must be empty, it holds {len(cache)} tokens")
    cache.check_room(len(ids))          # room for the whole text (max_seq_len, blocks)
    return np.concatenate([model(ids[start:start + chunk], cache)       # [T, |V|] each
                           for start in range(0, len(ids), chunk)])


def log_probs(logits) -> np.ndarray:
    """log softmax(logits) per row, float64 [T, |V|]: the reference compare() takes."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2 or not z.size or not np.isfinite(z).all():
        raise ValueError(f"logits must be a finite 2-D array [T, |V|], got shape {z.shape}")
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def compare(reference, logits, token_ids, rows: int = 32) -> dict:
    """How far a changed model's logits [N, |V|] are from the original's on a text of N tokens
    (reference: the original's log_probs): 'perplexity' of the text's next tokens (positions
    0..N-2), 'top1' (share of the N positions whose most likely token is the original's) and
    'kl' (mean KL(original || changed) over the N positions, in nats). Row blocks of `rows`
    keep the float64 work small."""
    ref = np.asarray(reference)
    ids = np.asarray(token_ids)
    if ref.ndim != 2 or np.shape(logits) != ref.shape or ids.shape != ref.shape[:1]:
        raise ValueError(f"reference and logits must be [N, |V|] and token_ids [N] of the same "
                         f"N; got {ref.shape}, {np.shape(logits)}, {ids.shape}")
    rows = validate.count("rows", rows, 1)
    losses, same, kl = [], [], []
    for start in range(0, len(ref), rows):
        mine, theirs = log_probs(logits[start:start + rows]), ref[start:start + rows]
        targets = ids[start + 1:start + rows + 1]
        losses.append(-mine[np.arange(len(targets)), targets])
        same.append(mine.argmax(axis=-1) == theirs.argmax(axis=-1))
        kl.append(np.einsum("tv,tv->t", np.exp(theirs), theirs - mine))
    return {"perplexity": perplexity(np.concatenate(losses)),
            "top1": float(np.concatenate(same).mean()), "kl": float(np.concatenate(kl).mean())}


def sample_text() -> str:
    """The prose of the course's chapters 1 and 2 (their markdown cells, joined by blank lines),
    bundled with toykv so chapter 12 reads the same text in Colab, with no repository beside it."""
    return (Path(__file__).parent / "data" / "sample_text.md").read_text(encoding="utf-8")


def perplexity(losses) -> float:
    """exp(mean loss): the number of equally likely tokens the model is as unsure as."""
    if isinstance(losses, (str, bytes)):
        raise ValueError(f"losses must be a 1-D array of numbers, got a {type(losses).__name__}")
    try:
        losses = np.asarray(losses, dtype=np.float64)
    except (ValueError, TypeError):
        raise ValueError(f"losses must be a non-empty 1-D array of finite numbers, got "
                         f"{losses!r:.60}") from None
    if losses.ndim != 1 or not losses.size or not np.isfinite(losses).all():
        raise ValueError(f"losses must be a non-empty 1-D array of finite numbers, got shape "
                         f"{losses.shape}" + ("" if not losses.size or
                                              np.isfinite(losses).all() else " with NaN or inf"))
    mean = losses.mean()
    if mean > np.log(np.finfo(np.float64).max):
        raise ValueError(f"losses average {mean:g}: exp of that overflows (no finite "
                         "perplexity); losses are -log p of each token, a few at most")
    return float(np.exp(mean))


def attention_share(cache, first: int = 4) -> np.ndarray:
    """Per layer, the share of all attention weight (every query and head) that went to the
    first `first` tokens, from a cache with policy 'full' that a text went through."""
    check_cache(cache)
    if cache.policy is None or cache.policy.name != "full" or not len(cache):
        raise ValueError("attention_share needs a cache with CachePolicy('full') that a text "
                         "went through")
    first = validate.count("first", first, 1)
    return np.array([layer.received[:first].sum() / layer.received.sum()
                     for layer in cache.layers])


__all__ = ["token_losses", "next_token_losses", "text_logits", "log_probs", "compare",
           "perplexity", "attention_share", "sample_text"]

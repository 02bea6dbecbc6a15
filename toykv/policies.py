"""Cache policies: keep every token, a recent window, a window with attention sinks, or the
heavy hitters, within a budget of tokens per layer (chapter 12).

A policy is an option of the cache: `model.new_cache(policy=CachePolicy("sinks", budget=64))`.
Between steps each layer holds at most `budget` tokens; a step's queries attend over those and
the step's new tokens. What a policy keeps:

- 'full': every token (budget None), as a cache without a policy does;
- 'window': the last `budget` tokens;
- 'sinks': the first `sinks` tokens (default 4, StreamingLLM's "attention sinks",
  xiao2024streamingllm) and the last budget - sinks;
- 'h2o': the last `recent` tokens (default budget // 2) and the budget - recent older tokens
  that received the most attention so far, summed over queries and heads (the heavy hitters
  of zhang2023h2o; H2O chooses per head, this cache per layer).

Positions: toykv caches keys after RoPE, at their original positions (the default,
positions='original'). positions='renumbered' is StreamingLLM's choice: a key is rotated by
its place in the cache instead, so the sinks sit just before the window. Since RoPE is a
rotation, a stored key is moved there by rotating it by the difference.

A step of T > 1 tokens keeps what T steps of one token would: for 'window' and 'sinks' the
queries' mask narrows to each one's window; 'h2o', whose heavy hitters change after every
query, goes query by query inside the softmax (toykv.kinds.h2o), so with exact=True its step
gives the bits of T one-token steps. 'renumbered' numbers the cache once per step, so it takes
one token per step once the budget is reached (a longer step is refused).
The kinds that keep the tokens are toykv.kinds.sinks and toykv.kinds.h2o (CachePolicy.kind).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import validate
from .config import check_config
from .kinds import KINDS

# 'full' keeps every token (and counts the attention each received: the h2o kind, no budget);
# the others are the names the eviction kinds keep for (toykv.kinds.KINDS, their `policies`)
POLICIES = ("full",) + tuple(name for kind in KINDS.values()
                             for name in getattr(kind, "policies", ()))
POSITIONS = ("original", "renumbered")


@dataclass(frozen=True)
class CachePolicy:
    """What a cache keeps (see the module): name in POLICIES, budget = tokens held per layer
    (None for 'full'), sinks ('sinks'), recent ('h2o'), positions 'original' or 'renumbered'.
    Checked when made: a ValueError says what is wrong."""

    name: str = "full"
    budget: int | None = None
    sinks: int | None = None
    recent: int | None = None
    positions: str = "original"

    def __post_init__(self):
        if not isinstance(self.name, str) or self.name not in POLICIES:
            raise ValueError(f"unknown cache policy {self.name!r}; choose one of {POLICIES}")
        validate.choice("positions", self.positions, POSITIONS)
        if self.name == "full":
            if self.budget is not None or self.sinks is not None or self.recent is not None:
                raise ValueError("policy 'full' keeps every token: give it no budget, sinks "
                                 "or recent")
            return
        if self.budget is None:
            raise ValueError(f"policy {self.name!r} needs a budget: the tokens held per layer")
        validate.count("budget", self.budget, 1)
        if self.name != "sinks" and self.sinks is not None:
            raise ValueError(f"sinks is an option of policy 'sinks', not {self.name!r}")
        if self.name != "h2o" and self.recent is not None:
            raise ValueError(f"recent is an option of policy 'h2o', not {self.name!r}")
        if self.name == "sinks":
            sinks = 4 if self.sinks is None else validate.count("sinks", self.sinks, 0)
            if self.budget <= sinks:
                raise ValueError(f"budget {self.budget} must exceed the {sinks} sink tokens: "
                                 "the cache also keeps at least one recent token")
            object.__setattr__(self, "sinks", sinks)
        if self.name == "h2o":
            recent = max(1, self.budget // 2) if self.recent is None else \
                validate.count("recent", self.recent, 1)
            if recent > self.budget:
                raise ValueError(f"recent {recent} must be at most the budget {self.budget}")
            object.__setattr__(self, "recent", recent)

    @property
    def window(self) -> int | None:
        """The recent tokens a policy keeps (None: all)."""
        return {"full": None, "h2o": self.recent,
                "sinks": None if self.budget is None else self.budget - (self.sinks or 0)
                }.get(self.name, self.budget)

    def held(self, length: int) -> int:
        """Tokens a layer holds once `length` tokens have gone through it."""
        length = validate.count("length", length, 0)
        return length if self.budget is None else min(length, int(self.budget))

    @property
    def kind(self) -> str:
        """The cache kind that keeps what this policy says (toykv.kinds.KINDS): 'sinks' for
        'window' and 'sinks', 'h2o' for 'h2o' and 'full' (every token, attention counted)."""
        if self.name == "full":
            return "h2o"
        return next(key for key, kind in KINDS.items()
                    if self.name in getattr(kind, "policies", ()))

    def keep(self, positions: np.ndarray, received: np.ndarray) -> np.ndarray:
        """Indices (ascending) of the tokens to keep, given every candidate's position
        (ascending) [n] and the attention it has received [n] (finite numbers; None for a
        rule that does not read it: 'window', 'sinks'): the kind's rule."""
        positions = np.asarray(validate.token_ids("positions", positions), dtype=np.int64)
        if np.any(np.diff(positions) <= 0):
            raise ValueError(f"positions must rise, each once, got {positions[:8].tolist()}")
        if received is None and self.kind == "h2o" and self.budget is not None:
            raise ValueError(f"received is needed: policy {self.name!r} keeps the tokens that "
                             "received the most attention")
        if received is not None:
            try:
                received = np.asarray(received, dtype=np.float64)
            except (ValueError, TypeError):
                raise ValueError(f"received must be numbers, the attention each candidate "
                                 f"received, got {received!r:.60}") from None
            if received.shape != positions.shape or not np.isfinite(received).all():
                raise ValueError(f"received must be {len(positions)} finite numbers (one per "
                                 f"position), got shape {received.shape}"
                                 + ("" if received.shape != positions.shape else
                                    " with NaN or inf"))
        return KINDS[self.kind].choose(self, positions, received)


def check_policy(policy, config, batch) -> CachePolicy:
    """The policy for a cache of this config and batch, or a ValueError that says why not."""
    check_config(config)
    if isinstance(policy, str):
        policy = CachePolicy(policy)          # 'full' alone needs no options; others say so
    if not isinstance(policy, CachePolicy):
        raise ValueError(f"policy must be a toykv.CachePolicy, got {type(policy).__name__}")
    if batch is not None:
        raise ValueError("a cache with a policy holds one sequence (batch=None): each "
                         "sequence would keep other tokens")
    if any(spec.kind != "full" for spec in config.layers):
        raise ValueError("a cache policy needs full-attention layers only; this config has "
                         f"{sorted(set(config.layer_kinds))}")
    if config.kv_sharing > 1:
        raise ValueError(f"a cache policy chooses tokens per layer from the attention that layer "
                         f"gave; with kv_sharing={config.kv_sharing} layers read other layers' "
                         "caches: give a config with kv_sharing=1")
    return policy


__all__ = ["CachePolicy", "POLICIES", "POSITIONS", "check_policy"]

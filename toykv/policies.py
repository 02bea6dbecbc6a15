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

A step of T > 1 tokens keeps what T steps of one token would (the queries' mask narrows to
each one's window, `narrow`) for 'window' and 'sinks' with original positions. 'h2o' updates
its heavy hitters once per step, and 'renumbered' numbers the cache once per step, so for
them only one token per step is the policy exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import validate
from .cache import LAYER_CACHES, FullLayer

POLICIES = ("full", "window", "sinks", "h2o")
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
        return {"full": None, "window": self.budget, "h2o": self.recent,
                "sinks": None if self.budget is None else self.budget - (self.sinks or 0)
                }[self.name]

    def held(self, length: int) -> int:
        """Tokens a layer holds once `length` tokens have gone through it."""
        return length if self.budget is None else min(length, self.budget)

    def keep(self, positions: np.ndarray, received: np.ndarray) -> np.ndarray:
        """Indices (ascending) of the tokens to keep, given every candidate's position
        (ascending) [n] and the attention it has received [n]."""
        n = len(positions)
        if self.budget is None or n <= self.budget:
            return np.arange(n)
        recent = np.arange(n - self.window, n)                      # the window: always kept
        if self.name == "window":
            return recent
        if self.name == "sinks":
            return np.concatenate([np.arange(self.sinks), recent])
        older = n - self.window                                     # h2o: the heaviest older
        heavy = np.argsort(-received[:older], kind="stable")[:self.budget - self.window]
        return np.concatenate([np.sort(heavy), recent])


def check_policy(policy, config, batch) -> CachePolicy:
    """The policy for a cache of this config and batch, or a ValueError that says why not."""
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


def _rotate(x: np.ndarray, delta: np.ndarray, theta: float) -> np.ndarray:
    """x [..., n, heads, d] (or [..., n, d]) turned by RoPE's angle for delta [n] positions."""
    from .model import apply_rope, rope_cos_sin              # the model imports the cache
    cos, sin = rope_cos_sin(delta, x.shape[-1], theta)       # [n, d]
    if x.ndim == 4:                                          # [B, n, heads, d]
        cos, sin = cos[:, None], sin[:, None]
    return apply_rope(x, cos, sin)


class PolicyLayer(FullLayer):
    """One layer's cache under a CachePolicy: the held tokens in slots 0..n-1, in position
    order, with `positions` [n] (original) and `received` [n] (attention each received).

    A step writes its tokens after the held ones (invisible until commit, as FullLayer's);
    commit keeps what the policy says and packs it into slots 0..n'-1.
    read(name, first, end) gives the last end - first held tokens (their positions are
    self.positions[-(end - first):]).
    """

    # What a policy kept, and the attention it counted, depend on every token it has seen, so
    # no roll-back gives the cache that never saw the dropped ones: KVCache.truncate refuses.
    rollback_floor = None

    def __init__(self, spec, codec, rows, slots, max_slots, new=np.zeros, policy=None,
                 theta=10000.0):
        self.policy, self.theta = policy or CachePolicy(), theta
        if policy is not None and policy.budget is not None:
            slots = min(slots, policy.budget + 64)           # room for the budget and a chunk
        super().__init__(spec, codec, rows, slots, max_slots, new)
        self.positions = np.zeros(0, np.int64)
        self.received = np.zeros(0, np.float64)
        self.staged = None                                   # (start, T, received [n + T])

    def held(self, length: int) -> int:
        return self.policy.held(length)

    def read(self, name: str, first: int, end: int) -> np.ndarray:
        n = len(self.positions)
        return super().read(name, n - (end - first), n)

    def append(self, new: dict, start: int) -> tuple[dict, np.ndarray]:
        """Attention reads the held tokens then the new ones; returns them and their positions
        (for 'renumbered': the held keys turned to their place just before the new tokens)."""
        T = next(iter(new.values())).shape[1]
        n = len(self.positions)
        self.grow(n + T)
        for name, values in new.items():
            stored, scale = self.codec.encode(values)
            self.batched[name][:, n:n + T] = stored
            if scale is not None:
                self.batched[name + "_scale"][:, n:n + T] = scale
        self.staged = (start, T, np.zeros(n + T))
        out = {name: FullLayer.read(self, name, 0, n + T) for name in new}
        positions = np.concatenate([self.positions, np.arange(start, start + T)])
        if self.policy.positions == "renumbered" and n:
            place = np.arange(n) + start - n                   # just before the new tokens
            key = "k" if "k" in out else "k_rope" if "k_rope" in out else None
            if key is not None:              # 'lowrank' turns its keys at `positions` itself
                out[key] = out[key].copy()
                out[key][:, :n] = _rotate(out[key][:, :n], place - self.positions, self.theta)
            positions[:n] = place
        return out, positions

    def narrow(self, positions: np.ndarray, allowed):
        """The step's mask [T, Tk] narrowed so each query sees what the policy would keep when
        it arrived: the held older tokens the policy keeps and its window before it."""
        window = self.policy.window
        if window is None or len(positions) == 1 or self.staged is None:
            return allowed
        start = self.staged[0]
        keys = np.concatenate([self.positions, np.arange(start, start + self.staged[1])])
        if self.policy.positions == "renumbered":
            return allowed                                   # numbered once per step
        if self.policy.name == "sinks":                      # kept whenever they arrive
            kept = keys < self.policy.sinks
        else:                                                # h2o: held, older than the window
            kept = (np.arange(len(keys)) < len(self.positions)) & (keys < start - window)
        mine = (keys[None, :] >= positions[:, None] - window) | kept[None, :]
        causal = keys[None, :] <= positions[:, None]
        return mine & causal if allowed is None else mine & allowed

    def attended(self, weights: np.ndarray):
        """Add this step's attention weights [..., T, Tk] to what each key received."""
        if self.staged is not None:
            self.staged[2][:] += weights.reshape(-1, weights.shape[-1]).sum(axis=0)

    def commit(self, start: int, T: int):
        """Keep what the policy says of the held and the new tokens, packed in order."""
        if self.staged is None:
            return
        _, T, received = self.staged
        self.staged = None
        positions = np.concatenate([self.positions, np.arange(start, start + T)])
        received = np.concatenate([self.received, np.zeros(T)]) + received
        keep = self.policy.keep(positions, received)
        if len(keep) < len(positions):
            for name, array in self.batched.items():
                array[:, :len(keep)] = array[:, keep]
        self.positions, self.received = positions[keep], received[keep]

    def discard(self):
        self.staged = None

    def copy(self, length: int, slots: int) -> PolicyLayer:
        held = len(self.positions)
        twin = type(self)(self.spec, self.codec, self.rows, max(slots, held), self.max_slots,
                          np.empty, self.policy, self.theta)
        twin.grow(held)
        for name in self.arrays:
            twin.batched[name][:, :held] = self.batched[name][:, :held]
        twin.positions, twin.received = self.positions.copy(), self.received.copy()
        return twin


LAYER_CACHES["policy"] = PolicyLayer                 # the cache kind a policy's layers use

__all__ = ["CachePolicy", "PolicyLayer", "POLICIES", "POSITIONS", "check_policy"]

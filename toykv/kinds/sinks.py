"""Attention sinks: keep the first `sinks` tokens and the most recent ones, within a budget
(StreamingLLM, xiao2024streamingllm). With sinks=0 it is a plain window of the last `budget`
tokens (CachePolicy('window')).

Chapter 12 measures what keeping so little costs. A step of several tokens is exact here:
each query sees the sinks and its own window, which is what it would have seen had the tokens
come one per step.
"""
from __future__ import annotations

import numpy as np

from .kept import KeptLayer


class SinksLayer(KeptLayer):
    """A layer that keeps policy.sinks first tokens and the last budget - sinks."""

    policies = ("window", "sinks")               # the CachePolicy names it keeps for

    @staticmethod
    def keep_older(policy, older: int, received) -> np.ndarray:
        """The first policy.sinks tokens."""
        return np.arange(policy.sinks or 0)

    def kept_older(self, keys: np.ndarray, start: int, window: int) -> np.ndarray:
        """The sinks: kept whenever they arrived."""
        return keys < (self.policy.sinks or 0)


__all__ = ["SinksLayer"]

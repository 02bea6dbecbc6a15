"""A shared layer: a layer that reuses an earlier layer's keys and values (cross-layer KV
sharing, config.kv_sharing; brandon2024cla) holds nothing and attends over what its source
layer attends over in the same step.

Its attention's projection makes no keys or values (its weights have none of the projections
that make cache entries), so what it is given to append is empty; it returns its source's Seen
of this step, which KVCache keeps for the step (`CacheLayer.seen`). Holding nothing, it has no
bytes, no floor of its own and nothing to crop: its source says all of that.
"""
from __future__ import annotations

from dataclasses import replace

from .base import CacheLayer, Seen


class SharedLayer(CacheLayer):
    """Layer `index`'s cache when it reuses layer `source`'s (whose layer object is `layer`)."""

    def __init__(self, spec, index: int, source: int, layer: CacheLayer):
        self.spec, self.index, self.source, self.layer = spec, index, source, layer
        self.arrays, self.staged = {}, None

    @property
    def slots(self) -> int:
        """The positions it can read: its source's slots (it allocates none itself)."""
        return self.layer.slots

    def held(self, length: int) -> int:
        """The positions it attends over: its source's."""
        return self.layer.held(length)

    def held_positions(self, length: int):
        return self.layer.held_positions(length)

    def nbytes(self, length: int) -> int:
        return 0

    def stored(self, name: str, length: int):
        raise ValueError(f"layer {self.index} holds no keys or values: it attends to layer "
                         f"{self.source}'s (kv_sharing)")

    def append(self, new: dict, start: int) -> Seen:
        """The source's Seen of this step (the source appends first: it comes earlier)."""
        seen = self.layer.seen
        if seen is None or self.layer.staged is None:
            raise ValueError(f"layer {self.index} reads layer {self.source}'s keys and values "
                             f"of this step, and layer {self.source} has not run it yet")
        return replace(seen, observe=None)

    def copy(self, length: int, slots: int, shared: dict) -> SharedLayer:
        """The copy reads the copy of its source (KVCache.copy copies layers in order and keeps
        them in shared['layers'])."""
        return SharedLayer(self.spec, self.index, self.source, shared["layers"][self.source])


def shared_layers(config, layers: list) -> list:
    """layers with each None (a layer that reuses another's keys and values, kv_sharing) made a
    SharedLayer of its source, config.kv_sources[i]."""
    for i, source in enumerate(config.kv_sources):
        if layers[i] is None:
            layers[i] = SharedLayer(config.layers[i], i, source, layers[source])
    return layers


__all__ = ["SharedLayer", "shared_layers"]

"""toykv's cache kinds: each a layer object in its own file, all following one protocol
(toykv.kinds.base.CacheLayer: append -> Seen, held, nbytes, commit, discard, rollback_floor,
crop, copy). toykv.KVCache holds one per model layer and builds it from KINDS; the model only
ever calls the cache.

- full.FullLayer: a full-attention layer keeps every position (the default);
- sliding.SlidingLayer: a sliding-window layer keeps the last w in a ring;
- sinks.SinksLayer: the first tokens and a window (CachePolicy 'sinks', and 'window');
- h2o.HeavyHitterLayer: a window and the most attended older tokens (CachePolicy 'h2o', and
  'full', which keeps all and counts the attention);
- quantized.QuantizedLayer: keys and values in a few bits (a kvquant.QuantScheme);
- paged.PagedLayer: the blocks of a pool shared by many sequences (model.new_paged_cache),
  supplied by the pool rather than built from KINDS;
- shared.SharedLayer: a layer that reuses an earlier layer's keys and values (kv_sharing),
  beside whichever kind its source is (KVCache and a pool make one for each such layer).

A new kind is a class in its own file with CacheLayer's methods, and one line in KINDS.
"""
from .base import CacheLayer, Codec, Seen, head_major
from .full import FullLayer
from .h2o import HeavyHitterLayer
from .quantized import QuantizedLayer
from .shared import SharedLayer
from .sinks import SinksLayer
from .sliding import SlidingLayer

KINDS = {
    "full": FullLayer,
    "sliding": SlidingLayer,
    "sinks": SinksLayer,
    "h2o": HeavyHitterLayer,
    "quantized": QuantizedLayer,
}

__all__ = ["KINDS", "CacheLayer", "Seen", "Codec", "head_major", "FullLayer", "SlidingLayer",
           "SinksLayer", "HeavyHitterLayer", "QuantizedLayer", "SharedLayer"]

"""What the KV share explorer shows, in the kernel and in the static book alike: the contexts it
reads, the models it starts with, and how each model's curve is drawn (Okabe-Ito colours and
a marker shape each, so two models differ in more than colour; dashed past a model's maximum
context). ShareExplorer and its static twin both read these.
"""
from __future__ import annotations

import numpy as np

from . import _style as s

SHARE_CONTEXTS = tuple(int(n) for n in np.unique(np.round(np.logspace(3, 6, 61))))  # 10^3..10^6
DEFAULT_MODELS = ("llama-3.1-8b", "qwen3-0.6b", "minimax-m2", "deepseek-v3")
MAX_MODELS = 6
# Okabe-Ito colours, and a marker shape each, so two models differ in more than colour.
MODEL_STYLES = ((s.BLUE, "circle"), (s.VERMILLION, "square"), ("#009E73", "triangle"),
                (s.ORANGE, "diamond"), ("#CC79A7", "down"), (s.SKY_BLUE, "cross"))
# each model's colour and shape: the shape rides on its curves and legend entry too, so the
# six stay apart in greyscale and for colour-blind readers (some colours share a lightness)
BEYOND_DASH = "2 3"          # the part of a line past the model's maximum context
PERCENT_TICKS = tuple((v, f"{100 * v:.0f}%") for v in (0, 0.25, 0.5, 0.75, 1))

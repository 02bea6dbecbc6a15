"""The course's ipywidgets: CacheFill (chapter 3, with its attention view), SizeCalculator
(chapter 4), ShareExplorer (chapter 8) and BlockPoolView (chapter 10); size_report, the pure
function that computes every number the size calculator shows; FillStepper, the cache fill's
state without a widget; attention_frame, the pure function behind the attention view (which
rows of a layer's and head's attention a step computed, from the model's own passes). In the
rendered book each widget shows its static twin (static_twin.py), which responds with no
kernel.

Import them from here; toykv itself does not import this package, so toykv needs only numpy.
"""
from .attention_rows import AttentionFrame, StepAttention, attention_frame, attention_run
from .block_pool import BlockPoolView
from .cache_fill import CacheFill
from .fill_stepper import FillStepper
from .latency import update_latency
from .share_explorer import ShareExplorer
from .size_calculator import SizeCalculator
from .size_report import SizeReport, VariantRow, size_report

__all__ = ["AttentionFrame", "BlockPoolView", "CacheFill", "FillStepper", "ShareExplorer",
           "SizeCalculator", "SizeReport", "StepAttention", "VariantRow", "attention_frame",
           "attention_run", "size_report", "update_latency"]

"""The course's ipywidgets: CacheFill (chapter 3), SizeCalculator (chapter 4), ShareExplorer
(chapter 8) and BlockPoolView (chapter 10); size_report, the pure function that computes every
number the size calculator shows; FillStepper, the cache fill's state without a widget. In the rendered book
each widget shows its static twin (static_twin.py), which responds with no kernel.

Import them from here; toykv itself does not import this package, so toykv needs only numpy.
"""
from .block_pool import BlockPoolView
from .cache_fill import CacheFill
from .fill_stepper import FillStepper
from .latency import update_latency
from .share_explorer import ShareExplorer
from .size_calculator import SizeCalculator
from .size_report import SizeReport, VariantRow, size_report

__all__ = ["BlockPoolView", "CacheFill", "FillStepper", "ShareExplorer", "SizeCalculator", "SizeReport",
           "VariantRow", "size_report", "update_latency"]

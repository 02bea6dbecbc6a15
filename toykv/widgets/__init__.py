"""The course's two ipywidgets: CacheFill (chapter 3) and SizeCalculator (chapter 4), and
size_report, the pure function that computes every number the size calculator shows.

Import them from here; toykv itself does not import this package, so toykv needs only numpy.
"""
from .cache_fill import CacheFill
from .latency import update_latency
from .size_calculator import SizeCalculator
from .size_report import SizeReport, VariantRow, size_report

__all__ = ["CacheFill", "SizeCalculator", "SizeReport", "VariantRow", "size_report",
           "update_latency"]

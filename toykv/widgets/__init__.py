"""The course's two ipywidgets: CacheFill (chapter 3) and SizeCalculator (chapter 4).

Import them from here; toykv itself does not import this package, so toykv needs only numpy.
"""
from .cache_fill import CacheFill
from .latency import update_latency
from .size_calculator import SizeCalculator

__all__ = ["CacheFill", "SizeCalculator", "update_latency"]

"""What both widgets need to stay usable whatever the reader types or clicks.

- NumberText and StrictIntSlider keep a number as it was given (2.5 stays 2.5, 10**310 stays
  an int, 30 is not clamped to the slider's 23), so toykv.validate, not a silent cast or
  clamp in ipywidgets, decides what is accepted, and the widget says why in a message.
- Quiet is a flag that silences the observers while a widget sets its own controls; a
  with-block resets it even on an exception, so a widget is never left deaf to later changes.
- problem_text turns any exception into the message a widget shows.
"""
from __future__ import annotations

import numbers
import re

import ipywidgets as widgets
import traitlets


class _Number(traitlets.TraitType):
    """A real number kept as given (int, float or numpy scalar), without casting; or None,
    which a browser sends for a number JSON cannot hold (1e400 typed is Infinity -> null)."""

    default_value = 0
    info_text = "a number or None"

    def validate(self, obj, value):
        if value is None or isinstance(value, numbers.Real):
            return value
        self.error(obj, value)


class NumberText(widgets.FloatText):
    """A number box whose value is the number given: the owner validates it."""

    value = _Number(0).tag(sync=True)


class StrictIntSlider(widgets.IntSlider):
    """An IntSlider that neither rounds nor clamps a value set from code, so its owner can
    refuse it with a message (in the browser the slider offers only its own integers)."""

    value = _Number(0).tag(sync=True)

    @traitlets.validate("value")
    def _validate_value(self, proposal):
        return proposal["value"]


class Quiet:
    """`with quiet:` while a widget sets its own controls; `if quiet: return` in observers.
    Leaving the with-block, by an exception too, always makes it loud again."""

    def __init__(self):
        self._depth = 0

    def __bool__(self) -> bool:
        return self._depth > 0

    def __enter__(self):
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        return False


def problem_text(err: BaseException) -> str:
    """A ValueError's own message (bad input); any other exception named as unexpected.
    Numbers of more than 20 digits are shortened (10**310 would fill the widget)."""
    if isinstance(err, ValueError):
        text = str(err)
    elif isinstance(err, KeyError) and err.args:
        text = str(err.args[0])
    else:
        text = (f"unexpected {type(err).__name__}: {err} (please report it). The widget "
                "still works.")
    return re.sub(r"\d{21,}", lambda m: f"{m[0][:3]}...({len(m[0])} digits)", text)

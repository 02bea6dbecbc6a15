"""One policy for the numbers a user passes to toykv, so every function refuses bad input alike.

- A count (tokens, layers, heads, batch, steps) is an integer: a Python int or a numpy
  integer. A float (even 2.0) and a bool are refused, so a silent cast cannot hide a mistake.
- A size or a rate (bytes per value, GB/s, seconds) is a finite real number: ints, floats
  and numpy numbers are accepted; bools, NaN and infinities are refused.
- A choice is one of a fixed set of values.
- Token ids are a sequence (a list or a 1-D integer array) of integers: never a str read
  character by character, a lone int, or floats truncated to ints. Text is a str UTF-8 can
  encode (no lone surrogates). A path is a str or a pathlib.Path.
- An allocation larger than the machine's memory is refused before it is attempted, so an
  absurd size (a cache for 10**8 positions, a 100 GB measurement buffer) fails at once with
  a message instead of swapping, being killed, or raising a bare MemoryError later.

Each check returns the value in plain Python form (int, float or Fraction) or raises a
ValueError that names the argument, the rule and the value given (a ValueError also for the
wrong type, e.g. 2.5 heads: the course's rule is one kind of error for every bad value).
"""
from __future__ import annotations

import functools
import math
import numbers
import os
from fractions import Fraction
from pathlib import Path


class UnknownName(KeyError, ValueError):
    """A name that is not in a table (a zoo model, a hardware preset): a KeyError, as a failed
    lookup is, and a ValueError, as every other bad input is; its message reads as written."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def count(name: str, value, minimum: int = 0, maximum: int | None = None) -> int:
    """An integer in [minimum, maximum]; numpy integers accepted, floats and bools refused."""
    if type(value) is not int and (isinstance(value, bool)                # fast path: int
                                   or not isinstance(value, numbers.Integral)):
        rule = f"an integer >= {minimum}" if maximum is None else \
            f"an integer in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be {rule}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        rule = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be an integer {rule}, got {value}")
    return value


def optional_count(name: str, value, minimum: int = 0, maximum: int | None = None) -> int | None:
    """None, or a count as in `count`."""
    return None if value is None else count(name, value, minimum, maximum)


def number(name: str, value, minimum: float = 0.0, allow_minimum: bool = False,
           maximum: float | None = None) -> float:
    """A finite real number > minimum (>= minimum with allow_minimum), <= maximum if given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    low_ok = value >= minimum if allow_minimum else value > minimum
    if not low_ok or (maximum is not None and value > maximum):
        rule = (">= " if allow_minimum else "> ") + f"{minimum:g}"
        if maximum is not None:
            rule += f" and <= {maximum:g}"
        raise ValueError(f"{name} must be a number {rule}, got {value!r}")
    return value


def exact_number(name: str, value, allow_zero: bool = False) -> Fraction:
    """A finite real number > 0 (>= 0 with allow_zero) as an exact Fraction, for byte sizes
    such as 2 (bf16) or 0.5 (int4) that multiply integer counts without rounding."""
    number(name, value, 0.0, allow_minimum=allow_zero)
    # ints, numpy ints and Fractions are exact; floats of any width through Python's float
    return Fraction(value) if isinstance(value, numbers.Rational) else Fraction(float(value))


def choice(name: str, value, options):
    """value if it is one of options, else a ValueError listing them."""
    options = tuple(options)
    try:
        ok = value in options
    except TypeError:              # unhashable or incomparable values are not options
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def flag(name: str, value) -> bool:
    """A real bool (not 0/1, not the string 'false')."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def token_ids(name: str, ids, vocab_size: int | None = None,
              max_len: int | None = None) -> list[int]:
    """A 1-D sequence of token ids (a list, tuple, range or integer array) as a list of ints,
    each in [0, vocab_size) if given, at most max_len of them if given. A str ("123"), a lone
    int, a set (no order), an iterator (no length), floats (1.7, even 2.0) and bools are
    refused: an id is never read from a character or truncated from a float."""
    if isinstance(ids, (str, bytes, bytearray, dict, set, frozenset)) or \
            not hasattr(ids, "__iter__") or not hasattr(ids, "__len__"):
        raise ValueError(f"{name} must be a sequence of token ids (a list or a 1-D integer "
                         f"array), got {type(ids).__name__} {_short(ids)}")
    if hasattr(ids, "ndim") and hasattr(ids, "dtype"):              # a numpy array
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"{name} must be a 1-D array of integers, got shape "
                             f"{tuple(ids.shape)} and dtype {ids.dtype}")
    try:
        length = len(ids)
    except (OverflowError, TypeError):                           # e.g. range(10**20)
        length = None
    if length is None:
        raise ValueError(f"{name} is a sequence too long to have a length: {_short(ids)}")
    if max_len is not None and length > max_len:
        raise ValueError(f"{name} holds {length} token ids, more than the {max_len} allowed")
    top = None if vocab_size is None else vocab_size - 1
    out = []
    for i, value in enumerate(ids):
        if type(value) is not int:                                  # fast path: a plain int
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name}[{i}] must be an integer token id, got {_short(value)} "
                                 f"({type(value).__name__})")
            value = int(value)
        if value < 0 or (top is not None and value > top):
            where = "" if top is None else f", outside [0, {vocab_size})"
            raise ValueError(f"{name}[{i}] is token id {_short(value)}{where}")
        out.append(value)
    return out


def text(name: str, value) -> str:
    """A str that UTF-8 can encode: a lone surrogate ('\\ud800', from a bad decode or a JSON
    escape) is refused with its position, as no tokenizer can split it into bytes."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{name} holds a lone surrogate {value[err.start]!r} at index "
                         f"{err.start}, which is not text (UTF-8 cannot encode it)") from None
    return value


def file_path(name: str, value) -> Path:
    """A path given as a str or os.PathLike (pathlib.Path), as a Path; anything else refused."""
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name} must be a path (a str or pathlib.Path), got "
                         f"{type(value).__name__} {_short(value)}")
    return Path(value)


def _short(value, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters (a huge number or list stays readable)."""
    try:
        shown = repr(value)
    except Exception:                                   # a repr that fails: say the type only
        return f"<{type(value).__name__}>"
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


@functools.cache
def machine_memory_bytes() -> int | None:
    """Physical memory of this machine in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def fits_in_memory(what: str, nbytes: int, hint: str = "") -> int:
    """nbytes if an allocation that large can fit in this machine's memory, else a ValueError
    that says what would have been allocated (`what`), how much, and `hint` (how to shrink it)."""
    memory = machine_memory_bytes()
    if memory is not None and nbytes > memory:
        raise ValueError(f"{what} would need {nbytes / 1e9:,.1f} GB, more than this machine's "
                         f"{memory / 1e9:,.1f} GB of memory" + (f"; {hint}" if hint else ""))
    return nbytes


__all__ = ["UnknownName", "count", "optional_count", "number", "exact_number", "choice", "flag",
           "machine_memory_bytes", "fits_in_memory", "token_ids", "text", "file_path"]

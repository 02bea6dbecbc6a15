"""toykv.__all__ is what the book uses: every top-level name a chapter or page reaches for is
in it, and every name in it is used by the book or fixed by the course's design."""
import re
from pathlib import Path

import nbformat

import toykv

BOOK = Path(__file__).resolve().parent.parent / "book"
# the names the course's design fixes as toykv's public API, used by a chapter or not
DESIGN = {"ModelConfig", "ToyTransformer", "KVCache", "generate", "kv_bytes_per_token",
          "kv_cache_bytes", "zoo", "kv_share", "load_gguf", "load_hf", "sizing"}


def book_texts():
    for path in sorted(BOOK.glob("[0-9]*.ipynb")):
        yield from (cell.source for cell in nbformat.read(path, as_version=4).cells)
    for path in sorted(BOOK.glob("*.md")):
        if path.name != "api.md":                       # generated from __all__ itself
            yield path.read_text()


def names_used() -> set[str]:
    """toykv.NAME anywhere in the book, and the names of every `from toykv import ...`."""
    used = set()
    for text in book_texts():
        used |= set(re.findall(r"\btoykv\.([A-Za-z_]\w*)", text))
        for names in re.findall(r"from toykv import (\([^)]*\)|[^\n]*)", text):
            used |= {n for n in re.split(r"[\s,()]+", names) if n}
    return used


def test_every_name_the_book_uses_is_public():
    assert names_used() - set(toykv.__all__) == set()


def test_every_public_name_is_used_or_fixed_by_the_design():
    assert set(toykv.__all__) - names_used() - DESIGN == set()
    assert DESIGN <= set(toykv.__all__)


def test_every_public_name_is_there():
    for name in toykv.__all__:
        assert getattr(toykv, name) is not None, name


def test_scanner_sees_both_kinds_of_use():
    used = names_used()
    assert {"ToyTransformer", "steptime", "plots", "timing"} <= used

"""toykv.glue: myst-nb's glue as the plain notebooks run it (they show the glued values in
their text already, so it stores nothing and shows a value only when asked)."""
from __future__ import annotations

import pytest

from toykv.glue import glue


def test_glue_shows_a_value_only_when_asked(capsys):
    assert glue("hidden", 3, display=False) is None
    assert capsys.readouterr().out == ""
    glue("shown", 7)            # display=True is myst-nb's default too
    assert capsys.readouterr().out.strip() == "7"


@pytest.mark.parametrize("name", ["", None, 3])
def test_glue_needs_a_name(name, capsys):
    with pytest.raises(ValueError, match="non-empty name"):
        glue(name, 3)
    assert capsys.readouterr().out == ""

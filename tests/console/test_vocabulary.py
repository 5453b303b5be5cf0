"""Templates compare with the runtime's words, and every word they name exists.

A misspelt `RunStatus.FIALED` would resolve to nothing in a template and quietly never match:
this test reads every template for the names it uses.
"""

from __future__ import annotations

import re
from pathlib import Path

from agentops.context import VOCABULARY

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
NAMED = re.compile(r"\b(" + "|".join(VOCABULARY) + r")\.([A-Za-z_]+)")
SPELLED = re.compile(
    r"\b(run\.status|run\.attention_reason|interaction\.status|pending\.kind|op\.status|op\.kind)"
    r" ?[!=]= ?'"
)


def test_every_word_a_template_names_is_in_the_vocabulary() -> None:
    named = [
        (path.name, enum, member)
        for path in TEMPLATES.rglob("*.html")
        for enum, member in NAMED.findall(path.read_text())
    ]
    assert named, "the templates name no word of the vocabulary"
    unknown = [(name, enum, m) for name, enum, m in named if m not in VOCABULARY[enum].__members__]
    assert unknown == []


def test_no_template_spells_a_status_or_kind_itself() -> None:
    spelled = [
        f"{path.name}: {match.group(0)}"
        for path in TEMPLATES.rglob("*.html")
        for match in SPELLED.finditer(path.read_text())
    ]
    assert spelled == []

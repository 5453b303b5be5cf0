"""The code samples of docs/console.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "console.md"
SAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_page_has_samples():
    assert SAMPLES


@pytest.mark.parametrize("number", range(len(SAMPLES)))
def test_it_runs_the_sample(number):
    exec(compile(SAMPLES[number], f"{DOC.name} sample {number + 1}", "exec"), {})

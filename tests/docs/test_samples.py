"""Every code sample of the README and docs/ runs as written, so none can drift from the code.

The convention, for whoever writes a page:
- A ```python block runs. The python blocks of one page run in order in one namespace, as a
  reader follows along, against a test database holding the demo's orders.
- A ```sh block runs when every line is a `python manage.py …` command (in a fresh embedded
  setup of its own), or when every line calls the HTTP API (`curl "$AGENTOPS_URL/…"` or the
  `agentops` command): those run against a live server holding the demo's agents, with a token
  of every scope in AGENTOPS_TOKEN, and must succeed.
- A ```json block is data: it must parse as JSON.
- Any other block that cannot run as written is marked on the line just above its fence with
  `<!-- sample: not run (the reason) -->`, and nothing else is skipped. A fence without a
  language is text (a tree, a diagram), not code.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from demo.seed import create_orders

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
NOT_RUN = re.compile(r"<!-- sample: not run \((?P<reason>[^)]+)\) -->\s*$")
RUNNABLE_SHELL = re.compile(r"^python manage\.py [\w-]+( [\w=./:-]+)*$")
API_SHELL = re.compile(
    r'^(curl -sf (-X POST )?"\$AGENTOPS_URL/api/v1/|agentops( --json)? [a-z]+( |$))'
)


@dataclass(frozen=True)
class Sample:
    page: str
    line: int
    lang: str
    code: str
    not_run: str  # the reason given for not running it, or ""


def samples(page: Path) -> list[Sample]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marked = NOT_RUN.search(before)
        found.append(
            Sample(
                page=page.relative_to(REPO).as_posix(),
                line=text.count("\n", 0, match.start()) + 1,
                lang=match["lang"],
                code=textwrap.dedent(match["body"]),
                not_run=marked["reason"] if marked else "",
            )
        )
    return found


def _pages() -> list[pytest.ParameterSet]:
    return [pytest.param(page, id=page.relative_to(REPO).as_posix()) for page in PAGES]


def test_the_pages_have_the_samples_this_test_runs() -> None:
    """The extraction finds code where there is some (an empty result would pass everything)."""
    found = {page.name: samples(page) for page in PAGES}
    assert [s.lang for s in found["README.md"] if not s.not_run] == ["python", "python"]
    assert sum(s.lang == "python" for s in found["reference.md"]) == 3
    assert [s.lang for s in found["deployment.md"] if not s.not_run] == ["sh", "sh", "python"]
    assert {s.not_run for s in found["README.md"] if s.lang == "sh"} == {
        "make run serves until stopped; make test is the suite itself"
    }


@pytest.mark.parametrize("page", _pages())
def test_every_block_either_runs_or_says_why_not(page: Path) -> None:
    for sample in samples(page):
        where = f"{sample.page}:{sample.line}"
        if sample.not_run or sample.lang in ("", "python"):
            continue
        if sample.lang == "json":
            json.loads(sample.code)  # data a reader copies must be valid
            continue
        assert sample.lang == "sh", f"{where}: a ```{sample.lang} block: python, sh, json or text"
        for line in sample.code.splitlines():
            assert RUNNABLE_SHELL.match(line) or API_SHELL.match(line), (
                f"{where}: {line!r} is not a manage.py command; make it one, or mark the block "
                "<!-- sample: not run (why) -->"
            )


@pytest.fixture
def api_reader(live_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the API page's reader has: a running server with the demo's agents registered, and
    a token with every scope."""
    from demo.agents import refund_desk_v1, refund_desk_v2
    from runtime import register
    from tests.api.conftest import make_account, make_token

    register([refund_desk_v1, refund_desk_v2], actor="docs")
    monkeypatch.setenv("AGENTOPS_URL", live_server.url)
    # A webhook subscription's secret, as the admin shows it once.
    secret = base64.b64encode(os.urandom(24)).decode()
    monkeypatch.setenv("AGENTOPS_WEBHOOK_SECRET", f"whsec_{secret}")
    monkeypatch.setenv("AGENTOPS_TOKEN", make_token(make_account("docs")))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", _pages())
def test_the_python_samples_of_each_page_run_as_written(page: Path, api_reader: None) -> None:
    create_orders()
    namespace: dict[str, object] = {"__name__": f"sample_{page.stem}"}
    for sample in samples(page):
        if sample.lang != "python" or sample.not_run:
            continue
        compiled = compile(sample.code, f"{sample.page}:{sample.line}", "exec")
        exec(compiled, namespace)


@pytest.mark.parametrize("page", _pages())
def test_the_shell_samples_of_each_page_run_as_written(page: Path, tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTOPS_", "DJANGO_", "CELERY_"))
        and key not in {"DATABASE_URL", "REDIS_URL", "ANTHROPIC_API_KEY"}
    }
    env["AGENTOPS_VAR_DIR"] = str(tmp_path / "var")
    for sample in samples(page):
        if sample.lang != "sh" or sample.not_run:
            continue
        for line in sample.code.splitlines():
            if API_SHELL.match(line):
                continue  # run against a live server by the test below
            command = [sys.executable, *shlex.split(line)[1:]]
            done = subprocess.run(
                command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False
            )
            assert done.returncode == 0, f"{sample.page}:{sample.line}: {line}\n{done.stderr}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", _pages())
def test_the_api_shell_samples_of_each_page_run_as_written(page: Path, api_reader: None) -> None:
    create_orders()
    # The `agentops` command installed beside this interpreter, as `make install` puts it.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for sample in samples(page):
        if sample.lang != "sh" or sample.not_run:
            continue
        for line in sample.code.splitlines():
            if not API_SHELL.match(line):
                continue
            done = subprocess.run(
                ["bash", "-c", line],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, f"{sample.page}:{sample.line}: {line}\n{done.stderr}"
            assert done.stdout.strip(), f"{sample.page}:{sample.line}: {line} printed nothing"

"""Accessibility checks with axe-core (vendored, see vendor/axe-core/README.md).

axe is evaluated in the page through the browser's debugging protocol, which the page's
Content-Security-Policy does not govern: the console's CSP stays exactly as in production.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"
# The impacts the console must never have.
BLOCKING = ("serious", "critical")
RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    targets: v.nodes.slice(0, 5).map((n) => n.target.join(" ") + " :: " + n.failureSummary),
  }));
}"""


@cache
def _source() -> str:
    source = AXE.read_text(encoding="utf-8")
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    assert digest == AXE_SHA256, f"{AXE} is not the vendored axe-core (sha256 {digest})"
    return source


# What the page's CSP logs when axe itself adds a <style> element for one of its checks: the
# CSP refuses it, as it should, and the check still runs.
AXE_STYLE = ("Applying inline style violates", "CSP violation: style-src-elem")


def violations(page: Page, watch: Any = None) -> list[dict[str, Any]]:
    """The serious and critical axe violations of the page as it is now.

    `watch` (a browsing.Watch): the console errors axe's own style caused are taken off it.
    """
    before = len(watch.console_errors) if watch is not None else 0
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(_source())
    found = page.evaluate(RUN_AXE)
    if watch is not None:
        during = watch.console_errors[before:]
        watch.console_errors[before:] = [e for e in during if not e.startswith(AXE_STYLE)]
    return [v for v in found if v["impact"] in BLOCKING]


def page_overflow(page: Page) -> int:
    """How many pixels the page is wider than the window (0: no horizontal scroll)."""
    return int(
        page.evaluate(
            "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
            " - window.innerWidth"
        )
    )


def shot_and_checked(person: Any, name: str) -> None:
    """Screenshot what `person` sees as `name`, and fail on its serious axe violations."""
    person.shot(name)
    found = violations(person.page, person.watch)
    assert found == [], (name, found)

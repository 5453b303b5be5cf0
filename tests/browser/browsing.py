"""People at browsers: one Chromium context each, logged in, watched, photographed.

Every page an operator opens is watched for what must never happen in the console: a dialog
(alert/confirm/prompt), an uncaught script error, a console error (a CSP violation is one), or a
request to another host. Chrome also logs every 4xx response as a console error ("Failed to
load resource"); the console answers refused actions with 4xx fragments on purpose, so those
are not counted.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Dialog,
    Locator,
    Page,
    Response,
    Route,
)

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "var" / "screenshots" / "browser"
# Debian's Chromium: Playwright drives it; Playwright's own browser download is never used.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
# What Chrome logs for an expected 4xx, and for a websocket whose server is down.
EXPECTED_4XX = "Failed to load resource: the server responded with a status of 4"
# (htmx's websocket extension also logs the socket's error event, as "[object Event]".)
WEBSOCKET_DOWN = re.compile(r"WebSocket connection to 'ws://[^']+' failed|^\[object Event\] ")
PASSWORD = "correct horse battery staple"
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  const element = event.target && event.target.nodeType === 1 ? event.target.outerHTML : "";
  console.error("CSP violation: " + event.violatedDirective + " sample=" +
    JSON.stringify(event.sample) + " element=" + element.slice(0, 200));
}, true);
"""


class Shots:
    """Screenshots of a test's steps, numbered in order, in var/screenshots/browser/<database>/
    <test>/: each pass of the suite its own folder, so that passes side by side (`make test`)
    do not clear each other's."""

    def __init__(self, test_name: str) -> None:
        from django.db import connection

        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)
        self.folder = SCREENSHOTS / connection.vendor / name
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.count = 0

    def take(self, page: Page, step: str) -> Path:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{step}.png"
        # caret="initial": hiding the caret leaves style="" on every input, which an htmx
        # swap would then copy (and the CSP refuse).
        page.screenshot(path=str(path), full_page=True, caret="initial")
        return path


@dataclass
class Watch:
    """What the pages of one context did that they must not."""

    dialogs: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)
    # Set by a test that drops the websocket on purpose: the reconnect attempts log errors.
    allow_websocket_errors: bool = False

    def problems(self) -> list[str]:
        console = [
            text
            for text in self.console_errors
            if not (self.allow_websocket_errors and WEBSOCKET_DOWN.search(text))
        ]
        return (
            [f"dialog: {d}" for d in self.dialogs]
            + [f"page error: {e}" for e in self.page_errors]
            + [f"console error: {c}" for c in console]
            + [f"request to another host: {r}" for r in self.foreign_requests]
        )


class Person:
    """One operator (or agent admin) in their own browser context."""

    def __init__(self, browser: Browser, base_url: str, username: str, shots: Shots) -> None:
        self.username = username
        self.base_url = base_url
        self.shots = shots
        self.watch = Watch()
        self.context: BrowserContext = browser.new_context(
            base_url=base_url, viewport=VIEWPORT, locale="en-US", timezone_id="UTC"
        )
        self.context.set_default_timeout(15_000)
        local = urlparse(base_url).netloc

        def foreign(url: str) -> bool:
            parsed = urlparse(url)
            return parsed.scheme in {"http", "https", "ws", "wss"} and parsed.netloc != local

        def refuse(route: Route) -> None:
            self.watch.foreign_requests.append(route.request.url)
            route.abort()

        self.context.route(foreign, refuse)
        self.context.on("page", self._watch_page)
        # Chrome's own CSP message does not say which element; this one does.
        self.context.add_init_script(REPORT_CSP_VIOLATIONS)
        self.page = self.context.new_page()

    def _watch_page(self, page: Page) -> None:
        def on_dialog(dialog: Dialog) -> None:
            self.watch.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error" and EXPECTED_4XX not in message.text:
                where = message.location
                self.watch.console_errors.append(
                    f"{message.text} (at {page.url}; {where.get('url')}:{where.get('lineNumber')})"
                )

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda error: self.watch.page_errors.append(str(error)))
        page.on("console", on_console)

    def login(self) -> Person:
        """Log in through the login page, as a person does."""
        page = self.page
        page.goto("/accounts/login/?next=/")
        page.fill("#id_username", self.username)
        page.fill("#id_password", PASSWORD)
        with page.expect_navigation():
            page.click("button[type=submit]")
        assert urlparse(page.url).path != "/accounts/login/", f"{self.username} could not log in"
        return self

    def open(self, path: str, *, live: bool = True) -> Page:
        """Open `path`; on a live page, wait until its websocket is open."""
        response = self.page.goto(path)
        assert response is not None and response.status == 200, (path, response)
        if live:
            self.wait_live()
        return self.page

    def wait_live(self, timeout: float = 15_000) -> None:
        self.page.wait_for_selector("#live-status[data-state=open]", timeout=timeout)

    def shot(self, step: str, page: Page | None = None) -> Path:
        return self.shots.take(page or self.page, f"{self.username}-{step}")

    def mark(self) -> None:
        """Mark the document: `still_same_document` tells later whether it was reloaded."""
        self.page.evaluate("window.__browserTestMark = 'not reloaded'")

    def still_same_document(self) -> bool:
        return bool(self.page.evaluate("window.__browserTestMark === 'not reloaded'"))

    def close(self) -> None:
        self.context.close()


def click_for_answer(page: Page, button: Locator, path_end: str) -> Response:
    """Click `button` and return the answer to the request it sends (to a path ending in
    `path_end`).

    An action's notice ("Approved …: the run continues.") is in that answer; on the page it can
    be replaced a moment later by the live push of the state that followed, so tests read it
    here.
    """
    with page.expect_response(lambda r: urlparse(r.url).path.endswith(path_end)) as answer:
        button.click()
    return answer.value


def inbox_row(page: Page, queue: str, run: Any) -> Locator:
    """The row of `run` in one of the inbox's queues: approvals, questions, attention, retries."""
    return page.locator(f"#queue-{queue} tbody tr", has=page.locator(f"a[href='/runs/{run.pk}/']"))


def text_of(page: Page, selector: str = "body") -> str:
    """Every text node under `selector`, closed <details> included (textContent)."""
    return str(page.eval_on_selector(selector, "el => el.textContent"))


def seconds_left(countdown: str) -> int:
    """'in 0:42' or 'in 1:02:03' -> seconds."""
    match = re.fullmatch(r"in (?:(\d+):)?(\d+):(\d\d)", countdown.strip())
    assert match, f"not a running countdown: {countdown!r}"
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def csp_of(response: Any) -> str:
    return str(response.headers.get("content-security-policy", ""))

"""`agentops`: the command line over the HTTP API, for operators and scripts.

The server and the token come from AGENTOPS_URL and AGENTOPS_TOKEN. Exit status: 0 done,
1 the API refused (its error code and message are printed) or could not be reached, 2 a
usage or configuration error. `--json` prints the API's answer as it came.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any, TextIO

TIMEOUT_SECONDS = 30
PAGE = 200


class CliError(Exception):
    """An error to print as `error: <code>: <message>` and exit with `status`."""

    def __init__(self, code: str, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def safe(text: Any) -> str:
    """Agent-controlled text for a terminal: control characters shown escaped, never obeyed."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text)
    )


class Client:
    def __init__(self, url: str, token: str) -> None:
        self.base = url.rstrip("/") + "/api/v1"
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.base + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise _api_error(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CliError("connection_failed", f"{self.base}: {reason}") from None

    def pages(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self.call("GET", path, params={**params, "limit": PAGE, "cursor": cursor})
            items.extend(page["items"])
            cursor = page["next_cursor"]
            if not cursor:
                return items


def _api_error(exc: urllib.error.HTTPError) -> CliError:
    raw = exc.read()
    try:
        error = json.loads(raw)["error"]
        return CliError(str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        # Not the API's error body (a proxy, a server error page): say what came back.
        return CliError(f"http_{exc.code}", safe(raw[:200].decode("utf-8", "replace")))


# --- output --------------------------------------------------------------------------------------


def _one_line(value: Any) -> str:
    return safe(json.dumps(value, ensure_ascii=False, sort_keys=True))


def _interaction_line(item: dict[str, Any]) -> str:
    if item["kind"] == "question":
        what = f"question  {safe(item['payload'].get('question', ''))}"
    else:
        what = f"approval  {safe(item['tool_name'])} {_one_line(item['payload'].get('arguments'))}"
    return f"{item['id']}  run {item['run']}  {what}"


def _print_run(run: dict[str, Any], out: TextIO) -> None:
    print(f"run {run['id']}  {run['status']}", file=out)
    print(f"  agent    {safe(run['agent'])} {safe(run['version'])}", file=out)
    print(f"  session  {run['session']}", file=out)
    print(f"  input    {safe(run['input'])}", file=out)
    for label in ("output", "error", "attention_reason", "blocked_operation"):
        if run.get(label):
            print(f"  {label.replace('_', ' '):<9}{safe(run[label])}", file=out)
    if run.get("next_attempt_at"):
        print(f"  next attempt at {run['next_attempt_at']}", file=out)
    if run.get("retry_problem"):
        print(f"  retry: refused ({safe(run['retry_problem'])})", file=out)
    pending = run.get("pending")
    if pending:
        print(f"  waits for {_interaction_line(pending)}", file=out)
    operations = run.get("operations") or []
    if operations:
        print("  operations:", file=out)
    for op in operations:
        print(f"    {safe(op['key']):<40} {op['status']:<10} {safe(op['name'])}", file=out)


# --- commands ------------------------------------------------------------------------------------


def _inbox(client: Client, args: argparse.Namespace, out: TextIO) -> Any:
    waiting = client.pages("/interactions", {})
    blocked = client.pages("/runs", {"status": "needs_attention"})
    if args.json:
        return {"interactions": waiting, "needs_attention": blocked}
    for item in waiting:
        print(_interaction_line(item), file=out)
    for run in blocked:
        on = f" on {safe(run['blocked_operation'])}" if run["blocked_operation"] else ""
        print(f"run {run['id']}  needs attention: {safe(run['attention_reason'])}{on}", file=out)
    if not waiting and not blocked:
        print("Nothing waits.", file=out)
    return None


def _show(client: Client, args: argparse.Namespace, out: TextIO) -> Any:
    run = client.call("GET", f"/runs/{_id(args.run)}")
    if args.json:
        return run
    _print_run(run, out)
    return None


def _submit(client: Client, args: argparse.Namespace, out: TextIO) -> Any:
    body = {"agent": args.agent, "message": args.message}
    if args.session:
        body["session"] = args.session
    if args.agent_version:
        body["version"] = args.agent_version
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    run = client.call("POST", "/runs", body, headers=headers)
    if args.json:
        return run
    print(f"run {run['id']}  {run['status']}  (session {run['session']})", file=out)
    return None


def _respond(client: Client, args: argparse.Namespace, out: TextIO, response: Any) -> Any:
    found = client.call("POST", f"/interactions/{_id(args.interaction)}/respond", response)
    if args.json:
        return found
    print(f"{found['id']}  {found['status']} by {safe(found['responded_by'])}", file=out)
    return None


def _resolve(client: Client, args: argparse.Namespace, out: TextIO) -> Any:
    if (args.result is None) == (args.did_not_happen is None):
        raise CliError("usage", "give either --result (it happened) or --did-not-happen", status=2)
    result = None
    if args.result is not None:
        try:
            result = json.loads(args.result)
        except ValueError as exc:
            raise CliError("invalid_result", f"--result is not JSON: {exc}", status=2) from None
    run_id = _id(args.run)
    key = args.key or client.call("GET", f"/runs/{run_id}")["blocked_operation"]
    if not key:
        raise CliError("not_blocked", f"run {run_id} is not blocked on an operation")
    outcome = {None: "result", "run-again": "not_run_again", "tell-model": "not_run_tell_model"}
    body = {
        "operation_key": key,
        "outcome": outcome[args.did_not_happen],
        "result": result,
        "evidence": args.evidence,
    }
    op = client.call("POST", f"/runs/{run_id}/resolve", body)
    if args.json:
        return op
    print(f"{safe(op['operation_id'])}  {op['status']}: the run continues", file=out)
    return None


def _retry(client: Client, args: argparse.Namespace, out: TextIO) -> Any:
    run = client.call("POST", f"/runs/{_id(args.run)}/retry")
    if args.json:
        return run
    print(f"run {run['id']}  {run['status']}", file=out)
    return None


def _cancel(client: Client, args: argparse.Namespace, out: TextIO) -> Any:
    run = client.call("POST", f"/runs/{_id(args.run)}/cancel", {"reason": args.reason})
    if args.json:
        return run
    print(f"run {run['id']}  {run['status']}", file=out)
    return None


def _id(value: str) -> str:
    # Ids go into the URL path: quoted, so a stray "/" or "?" cannot reach another endpoint.
    return urllib.parse.quote(value, safe="")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="agentops",
        description="Operate AgentOps runs over its HTTP API "
        "(AGENTOPS_URL and AGENTOPS_TOKEN from the environment).",
    )
    root.add_argument("--json", action="store_true", help="print the API's JSON answer")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("inbox", help="what waits: approvals, questions, blocked runs")
    show = commands.add_parser("show", help="a run with its operations")
    show.add_argument("run")
    submit = commands.add_parser("submit", help="start a run")
    submit.add_argument("agent")
    submit.add_argument("message")
    submit.add_argument("--session", help="continue this session")
    submit.add_argument("--agent-version", help="this agent version (default: the newest)")
    submit.add_argument("--idempotency-key", help="a repeat with the same key starts nothing")
    approve = commands.add_parser("approve", help="approve a tool call")
    approve.add_argument("interaction")
    reject = commands.add_parser("reject", help="reject a tool call; the agent sees the reason")
    reject.add_argument("interaction")
    reject.add_argument("--reason", required=True)
    answer = commands.add_parser("answer", help="answer an agent's question")
    answer.add_argument("interaction")
    answer.add_argument("text")
    resolve = commands.add_parser("resolve", help="supply the verified result, with evidence")
    resolve.add_argument("run")
    resolve.add_argument("--result", help="the call happened: its verified result, as JSON")
    resolve.add_argument(
        "--did-not-happen",
        choices=["run-again", "tell-model"],
        help="the call did not happen: run it once more, or tell the model so",
    )
    resolve.add_argument("--evidence", required=True, help="what you checked")
    resolve.add_argument("--key", help="the operation (default: the one the run is blocked on)")
    retry = commands.add_parser("retry", help="retry a failed or blocked run")
    retry.add_argument("run")
    cancel = commands.add_parser("cancel", help="cancel an unfinished run")
    cancel.add_argument("run")
    cancel.add_argument("--reason", default="")
    return root


def run_command(args: argparse.Namespace, client: Client, out: TextIO) -> Any:
    match args.command:
        case "inbox":
            return _inbox(client, args, out)
        case "show":
            return _show(client, args, out)
        case "submit":
            return _submit(client, args, out)
        case "approve":
            return _respond(client, args, out, {"approved": True})
        case "reject":
            return _respond(client, args, out, {"approved": False, "reason": args.reason})
        case "answer":
            return _respond(client, args, out, {"answer": args.text})
        case "resolve":
            return _resolve(client, args, out)
        case "retry":
            return _retry(client, args, out)
        case "cancel":
            return _cancel(client, args, out)
    raise CliError("usage", f"unknown command {args.command!r}", status=2)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out, err = sys.stdout, sys.stderr
    url, token = os.environ.get("AGENTOPS_URL", ""), os.environ.get("AGENTOPS_TOKEN", "")
    try:
        if not url or not token:
            raise CliError("not_configured", "set AGENTOPS_URL and AGENTOPS_TOKEN", status=2)
        answer = run_command(args, Client(url, token), out)
    except CliError as exc:
        print(f"error: {exc.code}: {safe(exc.message)}", file=err)
        return exc.status
    if answer is not None:
        print(json.dumps(answer, indent=2), file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

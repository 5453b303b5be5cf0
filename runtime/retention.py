"""Retention: finished runs older than an age leave the database for an archive file.

`archive_runs` decides (the age, the directory, what a dry run does) and reports; the store
(runtime/store/archive.py) writes the file and deletes the rows, batch by batch. The file
format is described in docs/deployment.md ("Retention").
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from runtime import clock
from runtime.errors import AgentOpsError
from runtime.store import archive

_AGE = re.compile(r"([0-9]+)([hdw])")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


class ArchiveError(AgentOpsError):
    """Retention was asked for something it cannot do; nothing was changed."""

    code = "archive_refused"


def parse_age(text: str) -> dt.timedelta:
    """`90d`, `12h`, `2w`: a positive age."""
    shown = text if len(text) <= 40 else text[:40] + "…"
    match = _AGE.fullmatch(text.strip())
    if match is None or not match[1].strip("0"):
        raise ArchiveError(
            f"the age {shown!r} is not a positive whole number of hours, days or weeks "
            "(e.g. 90d, 12h, 2w)"
        )
    try:
        return dt.timedelta(**{_UNITS[match[2]]: int(match[1])})
    except (OverflowError, ValueError):  # past what a timedelta holds (or int() reads)
        raise ArchiveError(f"the age {shown!r} reaches back before the year 1") from None


@dataclass(frozen=True)
class ArchiveReport:
    path: Path | None  # None in a dry run, or when nothing moved (no file is left)
    runs: int
    rows: dict[str, int]  # by model label, e.g. "agentops.event"
    bytes: int
    batches: int
    seconds: float

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def rows_per_second(self) -> float:
        return self.total_rows / self.seconds if self.seconds > 0 else 0.0


def archive_runs(
    older_than: dt.timedelta,
    *,
    to: Path,
    batch: int = 1000,
    dry_run: bool = False,
    after_batch: Callable[[int], None] | None = None,
    before_delete: Callable[[list[str]], None] | None = None,
) -> ArchiveReport:
    """Archive every finished run older than `older_than` into one new gzip file in `to`, then
    delete it; a dry run counts what would move and writes nothing, and so does a run that
    finds nothing to move (its file is removed).

    `after_batch(n)` runs after the n-th batch committed, `before_delete(run ids)` after a
    batch's file member is durable and before its rows are deleted (where a crash is tested).
    """
    if older_than <= dt.timedelta(0):
        raise ArchiveError("the age must be positive")
    if batch < 1:
        raise ArchiveError(f"the batch size must be at least 1, not {batch}")
    if not dry_run and not (to.is_dir() and os.access(to, os.W_OK | os.X_OK)):
        raise ArchiveError(f"cannot write an archive into {to}: not a writable directory")
    now = clock.now()
    try:
        cutoff = now - older_than
    except OverflowError:
        raise ArchiveError("the age reaches back before the year 1") from None
    tables = archive.history_tables()
    moved = archive.Moved()
    started = time.perf_counter()
    path = None

    def walk(out: IO[bytes] | None) -> int:
        """One pass over the eligible runs by id, batch by batch: the forks it archived."""
        forks, after = 0, None
        while True:
            batch_ = archive.archive_batch(
                out, cutoff, tables, batch, moved, after=after, before_delete=before_delete
            )
            if batch_.runs == 0:
                return forks
            forks, after = forks + batch_.forks, batch_.last
            if after_batch is not None and out is not None:
                after_batch(moved.batches)

    if dry_run:
        # Nothing moves, so a parent whose forks would go first is not counted.
        walk(None)
    else:
        try:
            path, out = archive.open_archive(to, now)
        except OSError as exc:
            raise ArchiveError(f"cannot create an archive file in {to}: {exc}") from exc
        with out:
            archive.append_member(out, [archive.header(cutoff, now)])
            # Another pass while the last one archived forks: their parents may be free now.
            while walk(out):
                pass
        if moved.runs:
            moved.bytes = path.stat().st_size
        else:  # a file holding only its header would be one more for each scheduled run
            path.unlink()
            path = None
    return ArchiveReport(
        path=path,
        runs=moved.runs,
        rows=dict(moved.rows),
        bytes=moved.bytes,
        batches=moved.batches,
        seconds=time.perf_counter() - started,
    )

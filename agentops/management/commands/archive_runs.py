"""`manage.py archive_runs --older-than 90d`: finished runs older than the age go to a gzip
archive file and leave the database (runtime/retention.py; docs/deployment.md, "Retention")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runtime.retention import ArchiveError, archive_runs, parse_age


class Command(BaseCommand):
    help = (
        "Archive finished runs (completed, failed, cancelled) older than an age to one gzip "
        "JSON-lines file, then delete them in short batches."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", required=True, help="e.g. 90d, 12h, 2w")
        parser.add_argument("--to", default=".", help="the directory of the archive file")
        parser.add_argument("--batch", type=int, default=1000, help="runs per transaction")
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would move; write nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = archive_runs(
                parse_age(options["older_than"]),
                to=Path(options["to"]),
                batch=options["batch"],
                dry_run=options["dry_run"],
            )
        except ArchiveError as exc:
            raise CommandError(exc.message) from exc
        if not report.runs:
            older = options["older_than"].strip()
            self.stdout.write(f"nothing to archive: no finished run is older than {older}")
            return
        verb = "would archive" if options["dry_run"] else "archived"
        where = f" to {report.path}" if report.path else ""
        self.stdout.write(f"{verb} {report.runs} runs{where}")
        for label, count in sorted(report.rows.items()):
            self.stdout.write(f"  {label}: {count} rows")
        self.stdout.write(
            f"{report.total_rows} rows, {report.bytes} bytes, {report.batches} batches in "
            f"{report.seconds:.2f} s ({report.rows_per_second:,.0f} rows/s)"
        )

"""The writes of retention: finished runs' history copied to an archive file, then deleted.

What a run's history is comes from the model graph, not from a list kept by hand: the run and
every row that references it, directly or through a row that does (its operations, interactions,
events, work items, votes, timers, receipts, bulk items, and rows other apps keep about them,
such as the webhook deliveries made from its events). A table added later with a foreign key to
any of these is archived without a change here.

Each batch is one short transaction: lock the batch's runs (skipping any another transaction
holds), read their rows, append them to the file as one gzip member, flush and fsync, then
delete them, children first. A crash before the fsync deletes nothing; a crash after it leaves
the batch either deleted and archived, or archived and still in the database (archived again by
the next invocation, into its own file). No run is ever deleted without being in a file on disk.
Deletes are plain DELETE statements, so triggers on the tables (status counters) stay right.

On PostgreSQL a row's line is built by the database (`json_build_object`), read as text and
written as it came: decoding every JSON column and timestamp only to encode it again was most of
a batch's time. Elsewhere the rows are read through the ORM and encoded the same way, so a file
says the same whichever database wrote it: times in ISO 8601 to the microsecond, ids as text,
JSON columns as JSON.
"""

from __future__ import annotations

import datetime as dt
import functools
import gzip
import json
import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.apps import apps
from django.db import connection, models, transaction
from django.db.models import Exists, F, OuterRef, Q

from runtime.models import (
    TERMINAL_STATUSES,
    BulkJobItem,
    BulkJobStatus,
    Run,
)

FORMAT = "agentops-archive"
# 2: times to the microsecond with their offset (1 cut them to the millisecond, ending in Z).
VERSION = 2


@dataclass(frozen=True)
class Table:
    """A model of a run's history and the lookup from its rows to their run's id."""

    model: type[models.Model]
    to_run: str  # e.g. "run_id", "interaction__run_id", "event__run_id"; "id" for the run

    @property
    def label(self) -> str:
        return self.model._meta.label_lower

    @property
    def depth(self) -> int:
        return self.to_run.count("__")


def history_tables() -> list[Table]:
    """Every model whose rows belong to a run's history, parents before children."""
    found: dict[type[models.Model], Table] = {Run: Table(Run, "id")}
    frontier: list[Table] = [found[Run]]
    while frontier:
        target = frontier.pop(0)
        for model in apps.get_models():
            if model in found or model._meta.proxy:
                continue
            # (The run itself is found first, so a fork's parent link is never followed: a
            # parent is a run of its own, not history of its fork.)
            for fk in model._meta.concrete_fields:
                if isinstance(fk, models.ForeignKey) and fk.related_model is target.model:
                    via = "_id" if target.model is Run else f"__{target.to_run}"
                    found[model] = table = Table(model, f"{fk.name}{via}")
                    frontier.append(table)
                    break
    return sorted(found.values(), key=lambda table: table.depth)


def _unfinished_rows(tables: list[Table]) -> Q:
    """A run waits while a row of its history says it is unfinished (an empty `finished_at`,
    e.g. a webhook delivery still to be sent): archiving would drop work still to be done."""
    held = Q()
    for table in tables:
        if table.model is Run:
            continue
        names = {f.name for f in table.model._meta.concrete_fields}
        if "finished_at" in names:
            rows = table.model._default_manager.filter(
                finished_at__isnull=True, **{table.to_run: OuterRef("pk")}
            )
            held |= Q(Exists(rows))
    return held


def eligible(cutoff: dt.datetime, tables: list[Table]) -> models.QuerySet[Run]:
    """Finished runs older than `cutoff` that nothing live still references: no fork of theirs
    is left (forks go first; their parent follows in a later pass), no running bulk job holds
    them, and no row of their history is still unfinished."""
    live_bulk = BulkJobItem.objects.filter(run=OuterRef("pk"), job__status=BulkJobStatus.RUNNING)
    forks = Run.objects.filter(parent=OuterRef("pk"))
    runs = Run.objects.filter(status__in=TERMINAL_STATUSES, finished_at__lt=cutoff).exclude(
        Q(Exists(live_bulk)) | Q(Exists(forks))
    )
    held = _unfinished_rows(tables)
    return runs.exclude(held) if held else runs


@dataclass
class Moved:
    """What an invocation moved (or, in a dry run, would move)."""

    runs: int = 0
    rows: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes: int = 0
    batches: int = 0


def _lines(table: Table, run_ids: list[Any]) -> Iterator[tuple[str, Any, bytes]]:
    """(run id, primary key, archive line) of the table's rows belonging to these runs, in
    primary key order."""
    lines = _database_lines if connection.vendor == "postgresql" else _orm_lines
    yield from lines(table, run_ids)


def _orm_lines(table: Table, run_ids: list[Any]) -> Iterator[tuple[str, Any, bytes]]:
    fields = table.model._meta.concrete_fields
    pk_name = table.model._meta.pk.attname
    lookup = "id__in" if table.model is Run else f"{table.to_run}__in"
    rows = (
        table.model._default_manager.filter(**{lookup: run_ids})
        .order_by("pk")
        .values(*(f.attname for f in fields), _run=F(table.to_run))
    )
    for row in rows:
        run = str(row.pop("_run"))
        yield run, row[pk_name], _encode({"fields": row, "model": table.label, "run": run})


def _database_lines(table: Table, run_ids: list[Any]) -> Iterator[tuple[str, Any, bytes]]:
    with connection.cursor() as cursor:
        cursor.execute(_line_sql(table), [run_ids])
        for run, pk, fields in cursor:
            line = f'{{"fields": {fields}, "model": "{table.label}", "run": "{run}"}}\n'
            yield run, pk, line.encode()


@functools.cache
def _line_sql(table: Table) -> str:
    """SELECT run id, primary key, the row's fields as JSON text (keys sorted), for the rows of
    the runs in the array parameter: the table joined up its path to the run's id."""
    quote = connection.ops.quote_name
    meta = table.model._meta
    model, alias, joins = table.model, "t0", ""
    *path, run_attname = table.to_run.split("__")
    for depth, name in enumerate(path, start=1):
        fk = model._meta.get_field(name)
        assert isinstance(fk, models.ForeignKey)
        model, parent = fk.related_model, f"t{depth}"
        joins += (
            f" JOIN {quote(model._meta.db_table)} {parent}"
            f" ON {parent}.{_column(model, model._meta.pk.attname)} = {alias}.{quote(fk.column)}"
        )
        alias = parent
    run = f"{alias}.{_column(model, run_attname)}"
    pk = f"t0.{_column(table.model, meta.pk.attname)}"
    fields = ", ".join(
        f"'{f.attname}', t0.{_column(table.model, f.attname)}"
        for f in sorted(meta.concrete_fields, key=lambda f: f.attname)
    )
    return (
        f"SELECT {run}::text, {pk}, json_build_object({fields})::text"
        f" FROM {quote(meta.db_table)} t0{joins} WHERE {run} = ANY(%s::uuid[]) ORDER BY {pk}"
    )


def _column(model: type[models.Model], attname: str) -> str:
    (column,) = (f.column for f in model._meta.concrete_fields if f.attname == attname)
    return connection.ops.quote_name(str(column))


def _plain(value: Any) -> Any:
    """A value the ORM reads, as PostgreSQL's own JSON writes it."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not archived")


def _encode(line: dict[str, Any]) -> bytes:
    return (json.dumps(line, default=_plain, sort_keys=True, ensure_ascii=False) + "\n").encode()


def header(cutoff: dt.datetime, now: dt.datetime) -> bytes:
    return _encode({"format": FORMAT, "version": VERSION, "created_at": now, "cutoff": cutoff})


def append_member(out: IO[bytes], lines: list[bytes]) -> int:
    """Append one complete gzip member of encoded lines and make it durable: flush, then fsync.
    Bytes written."""
    data = gzip.compress(b"".join(lines), compresslevel=5)
    out.write(data)
    out.flush()
    os.fsync(out.fileno())
    return len(data)


def _delete(table: Table, pks: list[Any]) -> None:
    # Plain DELETEs by primary key (events refuse the ORM's delete(): the log is append-only
    # everywhere but here): one statement with an array on PostgreSQL, chunks of as many
    # parameters as SQLite allows elsewhere.
    meta = table.model._meta
    quote = connection.ops.quote_name
    pk_field = meta.pk
    assert pk_field is not None
    where = f"DELETE FROM {quote(meta.db_table)} WHERE {quote(str(pk_field.column))}"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            array = f"{pk_field.rel_db_type(connection)}[]"
            cursor.execute(f"{where} = ANY(%s::{array})", [pks])
            return
        for start in range(0, len(pks), 500):
            chunk = [pk_field.get_db_prep_value(pk, connection) for pk in pks[start : start + 500]]
            cursor.execute(f"{where} IN ({', '.join(['%s'] * len(chunk))})", chunk)


@dataclass(frozen=True)
class Batch:
    runs: int  # 0: no eligible run is left past `after`
    last: Any  # the last run id it took: the next batch starts after it
    forks: int  # runs in it that were forks (their parents may be eligible now)


def archive_batch(
    out: IO[bytes] | None,
    cutoff: dt.datetime,
    tables: list[Table],
    size: int,
    moved: Moved,
    *,
    after: Any = None,
    before_delete: Callable[[list[str]], None] | None = None,
) -> Batch:
    """Archive the next batch of eligible runs by id, past `after`. With `out` None (a dry
    run) it only counts."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # The planner prices a LIMITed walk of the runs over the JIT threshold, and compiling
            # the query cost more than running it (about half a second per batch, measured).
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL jit = off")
        runs = eligible(cutoff, tables).order_by("pk")
        if after is not None:
            runs = runs.filter(pk__gt=after)
        if out is not None:
            # Locked for the batch; a run another transaction holds (a retry that is landing)
            # is skipped, not waited for.
            runs = runs.select_for_update(skip_locked=True)
        taken = list(runs.values_list("pk", "parent_id")[:size])
        if not taken:
            return Batch(0, after, 0)
        ids = [pk for pk, _ in taken]
        forks = sum(1 for _, parent in taken if parent is not None)
        # Each run's lines, and how many of each table, in the tables' order.
        per_run: dict[str, list[bytes]] = defaultdict(list)
        counts: dict[str, dict[str, int]] = defaultdict(dict)
        pks: dict[Table, list[Any]] = {}
        for table in tables:
            pks[table] = []
            for run, pk, line in _lines(table, ids):
                per_run[run].append(line)
                counts[run][table.label] = counts[run].get(table.label, 0) + 1
                pks[table].append(pk)
            moved.rows[table.label] += len(pks[table])
        moved.runs += len(ids)
        moved.batches += 1
        if out is None:
            return Batch(len(ids), ids[-1], forks)
        lines: list[bytes] = []
        for run_id in map(str, ids):
            lines.append(_encode({"rows": counts[run_id], "run": run_id}))
            lines.extend(per_run[run_id])
        moved.bytes += append_member(out, lines)
        if before_delete is not None:
            before_delete([str(run_id) for run_id in ids])
        for table in reversed(tables):
            _delete(table, pks[table])
    return Batch(len(ids), ids[-1], forks)


def open_archive(directory: Path, now: dt.datetime) -> tuple[Path, IO[bytes]]:
    """A new archive file in `directory`, created (never overwritten) and made durable."""
    path = directory / f"runs-{now:%Y%m%dT%H%M%S%fZ}.jsonl.gz"
    out = path.open("xb")
    # The file's name is durable too: fsync the directory that holds it.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path, out


def read_archive(path: Path) -> Iterator[dict[str, Any]]:
    """Every line of an archive file, the header first (gzip reads its members as one)."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line)

"""The tool calls' text that the console's search reads, folded from the event log.

On PostgreSQL a search for a customer's name or a receipt id reads a trigram index of every
tool call's arguments and result. Kept on the operations table, that index cost each record an
entry in its own statement, and each outcome a rewrite of all of the operation's index entries:
about a tenth of a PostgreSQL run's time (docs/performance.md). So the records write no search
text; this fold, on every worker's outbox timer, copies the text of the calls named by the
events since its cursor into `ToolCallText`, in order and in batches, and the search reads that
table and the calls of the events not folded yet (agentops.selectors), so it finds a call the
moment its record commits.

The calls an event names: the one of its operation key (an intent, an outcome, an approval, an
operator's verified result), or every call of a fork, whose copied calls have one event between
them. Folding an event again writes the same text. On SQLite there is no trigram index, the
search reads the operations themselves, and nothing is folded.
"""

from __future__ import annotations

from django.db import connection, transaction

from agentops.integrations import outbox
from agentops.integrations.models import OutboxCursor, ToolCallText
from runtime import store
from runtime.models import Event, EventKind, Operation, OperationKind

CURSOR = "search"
# A worker's pass folds up to this many batches, so the fold keeps up with runs that write
# thousands of events a second and the deliveries after it still go out on time.
ROUNDS = 20

_OPERATION = Operation._meta.db_table
_EVENT = Event._meta.db_table
# A call's text, as the folded table holds it and the search matches it.
_TEXT = "o.input::text || ' ' || coalesce(o.result::text, '')"


def _named_calls(events: str, *, select: str, where: str = "TRUE") -> str:
    """`select` of each tool call `o` that an event `e` matching `events` names and that matches
    `where`: by the event's key through the (run, key) index, and a fork's every call."""
    return f"""
    SELECT {select} FROM {_EVENT} e JOIN {_OPERATION} o
        ON o.run_id = e.run_id AND o.key = e.operation_key
    WHERE {events} AND o.kind = '{OperationKind.TOOL}' AND {where}
    UNION SELECT {select} FROM {_EVENT} e JOIN {_OPERATION} o ON o.run_id = e.run_id
    WHERE {events} AND e.kind = '{EventKind.FORKED}' AND o.kind = '{OperationKind.TOOL}'
        AND {where}"""


FOLD = f"""
INSERT INTO {ToolCallText._meta.db_table} AS t (operation_id, text)
{_named_calls("e.id = ANY(%(ids)s)", select=f"o.id, {_TEXT}")}
ON CONFLICT (operation_id) DO UPDATE SET text = excluded.text
    WHERE t.text IS DISTINCT FROM excluded.text"""


def folded_through() -> int:
    """The event id through which the search text is folded (0 before the first pass)."""
    cursor = OutboxCursor.objects.filter(name=CURSOR).values_list("position", flat=True)
    return cursor.first() or 0


def unfolded(position: int) -> str:
    """The search's part for the events after `position`, not folded yet: the runs of the calls
    they name whose text matches (two ILIKE parameters, the same pattern). The position is
    written into the statement, so that the planner reads those few events by their primary
    key; as a parameter or a subquery it would guess at a third of the log."""
    after = f"e.id > {int(position)}"
    return _named_calls(after, select="o.run_id", where=f"({_TEXT}) ILIKE %s")


# The search's part for the folded text, through its trigram index.
FOLDED = f"""
SELECT o.run_id FROM {ToolCallText._meta.db_table} t JOIN {_OPERATION} o ON o.id = t.operation_id
WHERE t.text ILIKE %s"""


def fold(limit: int) -> int:
    """Fold the next settled events' calls into the search text, a batch of `limit` events at a
    time, until caught up or ROUNDS batches; how many events were read."""
    if connection.vendor != "postgresql":
        return 0
    read = 0
    for _ in range(ROUNDS):
        with transaction.atomic():
            cursor = outbox.locked_cursor(CURSOR, start_at_newest=False)
            ids, position = store.settled_events(cursor.position, limit=limit)
            if not ids:
                break
            with connection.cursor() as db:
                db.execute(FOLD, {"ids": ids})
            OutboxCursor.objects.filter(pk=cursor.pk).update(position=position)
        read += len(ids)
        if len(ids) < limit:
            break
    return read

"""The ways of running the scenario that the overhead benchmark compares.

Each factory is called inside its own worker process (see `bench.worker`) and returns an object
with run() (one complete run of the scenario), check() (verifies the last run and describes
what was measured, e.g. rows written per run and the durability settings in force) and close().

- plain: the loop with no durability at all;
- bound_sqlite / bound_postgres: the lower bound, the same loop with two bare commits per call
  (an autocommitted INSERT before and after each call) on the same driver and settings;
- agentops: our runtime, `submit` then `advance`, exactly as a worker runs it;
- dbos: DBOS Transact, a workflow whose model request and tool calls are steps;
- langgraph: a LangGraph graph (a model node, one tool task per tool call via `Send`, the
  prebuilt ReAct agent's shape) with its SQLite or PostgreSQL checkpointer, durability="sync".
"""

from __future__ import annotations

import importlib.metadata
import operator
import sqlite3
import uuid
from contextlib import closing
from typing import Annotated, Any, TypedDict

from bench import scenario

try:
    # LangGraph passes the config to a node only if its annotation is this type, and evaluates
    # the annotation: it has to be importable here.
    from langchain_core.runnables import RunnableConfig
except ImportError:  # LangGraph is a bench extra; without it its variants are skipped
    RunnableConfig = dict  # type: ignore[misc,assignment]

# The durability settings of our SQLite database (agentops/settings.py), for the bound.
SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _first(row: Any) -> Any:
    """The first column of a row, whether a tuple or a dict (psycopg's dict_row)."""
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def _row(conn: Any, query: str, params: tuple[Any, ...] = ()) -> Any:
    """One row; `conn` is anything with execute() returning a cursor (DB-API or Django)."""
    cursor = conn.execute(query, params) if params else conn.execute(query)
    return (cursor if cursor is not None else conn).fetchone()


def _value(conn: Any, query: str, params: tuple[Any, ...] = ()) -> Any:
    """One value (the first column of one row)."""
    return _first(_row(conn, query, params))


def _sqlite_settings(conn: Any) -> str:
    mode = _value(conn, "PRAGMA journal_mode")
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[_value(conn, "PRAGMA synchronous")]
    return f"journal_mode={mode}, synchronous={sync}"


def _postgres_settings(conn: Any) -> str:
    names = ("synchronous_commit", "fsync", "wal_sync_method")
    return ", ".join(f"{name}={_value(conn, f'SHOW {name}')}" for name in names)


def log_per_call(conn: Any, run: Any, *, postgres: bool) -> str:
    """What one run writes to the database's write-ahead log, per call: on SQLite in pages (a
    commit appends every page it changed, whole), on PostgreSQL in bytes (the server's whole
    log, so the fewest of three runs). A commit costs more the more it writes: beside the bound,
    it shows how much of the floor's cost is the data model's."""
    if postgres:
        written = []
        for _ in range(3):
            before = _value(conn, "SELECT pg_current_wal_insert_lsn()")
            run()
            after = _value(conn, "SELECT pg_current_wal_insert_lsn()")
            written.append(int(_value(conn, "SELECT pg_wal_lsn_diff(%s, %s)", (after, before))))
        return f"log per call {min(written) / scenario.CALLS:,.0f} bytes"
    page = int(_value(conn, "PRAGMA page_size"))
    # The log emptied first, and no checkpoint between: every page the run wrote is counted.
    automatic = int(_value(conn, "PRAGMA wal_autocheckpoint"))
    _value(conn, "PRAGMA wal_autocheckpoint=0")
    try:
        _value(conn, "PRAGMA wal_checkpoint(TRUNCATE)")
        run()
        pages = int(_row(conn, "PRAGMA wal_checkpoint(PASSIVE)")[1])  # (busy, log, copied)
    finally:
        _value(conn, f"PRAGMA wal_autocheckpoint={automatic}")
    return f"log per call {pages / scenario.CALLS:.1f} pages of {page // 1024} KB"


class Plain:
    """The agent loop with no durability."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.answer = ""

    def run(self) -> None:
        self.answer = scenario.plain_loop(uuid.uuid4().hex)

    def check(self) -> dict[str, Any]:
        assert self.answer == scenario.ANSWER, self.answer
        return {"records_per_run": 0}

    def close(self) -> None:
        pass


class _Bound:
    """The same loop with one bare autocommitted INSERT before and one after each call."""

    conn: Any
    insert: str

    def __init__(self) -> None:
        self.run_id = ""
        self.answer = ""

    def _intent(self, key: str) -> None:
        self.conn.execute(self.insert, (self.run_id, key, "intent"))

    def _outcome(self, key: str) -> None:
        self.conn.execute(self.insert, (self.run_id, key, "outcome"))

    def run(self) -> None:
        self.run_id = uuid.uuid4().hex
        self.answer = scenario.plain_loop(self.run_id, self._intent, self._outcome)

    def _records(self, param: str) -> int:
        query = f"SELECT count(*) FROM bench_record WHERE run_id = {param}"
        return int(_value(self.conn, query, (self.run_id,)))

    def close(self) -> None:
        self.conn.close()


class BoundSqlite(_Bound):
    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__()
        # isolation_level=None: the sqlite3 module's autocommit, so each INSERT commits alone.
        self.conn = sqlite3.connect(options["path"], isolation_level=None)
        for pragma in SQLITE_PRAGMAS:
            self.conn.execute(pragma)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_record (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "run_id TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL)"
        )
        self.insert = "INSERT INTO bench_record (run_id, key, kind) VALUES (?, ?, ?)"

    def check(self) -> dict[str, Any]:
        assert self.answer == scenario.ANSWER
        records = self._records("?")
        assert records == 2 * scenario.CALLS, records
        return {
            "records_per_run": records,
            "settings": _sqlite_settings(self.conn),
            "log": log_per_call(self.conn, self.run, postgres=False),
        }


class BoundPostgres(_Bound):
    def __init__(self, options: dict[str, Any]) -> None:
        import psycopg

        super().__init__()
        self.conn = psycopg.connect(options["url"], autocommit=True)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_record (id bigserial PRIMARY KEY, "
            "run_id text NOT NULL, key text NOT NULL, kind text NOT NULL)"
        )
        self.insert = "INSERT INTO bench_record (run_id, key, kind) VALUES (%s, %s, %s)"

    def check(self) -> dict[str, Any]:
        assert self.answer == scenario.ANSWER
        records = self._records("%s")
        assert records == 2 * scenario.CALLS, records
        return {
            "records_per_run": records,
            "settings": _postgres_settings(self.conn),
            "log": log_per_call(self.conn, self.run, postgres=True),
        }


class Records:
    """The floor of our data model: the plain loop writing exactly the records our runtime
    writes — the store's own statements (fence + operation + event per record, each outcome
    held and carried by the next intent: one commit per call), on their own DB-API connection
    with the same settings, and the very values a run of the runtime wrote for each call (a
    model request's are six times a tool call's) — and nothing else: no Django, no engine.

    What separates it from the bound is the data model (three rows and their indexes per
    record, two records per commit); what separates our runtime from it is our Python.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        import datetime as dt

        from django.core.management import call_command
        from django.db import connection

        from runtime import register, store, submit

        call_command("migrate", verbosity=0, interactive=False)
        register([scenario.bench_agent], actor="bench")
        self.written = _written_by_a_run()
        run = store.claim(submit(scenario.bench_agent.name, "floor", actor="bench").pk, "floor")
        assert run is not None
        self.postgres = connection.vendor == "postgresql"
        self.statements = store.record_statements()
        if self.postgres:
            import psycopg
            from psycopg.types.json import Jsonb

            self.conn: Any = psycopg.connect(options["url"], autocommit=True)
            run_id: Any = run.pk
            self.json: Any = Jsonb
            self.now: Any = dt.datetime.now(dt.UTC)
        else:
            import json

            self.conn = sqlite3.connect(options["path"], isolation_level=None)
            for pragma in SQLITE_PRAGMAS:
                self.conn.execute(pragma)
            run_id = run.pk.hex
            self.json = json.dumps
            self.now = str(dt.datetime.now(dt.UTC).replace(tzinfo=None))
        connection.close()
        self.hold = {
            "run": run_id,
            "fence": run.fence,
            "held": "running",
            "now": self.now,
            "pausable": True,  # an intent's fence is also the pause point
        }
        self.ops: dict[str, int] = {}
        self.held: dict[str, Any] = {}
        self.prefix = ""
        self.answer = ""

    def _intent(self, key: str) -> None:
        written = self.written[key]
        params = {
            **self.hold,
            **self.held,
            "key": self.prefix + key,
            "kind": written["kind"],
            "name": written["name"],
            "policy": written["policy"],
            "status": "started",
            "input": self.json(written["input"]),
            "input_hash": written["input_hash"],
            "result": None,
            "is_error": False,
            "outcome_at": None,
            "event": "intent",
            "data": self.json(written["intent"]),
        }
        # The previous call's outcome, held, is carried by this intent: one commit for both.
        carried = bool(self.held)
        self.held = {}
        if self.postgres:
            name = "new+carried" if carried else "new"
            row = self.conn.execute(self.statements[name], params, prepare=True).fetchone()
            self.ops[key] = row[1]
        else:
            self.ops[key] = self._sqlite("new", params, carried=carried)

    def _outcome(self, key: str) -> None:
        written = self.written[key]
        usage = written["usage"]
        self.held = {
            "p_op": self.ops.pop(key),
            "p_status": written["status"],
            "p_result": self.json(written["result"]),
            "p_is_error": written["is_error"],
            "p_error": written["error"],
            "p_usage": None if usage is None else self.json(usage),
            "p_key": self.prefix + key,
            "p_event": "outcome",
            "p_data": self.json(written["outcome"]),
            "p_now": self.now,
        }

    def _settle(self) -> None:
        """The last outcome, which no intent follows, commits alone (the runtime's is carried
        by the run's completion, which this floor does not write)."""
        params = {**self.hold, **{name[2:]: value for name, value in self.held.items()}}
        self.held = {}
        if self.postgres:
            with self.conn.transaction():
                self.conn.execute(self.statements["outcome"], params, prepare=True).fetchone()
        else:
            self._sqlite("outcome", params, carried=False)

    def _sqlite(self, name: str, params: dict[str, Any], *, carried: bool) -> int:
        cursor = self.conn.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        assert cursor.execute(self.statements["fence"], params).fetchone() is not None
        if carried:
            cursor.execute(self.statements["carried_outcome"], params)
        operation_id = cursor.execute(self.statements[name], params).lastrowid
        cursor.execute(self.statements["carried_events" if carried else "event"], params)
        self.conn.commit()
        return int(operation_id)

    def run(self) -> None:
        self.prefix = uuid.uuid4().hex[:8] + "/"
        self.answer = scenario.plain_loop(self.prefix, self._intent, self._outcome)
        self._settle()

    def check(self) -> dict[str, Any]:
        assert self.answer == scenario.ANSWER
        assert not self.ops
        settings = _postgres_settings(self.conn) if self.postgres else _sqlite_settings(self.conn)
        return {
            "records_per_run": 2 * scenario.CALLS,
            "rows_per_run": "per run 31 operations (each written twice), 62 events, 32 commits",
            "settings": settings,
            "log": log_per_call(self.conn, self.run, postgres=self.postgres),
        }

    def close(self) -> None:
        self.conn.close()


def _written_by_a_run() -> dict[str, dict[str, Any]]:
    """What one run of the runtime wrote for each call, by operation key (the plain loop's
    keys): its operation's values and its intent's and outcome's event data."""
    from runtime import advance, submit
    from runtime.models import Event, EventKind, Operation

    run = submit(scenario.bench_agent.name, scenario.MESSAGE, actor="bench")
    advance(run.pk)
    columns = "key kind name policy status input input_hash result is_error error usage"
    operations = Operation.objects.filter(run_id=run.pk).values(*columns.split())
    written = {op["key"]: op for op in operations}
    for event in Event.objects.filter(
        run_id=run.pk, kind__in=[EventKind.INTENT, EventKind.OUTCOME]
    ).values("kind", "operation_key", "data"):
        written[event["operation_key"]][event["kind"]] = event["data"]
    assert len(written) == scenario.CALLS, len(written)
    assert all({"intent", "outcome"} <= set(op) for op in written.values()), written
    return written


class AgentOps:
    """Our runtime, configured by the worker's environment (AGENTOPS_SQLITE_PATH or
    DATABASE_URL): submit a run, then advance it the way a worker's task does."""

    def __init__(self, options: dict[str, Any]) -> None:
        from django.core.management import call_command

        from runtime import register

        call_command("migrate", verbosity=0, interactive=False)
        register([scenario.bench_agent], actor="bench")
        self.run_id: Any = None

    def run(self) -> None:
        from runtime import advance, submit

        run = submit(scenario.bench_agent.name, scenario.MESSAGE, actor="bench")
        advance(run.pk)
        self.run_id = run.pk

    def check(self) -> dict[str, Any]:
        from django.db import connection

        from runtime.models import Event, Operation, Run

        run = Run.objects.get(pk=self.run_id)
        assert (run.status, run.output) == ("completed", scenario.ANSWER), (run.status, run.error)
        operations = Operation.objects.filter(run_id=run.pk).count()
        events = Event.objects.filter(run_id=run.pk).count()
        assert operations == scenario.CALLS, operations
        postgres = connection.vendor == "postgresql"
        with connection.cursor() as cursor:
            settings = _postgres_settings(cursor) if postgres else _sqlite_settings(cursor)
            log = log_per_call(cursor, self.run, postgres=postgres)
        return {
            "records_per_run": 2 * operations,
            "rows_per_run": (
                f"per run {operations} operations (each written twice), {events} events; "
                "each outcome commits with the next intent (bench.throughput --count counts)"
            ),
            "settings": settings,
            "log": log,
        }

    def breakdown(self, runs: int) -> list[list[Any]]:
        """Where a run's time goes: wall time of the runtime's parts, per run (bench.profile)."""
        import time
        from collections import Counter, defaultdict

        import runtime
        from runtime import engine, registry, store

        spent: defaultdict[str, float] = defaultdict(float)
        calls: Counter[str] = Counter()
        parts = [
            (runtime, "submit", "control.submit (lead)"),
            (runtime, "advance", "engine.advance, all of it"),
            (store, "claim", "store.claim"),
            (store, "write_intent", "store.write_intent"),
            (store, "write_outcome", "store.write_outcome"),
            (store, "transition", "store.transition (finish)"),
            (registry, "version_problem", "registry.version_problem (lead)"),
            (engine, "session_history", "transcript.session_history (lead)"),
            (engine._Turn, "__init__", "engine _Turn() load ops+interactions (lead)"),
            (engine._Heartbeat, "__enter__", "engine heartbeat start (lead)"),
            (engine._Heartbeat, "__exit__", "engine heartbeat stop (lead)"),
        ]
        originals = [(owner, name, getattr(owner, name)) for owner, name, _ in parts]

        def timed(function: Any, label: str) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return function(*args, **kwargs)
                finally:
                    spent[label] += time.perf_counter() - started
                    calls[label] += 1

            return wrapper

        for (owner, name, label), (_, _, function) in zip(parts, originals, strict=True):
            setattr(owner, name, timed(function, label))
        try:
            started = time.perf_counter()
            for _ in range(runs):
                self.run()
            total = time.perf_counter() - started
        finally:
            for owner, name, function in originals:
                setattr(owner, name, function)
        inside = sum(v for k, v in spent.items() if k not in (parts[0][2], parts[1][2]))
        rows = [[label, spent[label] * 1000 / runs, calls[label] / runs] for _, _, label in parts]
        rows.append(
            [
                "engine Python (advance minus the parts above)",
                (spent[parts[1][2]] - inside) * 1000 / runs,
                1.0,
            ]
        )
        rows.append(["the whole run", total * 1000 / runs, 1.0])
        return rows

    def cpu(self, runs: int, batches: int = 9) -> list[list[Any]]:
        """The worker's CPU per run and per call, with no profiler (bench.profile --cpu): the
        fastest of `batches` batches of `runs` runs. On PostgreSQL the database works in its
        own processes, so this is the runtime's Python with Django's and the driver's: what a
        call costs the worker, the measure of "the engine's own Python". On SQLite it includes
        the database's C code too."""
        import time

        from bench import scenario

        cpu, wall = [], []
        for _ in range(batches):
            started, ticked = time.process_time(), time.perf_counter()
            for _ in range(runs):
                self.run()
            cpu.append((time.process_time() - started) / runs)
            wall.append((time.perf_counter() - ticked) / runs)
        best = min(cpu)
        return [
            ["CPU per run, ms (fastest batch)", best * 1000],
            ["CPU per call, µs", best * 1e6 / scenario.CALLS],
            ["wall time per run, ms (median batch)", sorted(wall)[len(wall) // 2] * 1000],
        ]

    def own_python(self, runs: int) -> list[list[Any]]:
        """Where a run's CPU goes under cProfile, by whose code it is (bench.profile --own):
        the functions' own time (tottime), per call of the scenario. The runtime's row is the
        engine's own Python: the database's wait is in the driver's rows, not in it."""
        import cProfile
        import os
        import pstats
        from collections import defaultdict

        from bench import scenario

        groups = (
            ("runtime", f"{os.sep}runtime{os.sep}"),
            ("agentops, bench", f"{os.sep}agentops{os.sep}"),
            ("django", f"{os.sep}django{os.sep}"),
            ("pydantic", f"{os.sep}pydantic"),
            ("psycopg", f"{os.sep}psycopg"),
        )
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(runs):
            self.run()
        profiler.disable()
        spent: defaultdict[str, float] = defaultdict(float)
        calls: defaultdict[str, int] = defaultdict(int)
        stats: Any = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        for (path, _, function), (_, count, own, _, _) in stats.items():
            if path == "~":  # a builtin: the sqlite3 module's are the database's work
                name = "sqlite3 (C)" if "sqlite3" in function else "builtins (C)"
            else:
                name = next((group for group, part in groups if part in path), "other Python")
            spent[name] += own
            calls[name] += count
        per_call = runs * scenario.CALLS
        return [
            [name, spent[name] * 1e6 / per_call, calls[name] / per_call]
            for name in sorted(spent, key=spent.__getitem__, reverse=True)
        ]

    def profile(self, runs: int, interval: float = 0.0001) -> str:
        """`runs` runs under pyinstrument; its report, as text (see bench.profile)."""
        from pyinstrument import Profiler

        profiler = Profiler(interval=interval)
        with profiler:
            for _ in range(runs):
                self.run()
        return str(profiler.output_text(unicode=True, color=False, show_all=False))

    def close(self) -> None:
        from django.db import connection

        connection.close()


class Dbos:
    """DBOS Transact: the loop is a workflow, each model request and tool call a step."""

    def __init__(self, options: dict[str, Any]) -> None:
        from dbos import DBOS

        self.url = options["url"]
        if self.url.startswith("sqlite"):
            # WAL, as ours; the mode is stored in the file, so DBOS's connections use it too.
            path = self.url.removeprefix("sqlite:///")
            with sqlite3.connect(path) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
        self.instance = DBOS(
            config={"name": "agentops-bench", "system_database_url": self.url, "log_level": "ERROR"}
        )

        @DBOS.step()
        def model(messages: list[dict[str, Any]], operation_id: str) -> dict[str, Any]:
            return scenario.model_step(messages, operation_id)

        @DBOS.step()
        def call_tool(use: dict[str, Any], operation_id: str) -> dict[str, Any]:
            return scenario.tool_step(use, operation_id)

        @DBOS.workflow()
        def agent(message: str) -> str:
            run_id = DBOS.workflow_id
            messages: list[dict[str, Any]] = [{"role": "user", "content": message}]
            for step in range(1, scenario.MODEL_CALLS + 1):
                content = model(messages, f"{run_id}:step-{step}/model")["content"]
                messages.append({"role": "assistant", "content": content})
                uses = [block for block in content if block["type"] == "tool_use"]
                if not uses:
                    return "".join(b["text"] for b in content if b["type"] == "text")
                results = [call_tool(use, f"{run_id}:step-{step}/tool/{use['id']}") for use in uses]
                messages.append({"role": "user", "content": results})
            raise AssertionError("the script always ends with a final answer")

        self.dbos = DBOS
        self.agent = agent
        DBOS.launch()
        self.answer = ""
        self.workflow_id = ""

    def run(self) -> None:
        from dbos import SetWorkflowID

        self.workflow_id = str(uuid.uuid4())
        with SetWorkflowID(self.workflow_id):
            self.answer = self.agent(scenario.MESSAGE)

    def check(self) -> dict[str, Any]:
        assert self.answer == scenario.ANSWER
        steps = self.dbos.list_workflow_steps(self.workflow_id)
        assert len(steps) == scenario.CALLS, len(steps)
        engine = self.instance._sys_db.engine  # what DBOS itself writes through
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            if self.url.startswith("sqlite"):
                settings = _sqlite_settings(raw)
            else:
                assert raw is not None  # a checked-out connection has its DB-API connection
                with closing(raw.cursor()) as cursor:
                    settings = _postgres_settings(cursor)
        return {
            "records_per_run": len(steps) + 2,
            "rows_per_run": f"per run {len(steps)} step outputs, 1 workflow status row",
            "settings": settings,
            "version": _version("dbos"),
        }

    def close(self) -> None:
        self.dbos.destroy()


class _State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


class _ToolTask(TypedDict):
    use: dict[str, Any]
    run_id: str
    step: int


class LangGraph:
    """LangGraph: a model node and one `Send` task per tool call, checkpointed per super-step
    with durability="sync" (each checkpoint is written before the next step starts)."""

    def __init__(self, options: dict[str, Any]) -> None:
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send

        self.storage = options["storage"]
        if self.storage == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.conn: Any = sqlite3.connect(options["path"], check_same_thread=False)
            saver: Any = SqliteSaver(self.conn)
            saver.setup()  # sets journal_mode=WAL
            self.conn.execute("PRAGMA synchronous=FULL")
        else:
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row

            # As PostgresSaver.from_conn_string connects.
            self.conn = psycopg.connect(
                options["url"], autocommit=True, prepare_threshold=0, row_factory=dict_row
            )
            saver = PostgresSaver(self.conn)
            saver.setup()

        def model(state: _State, config: RunnableConfig) -> dict[str, Any]:
            messages = state["messages"]
            step = 1 + sum(1 for m in messages if m["role"] == "assistant")
            run_id = config["configurable"]["thread_id"]
            content = scenario.model_step(messages, f"{run_id}:step-{step}/model")["content"]
            return {"messages": [{"role": "assistant", "content": content}]}

        def route(state: _State, config: RunnableConfig) -> Any:
            last = state["messages"][-1]
            step = sum(1 for m in state["messages"] if m["role"] == "assistant")
            run_id = config["configurable"]["thread_id"]
            uses = [block for block in last["content"] if block["type"] == "tool_use"]
            if not uses:
                return END
            return [Send("tool", {"use": use, "run_id": run_id, "step": step}) for use in uses]

        def tool(state: _ToolTask) -> dict[str, Any]:  # `state`, as LangGraph calls a node
            use = state["use"]
            key = f"step-{state['step']}/tool/{use['id']}"
            result = scenario.tool_step(use, f"{state['run_id']}:{key}")
            return {"messages": [{"role": "user", "content": [result]}]}

        builder = StateGraph(_State)
        builder.add_node("model", model)
        # A Send's task, not the graph's state: its own input schema.
        builder.add_node("tool", tool, input_schema=_ToolTask)
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", route, ["tool", END])
        builder.add_edge("tool", "model")
        self.graph = builder.compile(checkpointer=saver)
        self.thread_id = ""
        self.answer = ""

    def run(self) -> None:
        self.thread_id = str(uuid.uuid4())
        final = self.graph.invoke(
            {"messages": [{"role": "user", "content": scenario.MESSAGE}]},
            {"configurable": {"thread_id": self.thread_id}},
            durability="sync",
        )
        content = final["messages"][-1]["content"]
        self.answer = "".join(b["text"] for b in content if b["type"] == "text")

    def check(self) -> dict[str, Any]:
        assert self.answer == scenario.ANSWER
        sqlite = self.storage == "sqlite"
        param = "?" if sqlite else "%s"
        checkpoints, writes = (
            int(
                _value(
                    self.conn,
                    f"SELECT count(*) FROM {table} WHERE thread_id = {param}",
                    (self.thread_id,),
                )
            )
            for table in ("checkpoints", "writes" if sqlite else "checkpoint_writes")
        )
        settings = _sqlite_settings(self.conn) if sqlite else _postgres_settings(self.conn)
        return {
            "records_per_run": int(checkpoints),
            "rows_per_run": f"per run {checkpoints} checkpoints, {writes} task writes",
            "settings": settings,
            "version": _version("langgraph"),
        }

    def close(self) -> None:
        self.conn.close()

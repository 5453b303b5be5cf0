"""A throwaway PostgreSQL server the test starts itself, so that it can restart the whole server.

The machine's shared PostgreSQL is never touched: `initdb` makes a cluster in a temporary folder,
`pg_ctl` starts it on a free loopback port (trust authentication, TCP on 127.0.0.1 only, its Unix
socket in the same folder) and crashes it with an immediate stop: no checkpoint, every backend
killed, and WAL replay when it starts again. initdb refuses to run as root, so as root the
binaries run as the `postgres` user, in a folder that user owns.

`python -m tests.reliability.own_postgres COMMAND...` runs a command against a server of its own
(`make soak` runs its chaos soak so, test process and all, so that the soak can crash the server
it runs on): DATABASE_URL points at the server, OWN_POSTGRES_ENV names its folder and port for
`OwnPostgres.attached`, and the server is removed when the command ends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from tests.support.processes import free_port, wait_until

# Set by the command line below for the command it runs: {"folder": ..., "port": ...}.
OWN_POSTGRES_ENV = "AGENTOPS_OWN_POSTGRES"
# What the server logs when it starts after a crash: WAL replay follows.
CRASH_RECOVERY = "database system was not properly shut down; automatic recovery in progress"


def postgres_bindir() -> Path | None:
    """The folder of initdb and pg_ctl: `pg_config --bindir`, else Debian's newest; or None."""
    candidates: list[Path] = []
    if pg_config := shutil.which("pg_config"):
        found = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=False, timeout=10
        )
        if found.returncode == 0:
            candidates.append(Path(found.stdout.strip()))
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = [path for path in debian.iterdir() if path.name.isdigit()]
        candidates += [path / "bin" for path in sorted(versions, key=lambda p: -int(p.name))]
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    return None


def missing() -> str | None:
    """Why this machine cannot run an own server, or None when it can."""
    if postgres_bindir() is None:
        return "initdb and pg_ctl not found (pg_config --bindir, /usr/lib/postgresql/*/bin)"
    if os.geteuid() == 0 and (shutil.which("runuser") is None or not _has_postgres_user()):
        return "running as root needs runuser and a `postgres` user: initdb refuses root"
    return None


def _has_postgres_user() -> bool:
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return True


class OwnPostgres:
    """One PostgreSQL cluster in a temporary folder, on a free loopback port."""

    def __init__(self, folder: Path | None = None, port: int | None = None) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise RuntimeError(missing())
        self.bindir = bindir
        self.port = port or free_port()
        self.folder = folder or Path(tempfile.mkdtemp(prefix="agentops-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        # As root, everything runs as `postgres`, in a folder it owns.
        self.as_owner: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.folder, user="postgres", group="postgres")
            self.as_owner = ["runuser", "-u", "postgres", "--"]
        self.restarts = 0

    @classmethod
    def attached(cls) -> OwnPostgres | None:
        """The server this process runs on, when the command line below started it."""
        described = os.environ.get(OWN_POSTGRES_ENV)
        if not described:
            return None
        where = json.loads(described)
        return cls(Path(where["folder"]), int(where["port"]))

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        command = [*self.as_owner, str(self.bindir / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                f"\n{self.server_log()[-3000:]}"
            )

    def initdb(self) -> None:
        self._run(
            "initdb",
            *("-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8"),
            *("--locale=C", "--no-sync", "--no-instructions"),
        )
        # fsync off: an immediate stop kills the server's processes, not the machine, so what
        # they wrote is in the page cache and the WAL replay on start sees all of it; syncing
        # would only slow the test on a shared disk.
        settings = (
            f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{self.folder}'\nfsync = off\n"
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(settings)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        wait_until(self._accepts, timeout=30, what=f"PostgreSQL on port {self.port}")

    def crash(self) -> None:
        """An immediate stop: every backend is killed; nothing is checkpointed."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def restart(self, down_seconds: float) -> None:
        """Crash the server, leave it down `down_seconds`, start it (WAL replay)."""
        self.crash()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def server_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def crash_recoveries(self) -> int:
        """Starts that found the server crashed (each replayed the WAL), from its log."""
        return self.server_log().count(CRASH_RECOVERY)

    def destroy(self) -> None:
        """Stop the server if it runs, and remove its folder."""
        if (self.data / "postmaster.pid").exists():
            self.crash()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _accepts(self) -> bool:
        try:
            with psycopg.connect(self.url("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False


def main(command: list[str]) -> int:
    """Run `command` on a server of its own, with an empty `agentops` database; its exit code."""
    if not command:
        print("usage: python -m tests.reliability.own_postgres COMMAND...", file=sys.stderr)
        return 2
    reason = missing()
    if reason is not None:
        print(f"cannot start a PostgreSQL server of its own: {reason}", file=sys.stderr)
        return 1
    own = OwnPostgres()
    try:
        own.initdb()
        own.start()
        own.create_database("agentops")
        env = dict(os.environ, DATABASE_URL=own.url("agentops"))
        env[OWN_POSTGRES_ENV] = json.dumps({"folder": str(own.folder), "port": own.port})
        print(f"== PostgreSQL of its own on 127.0.0.1:{own.port} ==", flush=True)
        return subprocess.run(command, env=env, check=False).returncode
    finally:
        own.destroy()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The seed, as `make run` does it: a fresh SQLite file, migrate, seed — twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_it_seeds_every_state_an_operator_meets_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "ANTHROPIC_API_KEY"}}
    env |= {
        "AGENTOPS_SQLITE_PATH": str(tmp_path / "demo.sqlite3"),
        "AGENTOPS_OPERATOR_PASSWORD": "tour-password",
        "AGENTOPS_DISPATCH": "",
    }
    manage("migrate", "--noinput", "-v0", env=env)
    first = manage("seed_demo", env=env)
    assert "login: operator / tour-password" in first
    second = manage("seed_demo", env=env)
    assert "demo data already present" in second
    states = json.loads(
        manage(
            "shell",
            "-c",
            (
                "import json; from agentops.models import Run; from demo.models import Refund;"
                "print(json.dumps({'runs': sorted([r.status, r.attention_reason, r.pk == r.pk]"
                " for r in Run.objects.all()), 'refunds': Refund.objects.count()}))"
            ),
            env=env,
        )
        .strip()
        .splitlines()[-1]
    )
    statuses = sorted({status for status, _, _ in states["runs"]})
    assert statuses == ["completed", "failed", "needs_attention", "retry_wait", "waiting"]
    reasons = sorted(reason for _, reason, _ in states["runs"] if reason)
    assert reasons == ["fingerprint_mismatch", "uncertain_operation"]
    # The crashed worker's refund happened exactly once; the completed run made the other.
    assert states["refunds"] == 2

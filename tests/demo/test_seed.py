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
    manage("seed_demo", env=env)
    second = manage("seed_demo", env=env)
    assert "demo data already present" in second
    states = json.loads(
        manage(
            "shell",
            "-c",
            (
                "import json; from runtime.models import ApprovalRule, Run;"
                " from demo.models import Refund;"
                "print(json.dumps({'runs': sorted([r.status, r.attention_reason, r.pk == r.pk]"
                " for r in Run.objects.all()), 'refunds': Refund.objects.count(),"
                " 'rules': list(ApprovalRule.objects.values_list('name', flat=True))}))"
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
    # The approval policy is data the seed writes like an admin would.
    assert states["rules"] == ["large refunds"]


def test_the_demo_logins_are_an_operator_and_an_agent_admin_kept_across_restarts(tmp_path):
    """A second `make run` keeps each password and its hash, so nobody is logged out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTOPS_", "DJANGO_"))}
    env = {k: v for k, v in env.items() if k not in {"DATABASE_URL", "ANTHROPIC_API_KEY"}}
    env |= {"AGENTOPS_VAR_DIR": str(tmp_path / "var"), "AGENTOPS_DISPATCH": ""}
    show = (
        "import json; from django.contrib.auth.models import User;"
        "print(json.dumps({u.username: [u.password, u.is_staff, u.is_superuser,"
        " sorted(u.groups.values_list('name', flat=True)),"
        " sorted(u.user_permissions.values_list('codename', flat=True))]"
        " for u in User.objects.order_by('username')}))"
    )
    manage("migrate", "--noinput", "-v0", env=env)
    manage("seed_demo", env=env)
    first = json.loads(manage("shell", "-c", show, env=env).strip().splitlines()[-1])
    manage("seed_demo", env=env)
    again = json.loads(manage("shell", "-c", show, env=env).strip().splitlines()[-1])
    assert again == first
    _, staff, superuser, groups, permissions = first["operator"]
    assert [staff, superuser, groups, permissions] == [False, False, ["operators"], []]
    _, staff, superuser, groups, permissions = first["agent-admin"]
    assert [staff, superuser, groups] == [True, False, []]
    assert permissions == ["manage_agentversion", "view_agentversion", "view_run"]
    kept = (tmp_path / "var" / "operator-password").read_text().strip()
    check = (
        "from django.contrib.auth.models import User;"
        f"print(User.objects.get(username='operator').check_password({kept!r}))"
    )
    assert manage("shell", "-c", check, env=env).strip().splitlines()[-1] == "True"
    assert (tmp_path / "var" / "operator-password").stat().st_mode & 0o077 == 0
    assert (tmp_path / "var" / "secret-key").stat().st_mode & 0o077 == 0

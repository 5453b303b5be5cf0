"""The README tour works as written, on a fresh seed like `make run` makes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_tour_works_step_by_step(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTOPS_", "DJANGO_", "CELERY_"))
        and k not in {"DATABASE_URL", "REDIS_URL", "ANTHROPIC_API_KEY"}
    }
    env |= {
        "AGENTOPS_VAR_DIR": str(tmp_path / "var"),
        "AGENTOPS_DISPATCH": "",
        "AGENTOPS_OPERATOR_PASSWORD": "tour-password",
        "AGENTOPS_AGENT_ADMIN_PASSWORD": "tour-admin-password",
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "PYTHONPATH": str(ROOT),
    }
    for args in (
        ["manage.py", "migrate", "--noinput", "-v0"],
        ["manage.py", "seed_demo"],
        ["tests/demo/tour.py"],
    ):
        done = subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["approval_page"] is True
    assert seen["approved"] == ["completed", 1, True]
    assert seen["timeline_names_approver"] is True
    assert seen["answered"] == [
        "waiting",
        {
            "order_number": "1003",
            "amount_cents": 2000,
            "reason": "I want my money back, the package never arrived.",
        },
    ]
    assert seen["reconcile_page"] == [True, True]
    assert seen["bad_result"] == [400, "needs_attention"]
    assert seen["reconciled"] == ["completed", 1]
    # The reader finds the countdown still running, and "Retry now" is what moves it.
    assert seen["countdown_left_minutes"] >= 30
    assert seen["timer_not_due"] is True
    assert seen["retry_now_1"] == ["retry_wait", True]
    assert seen["retry_now_2"] == ["waiting", "refund_order"]
    assert seen["board"] == [True, True]
    assert seen["unregister_refused"] == [True, True]
    assert seen["restored"] == ["completed", "1", 1]
    assert seen["unregistered_after"] is True

"""docs/integrations.md and the Grafana dashboard: the receiver sample verifies a real delivery,
and every metric the dashboard queries is one that /metrics exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentops.integrations import metrics, pump, webhooks

DOCS = Path(__file__).resolve().parents[2] / "docs"


def python_samples() -> list[str]:
    text = (DOCS / "integrations.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_receiver_sample_accepts_a_delivery_once_and_refuses_a_forgery(
    receiver, approval_run, monkeypatch
):
    _subscription, secret = webhooks.create_subscription(
        name="docs", url=receiver.url, event_kinds=["submitted"], actor="admin"
    )
    approval_run()
    pump.drain()
    monkeypatch.setenv("AGENTOPS_WEBHOOK_SECRET", secret)
    (sample,) = python_samples()
    namespace: dict = {}
    exec(compile(sample, "integrations.md", "exec"), namespace)
    got = receiver.received[0]
    assert namespace["receive"](got.body, got.headers)["type"] == "run.submitted"
    assert namespace["receive"](got.body, got.headers) is None
    with pytest.raises(Exception, match="signature"):
        namespace["receive"](got.body.replace(b"submitted", b"completed"), got.headers)


def test_every_dashboard_metric_is_exported(db):
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"agentops_[a-z_]+", target["expr"])
    }
    exported = set()
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        exported.add(family.name)
        exported.update(sample.name for sample in family.samples)
        if family.type == "counter":
            exported.add(family.name + "_total")
        if family.type == "histogram":
            exported.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
    assert queried
    assert queried <= exported, queried - exported

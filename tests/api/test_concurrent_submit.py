"""Identical submits at the same moment start exactly one run (PostgreSQL, real threads)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from agentops.api.models import IdempotencyKey
from runtime.models import Run
from tests.api.conftest import Api

THREADS = 8


def race(api: Api, bodies: list[dict[str, Any]]) -> list[Any]:
    barrier = threading.Barrier(len(bodies))
    answers: list[Any] = [None] * len(bodies)

    def send(i: int) -> None:
        try:
            barrier.wait()
            answers[i] = api.post("/runs", bodies[i], **{"Idempotency-Key": "same-key"})
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_requests_start_exactly_one_run(world: Any, api: Api) -> None:
    answers = race(api, [{"agent": "chatty", "message": "refund order 7"}] * THREADS)
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * (THREADS - 1) + [201], [a.json() for a in answers]
    assert len({answer.json()["id"] for answer in answers}) == 1
    assert Run.objects.count() == 1
    assert IdempotencyKey.objects.get().run_id == Run.objects.get().pk


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_and_two_bodies(world: Any, api: Api) -> None:
    bodies = [{"agent": "chatty", "message": f"refund order {i % 2}"} for i in range(THREADS)]
    answers = race(api, bodies)
    assert Run.objects.count() == 1
    run = Run.objects.get()
    for body, answer in zip(bodies, answers, strict=True):
        if body["message"] == run.input:
            assert answer.status_code in (200, 201)
            assert answer.json()["id"] == str(run.pk)
        else:
            assert answer.status_code == 409
            assert answer.json()["error"]["code"] == "idempotency_conflict"

"""The OpenAPI schema: served, checked in, and the API fuzzed through it.

The fuzzing sends what the schema allows (and, per operation, what it does not) to every
endpoint with a real token: no answer may be a 500, every answer must match the schema, every
error must carry a documented code, and a refused request changes nothing. Examples per
operation: AGENTOPS_API_FUZZ_EXAMPLES, else AGENTOPS_FUZZ_EXAMPLES (`make soak`), else 40.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agentops.api.errors import API_CODES, RUNTIME_CODES
from tests.api.conftest import Api
from tests.fuzz.conftest import TALLY
from tests.fuzz.test_forms import snapshot

CHECKED_IN = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
EXAMPLES = int(
    os.environ.get("AGENTOPS_API_FUZZ_EXAMPLES", os.environ.get("AGENTOPS_FUZZ_EXAMPLES", "40"))
)

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())


def test_the_served_schema_is_the_checked_in_one(client: Any) -> None:
    served = client.get("/api/v1/openapi.json").json()
    checked_in = json.loads(CHECKED_IN.read_text())
    assert served == checked_in, (
        "docs/openapi.json is out of date: run `python manage.py api_schema docs/openapi.json`"
    )


@schemathesis.check
def documented_error_code(ctx: Any, response: Any, case: Any) -> bool | None:
    if response.status_code < 400:
        return None
    try:
        code = json.loads(response.content)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        raise AssertionError(
            f"the error body is not the API's: {response.content[:200]!r}"
        ) from None
    if code not in API_CODES and code not in RUNTIME_CODES:
        raise AssertionError(f"undocumented error code {code!r}")
    return None


@pytest.fixture
def fuzz_token(world: Any, api: Api, keep_connections: None) -> str:
    # A waiting, a blocked and a failed run, so that real ids exist beside invented ones.
    for state in ("waiting", "blocked", "failed", "question"):
        world.run(state)
    assert api.token is not None
    return api.token


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_the_api_through_its_schema(case: Any, fuzz_token: str) -> None:
    before = snapshot()
    response = case.call_and_validate(
        headers={"Authorization": f"Bearer {fuzz_token}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            documented_error_code,
        ],
    )
    TALLY[f"endpoint API {case.method} {case.path}"] += 1
    if response.status_code >= 400:
        assert snapshot() == before, f"refused with {response.status_code}, yet it changed"
        TALLY["refused"] += 1
    elif snapshot() != before:
        TALLY["accepted"] += 1

"""Reconcile: the lookup, the verified result with evidence, and everything that must fail."""

from __future__ import annotations

import json

import pytest

from runtime import cancel, resolve
from runtime.models import Event, EventKind, Operation, OperationStatus, Run, RunStatus
from tests.console.conftest import EFFECTS, htmx

KEY = "step-1/tool/toolu_01_0"


def post(client, run: Run, result: str, evidence: str = "receipt seen in the ledger", **headers):
    data = {"operation_key": KEY, "result": result, "evidence": evidence}
    return client.post(f"/runs/{run.pk}/resolve/", data, **headers)


def still_blocked(run: Run) -> bool:
    run.refresh_from_db()
    op = Operation.objects.get(run=run, key=KEY)
    return (
        run.status == RunStatus.NEEDS_ATTENTION
        and run.blocked_operation == KEY
        and op.status == OperationStatus.STARTED
        and not Event.objects.filter(run=run, kind=EventKind.OPERATION_RESOLVED).exists()
    )


def test_it_shows_the_operation_id_intent_time_and_what_the_lookup_reports(world, as_user):
    run = world.run("blocked")
    receipt = EFFECTS.receipts[f"{run.pk}:{KEY}"]
    html = as_user("reconciler").get(f"/runs/{run.pk}/reconcile/").content.decode()
    assert f"{run.pk}:{KEY}" in html
    assert "Intent written" in html
    assert "What the external system reports for this operation id" in html
    assert receipt in html
    assert "Confirm what the external system reports" in html
    assert "Leave it blocked" in html
    # Confirming carries exactly what the lookup reported; nothing else is offered to type.
    assert 'name="result" value="{&quot;receipt_id&quot;: &quot;' + receipt + '&quot;}"' in html
    assert '<textarea id="result"' not in html


def test_it_confirms_what_the_external_system_reports(world, as_user):
    run = world.run("blocked")
    receipt = EFFECTS.receipts[f"{run.pk}:{KEY}"]
    response = post(as_user("reconciler"), run, json.dumps({"receipt_id": receipt}))
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/"
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    op = Operation.objects.get(run=run, key=KEY)
    assert op.status == OperationStatus.COMPLETED
    assert op.result == {"receipt_id": receipt}
    event = Event.objects.get(run=run, kind=EventKind.OPERATION_RESOLVED)
    assert event.actor == "reconciler"
    assert event.data["evidence"] == "receipt seen in the ledger"
    assert EFFECTS.total == 1  # nothing ran again


def test_it_resolves_in_place_with_htmx_and_shows_who_settled_it(world, as_user):
    run = world.run("blocked")
    response = post(as_user("reconciler"), run, '{"receipt_id": "rcpt-1"}', **htmx())
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<section id="reconcile"')
    assert "Reconciled charge with your evidence: the run continues." in html
    assert 'by <strong class="actor">reconciler</strong>' in html
    assert "Evidence: receipt seen in the ledger" in html


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_malformed_json(world, as_user, headers):
    run = world.run("blocked")
    response = post(as_user("reconciler"), run, '{"receipt_id": ', **headers)
    assert response.status_code == 400
    assert "the result is not valid JSON" in response.content.decode()
    assert still_blocked(run)


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_a_result_that_does_not_match_the_output_schema(world, as_user, headers):
    run = world.run("blocked")
    response = post(as_user("reconciler"), run, '{"receipt": 42}', **headers)
    assert response.status_code == 400
    html = response.content.decode()
    assert "the result does not match charge&#x27;s output schema" in html
    assert "receipt_id: Field required" in html
    assert still_blocked(run)


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_a_result_without_evidence(world, as_user, headers):
    run = world.run("blocked")
    response = post(as_user("reconciler"), run, '{"receipt_id": "rcpt-1"}', evidence=" ", **headers)
    assert response.status_code == 400
    assert "This field is required." in response.content.decode()
    assert still_blocked(run)


def test_it_refuses_nan_in_the_result(world, as_user):
    run = world.run("blocked")
    response = post(as_user("reconciler"), run, '{"receipt_id": NaN}')
    assert response.status_code == 400
    assert "NaN is not a JSON number" in response.content.decode()
    assert still_blocked(run)


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_an_operation_the_run_is_not_blocked_on(world, as_user, headers):
    run = world.run("blocked")
    data = {"operation_key": "step-9/tool/x", "result": '{"receipt_id": "r"}', "evidence": "e"}
    response = as_user("reconciler").post(f"/runs/{run.pk}/resolve/", data, **headers)
    assert response.status_code == 409
    assert "is not blocked on &#x27;step-9/tool/x&#x27;" in response.content.decode()
    assert still_blocked(run)


def test_it_tells_the_second_reconciler_who_settled_it(world, as_user):
    run = world.run("blocked")
    resolve(run.pk, KEY, {"receipt_id": "rcpt-1"}, evidence="checked by bob", actor="bob")
    response = post(as_user("reconciler"), run, '{"receipt_id": "rcpt-1"}', **htmx())
    assert response.status_code == 409
    html = response.content.decode()
    assert "was already resolved with a verified result by bob at" in html
    assert 'by <strong class="actor">bob</strong>' in html
    assert "Evidence: checked by bob" in html
    assert Event.objects.filter(run=run, kind=EventKind.OPERATION_RESOLVED).count() == 1


def test_it_refuses_to_resolve_a_cancelled_run(world, as_user):
    run = world.run("blocked")
    cancel(run.pk, actor="bob")
    response = post(as_user("reconciler"), run, '{"receipt_id": "rcpt-1"}')
    assert response.status_code == 409
    assert "cancelled, not blocked on an operation" in response.content.decode()
    assert Operation.objects.get(run=run, key=KEY).status == OperationStatus.STARTED


def test_it_answers_404_for_an_unknown_run(db, as_user):
    response = as_user("reconciler").post(
        "/runs/00000000-0000-0000-0000-000000000000/resolve/",
        {"operation_key": KEY, "result": "{}", "evidence": "e"},
    )
    assert response.status_code == 404


def test_it_asks_for_a_verified_result_when_the_tool_cannot_look_it_up(world, as_user):
    run = world.run("blocked_no_lookup")
    html = as_user("reconciler").get(f"/runs/{run.pk}/reconcile/").content.decode()
    assert "<code>transfer</code> cannot look its effect up" in html
    assert '<textarea id="result"' in html
    assert '<code>receipt_id</code> <span class="muted">string, required</span>' in html
    # The field starts empty: nothing is suggested as a result.
    assert 'spellcheck="false" class="mono" required></textarea>' in html


def test_it_offers_only_did_not_happen_when_the_external_system_has_no_record(world, as_user):
    run = world.run("blocked")
    EFFECTS.receipts.clear()  # the charge never reached the payments system
    html = as_user("reconciler").get(f"/runs/{run.pk}/reconcile/").content.decode()
    assert "The external system has no record of this operation id" in html
    assert 'name="result"' not in html  # nothing to confirm, nothing to make up
    assert html.count(f'action="/runs/{run.pk}/resolve/"') == 1
    assert 'name="outcome" value="not_run_again" required' in html
    assert 'name="outcome" value="not_run_tell_model"' in html
    assert '<textarea id="not-run-evidence" name="evidence"' in html


def test_it_offers_did_not_happen_beside_the_result_when_the_tool_cannot_look_it_up(world, as_user):
    run = world.run("blocked_no_lookup")
    html = as_user("reconciler").get(f"/runs/{run.pk}/reconcile/").content.decode()
    assert '<textarea id="result"' in html
    assert 'id="not-run-form"' in html


def test_it_never_offers_did_not_happen_when_the_external_system_reports_a_result(world, as_user):
    run = world.run("blocked")
    html = as_user("reconciler").get(f"/runs/{run.pk}/reconcile/").content.decode()
    assert 'name="outcome"' not in html


def not_run(client, run: Run, outcome: str, evidence: str = "no such charge in the ledger", **h):
    data = {"operation_key": KEY, "outcome": outcome, "evidence": evidence}
    return client.post(f"/runs/{run.pk}/resolve/", data, **h)


def test_r4_it_records_that_the_call_did_not_happen_to_run_it_again(world, as_user):
    run = world.run("blocked")
    EFFECTS.receipts.clear()
    response = not_run(as_user("reconciler"), run, "not_run_again")
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/"
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert Operation.objects.get(run=run, key=KEY).status == OperationStatus.NOT_RUN
    event = Event.objects.get(run=run, kind=EventKind.OPERATION_RESOLVED)
    assert (event.actor, event.data["outcome"]) == ("reconciler", "not_run_again")
    assert event.data["evidence"] == "no such charge in the ledger"


def test_it_tells_the_model_in_place_with_htmx_and_shows_the_decision(world, as_user):
    run = world.run("blocked_no_lookup")
    response = not_run(as_user("reconciler"), run, "not_run_tell_model", **htmx())
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<section id="reconcile"')
    assert "Recorded that transfer did not happen: the model is told so" in html
    assert "Recorded as not run, and the model told so," in html
    assert 'by <strong class="actor">reconciler</strong>' in html
    assert "Evidence: no such charge in the ledger" in html
    op = Operation.objects.get(run=run, key=KEY)
    assert (op.status, op.is_error, op.result["kind"]) == ("completed", True, "tool-not-run")


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_did_not_happen_without_evidence_and_keeps_the_choice(world, as_user, headers):
    run = world.run("blocked_no_lookup")
    response = not_run(as_user("reconciler"), run, "not_run_tell_model", evidence="  ", **headers)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'value="not_run_tell_model" checked' in html
    assert "This field is required." in html
    assert still_blocked(run)


def test_it_refuses_an_unknown_outcome(world, as_user):
    run = world.run("blocked_no_lookup")
    response = not_run(as_user("reconciler"), run, "it-was-fine")
    assert response.status_code == 400
    assert "Select a valid choice." in response.content.decode()
    assert still_blocked(run)


def test_r5_a_did_not_happen_after_a_resolve_names_who_resolved_it(world, as_user):
    run = world.run("blocked_no_lookup")
    resolve(run.pk, KEY, {"receipt_id": "r-9"}, evidence="found r-9", actor="bob")
    response = not_run(as_user("reconciler"), run, "not_run_again", **htmx())
    assert response.status_code == 409
    html = response.content.decode()
    assert "was already resolved with a verified result by bob at" in html
    assert Operation.objects.get(run=run, key=KEY).result == {"receipt_id": "r-9"}
    assert Event.objects.filter(run=run, kind=EventKind.OPERATION_RESOLVED).count() == 1


def test_it_shows_a_lookup_that_fails_and_lets_the_operator_verify_elsewhere(
    world, as_user, monkeypatch
):
    run = world.run("blocked")

    def broken(self, operation_id):
        raise ConnectionError("payments API unreachable")

    monkeypatch.setattr("runtime.agents.Tool.look_up", broken)
    html = as_user("reconciler").get(f"/runs/{run.pk}/reconcile/").content.decode()
    assert "The lookup failed" in html
    assert "ConnectionError: payments API unreachable" in html
    assert '<textarea id="result"' in html


def test_it_says_when_a_run_is_not_blocked(world, as_user):
    run = world.run("completed")
    html = as_user("reconciler").get(f"/runs/{run.pk}/reconcile/").content.decode()
    assert "This run is not blocked on an uncertain operation: it is completed." in html
    assert 'name="evidence"' not in html

"""Runs, operations, interactions, events and sessions: shown in the admin, never written there."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runtime.models import Event, EventKind, Interaction, Operation, Run, Session
from tests.versions.conftest import approval_script, make_agent, waiting_runs

MODELS = [Run, Operation, Interaction, Event, Session]


@pytest.fixture
def records(define, effects):
    define(make_agent(approval_script()))
    return waiting_runs("clerk", 2)


def admin_url(model, suffix=""):
    return f"/admin/agentops/{model._meta.model_name}/{suffix}"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_superuser_can_list_and_view_them(records, admin_client, model):
    assert admin_client.get(admin_url(model)).status_code == 200
    obj = model.objects.first()
    page = admin_client.get(admin_url(model, f"{obj.pk}/change/"))
    assert page.status_code == 200
    assert b'name="_save"' not in page.content


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_not_even_a_superuser_can_add_change_or_delete_them(records, admin_client, model):
    obj = model.objects.first()
    count = model.objects.count()
    assert admin_client.get(admin_url(model, "add/")).status_code == 403
    assert admin_client.post(admin_url(model, f"{obj.pk}/change/"), {}).status_code == 403
    assert (
        admin_client.post(admin_url(model, f"{obj.pk}/delete/"), {"post": "yes"}).status_code == 403
    )
    assert model.objects.count() == count


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_the_lists_offer_no_bulk_action(records, admin_client, model):
    page = admin_client.get(admin_url(model)).content
    assert b'name="action"' not in page
    assert b"delete_selected" not in page


def test_an_event_is_unchanged_after_attempts_to_edit_it(records, admin_client):
    event = Event.objects.filter(kind=EventKind.SUBMITTED).first()
    admin_client.post(admin_url(Event, f"{event.pk}/change/"), {"kind": "forged", "actor": "x"})
    admin_client.post(admin_url(Event, f"{event.pk}/delete/"), {"post": "yes"})
    after = Event.objects.get(pk=event.pk)
    assert (after.kind, after.actor, after.data) == (event.kind, event.actor, event.data)


@pytest.mark.parametrize("model", [Run, Operation, Interaction, Event], ids=lambda m: m.__name__)
def test_the_lists_take_as_many_queries_for_many_rows_as_for_few(
    define, effects, admin_client, model
):
    define(make_agent(approval_script()))
    waiting_runs("clerk", 1)
    with CaptureQueriesContext(connection) as few:
        admin_client.get(admin_url(model))
    waiting_runs("clerk", 6)
    with CaptureQueriesContext(connection) as many:
        admin_client.get(admin_url(model))
    assert len(many) == len(few)


def test_the_run_list_filters_by_agent_version_and_status(define, effects, admin_client):
    define(make_agent(approval_script()), make_agent(approval_script(), name="greeter"))
    clerks = waiting_runs("clerk", 2)
    [greeter] = waiting_runs("greeter", 1)
    page = admin_client.get(
        admin_url(Run) + "?agent=clerk&version=1&status__in=queued,waiting"
    ).content.decode()
    for run in clerks:
        assert str(run.pk) in page
    assert str(greeter.pk) not in page

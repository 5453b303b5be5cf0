"""The console's pages and actions (namespace "console")."""

from django.urls import path

from agentops.views import (
    audit,
    control,
    inbox,
    interactions,
    profile,
    reconcile,
    runs,
    surgery,
    work,
)

app_name = "console"
urlpatterns = [
    path("", inbox.inbox, name="inbox"),
    path("runs/", runs.runs, name="runs"),
    path("runs/bulk/", surgery.bulk_page, name="bulk"),
    path("runs/bulk/start/", surgery.bulk_start, name="bulk_start"),
    path("bulk/<uuid:job_id>/", surgery.bulk_job, name="bulk_job"),
    path("bulk/<uuid:job_id>/stop/", surgery.bulk_stop, name="bulk_stop"),
    path("runs/<uuid:run_id>/", runs.run, name="run"),
    path("runs/<uuid:run_id>/pause/", surgery.pause, name="pause"),
    path("runs/<uuid:run_id>/resume/", surgery.resume, name="resume"),
    path("runs/<uuid:run_id>/fork/", surgery.fork_page, name="fork"),
    path("runs/<uuid:run_id>/fork/start/", surgery.fork_start, name="fork_start"),
    path("runs/<uuid:run_id>/retry/", control.retry, name="retry"),
    path("runs/<uuid:run_id>/cancel/", control.cancel, name="cancel"),
    path("runs/<uuid:run_id>/reconcile/", reconcile.reconcile, name="reconcile"),
    path("runs/<uuid:run_id>/resolve/", reconcile.resolve, name="resolve"),
    path("interactions/<uuid:interaction_id>/", interactions.interaction, name="interaction"),
    path("interactions/<uuid:interaction_id>/respond/", interactions.respond, name="respond"),
    path("interactions/<uuid:interaction_id>/claim/", work.claim, name="claim"),
    path("interactions/<uuid:interaction_id>/release/", work.release, name="release"),
    path("interactions/<uuid:interaction_id>/assign/", work.assign, name="assign"),
    path("interactions/<uuid:interaction_id>/edit/", work.edit, name="edit"),
    path("audit/", audit.audit, name="audit"),
    path("profile/", profile.profile, name="profile"),
]

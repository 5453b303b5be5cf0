"""The console's pages and actions (namespace "console")."""

from django.urls import path

from agentops.views import audit, control, inbox, interactions, profile, reconcile, runs

app_name = "console"
urlpatterns = [
    path("", inbox.inbox, name="inbox"),
    path("runs/", runs.runs, name="runs"),
    path("runs/<uuid:run_id>/", runs.run, name="run"),
    path("runs/<uuid:run_id>/retry/", control.retry, name="retry"),
    path("runs/<uuid:run_id>/cancel/", control.cancel, name="cancel"),
    path("runs/<uuid:run_id>/reconcile/", reconcile.reconcile, name="reconcile"),
    path("runs/<uuid:run_id>/resolve/", reconcile.resolve, name="resolve"),
    path("interactions/<uuid:interaction_id>/", interactions.interaction, name="interaction"),
    path("interactions/<uuid:interaction_id>/respond/", interactions.respond, name="respond"),
    path("audit/", audit.audit, name="audit"),
    path("profile/", profile.profile, name="profile"),
]

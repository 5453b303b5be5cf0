"""The version board: /versions/ (namespace "versions")."""

from django.urls import path

from agentops.views import versions

app_name = "versions"
urlpatterns = [
    path("", versions.board, name="board"),
    path("<str:agent>/<str:version>/retry/", versions.retry_group, name="retry"),
]

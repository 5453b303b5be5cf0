"""/api/v1/: the HTTP API (django-ninja routes it; the schema is at /api/v1/openapi.json)."""

from agentops.api.endpoints import api

urlpatterns, _ninja, app_name = api.urls

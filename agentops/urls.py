from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("agentops.urls_console")),
    path("versions/", include("agentops.urls_versions")),
    path("api/v1/", include("agentops.api.urls")),
    path("", include("agentops.integrations.urls")),
]

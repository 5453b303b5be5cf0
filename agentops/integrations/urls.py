from django.urls import path

from agentops.integrations.views import metrics_view

urlpatterns = [path("metrics", metrics_view, name="metrics")]

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "agentops.api"
    label = "api"
    verbose_name = "HTTP API"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    name = "agentops.integrations"
    label = "integrations"
    verbose_name = "Integrations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentops.integrations import tracing_setup

        tracing_setup.configure_from_settings()

from django.apps import AppConfig


class AgentOpsConfig(AppConfig):
    name = "agentops"
    verbose_name = "AgentOps"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the login signal that puts the operator's time zone in their session.
        from agentops import context  # noqa: F401

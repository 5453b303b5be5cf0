from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operator console: views, templates, websockets, the admin and the commands."""

    name = "agentops"
    label = "console"
    verbose_name = "AgentOps console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        # Connects the login signal that puts the operator's time zone in their session.
        from agentops import context  # noqa: F401
        from agentops.checks import database_tls

        checks.register(database_tls, checks.Tags.security, deploy=True)

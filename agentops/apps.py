from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operator console: views, templates, websockets, the admin and the commands."""

    name = "agentops"
    label = "console"
    verbose_name = "AgentOps console"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class AgentOpsConfig(AppConfig):
    name = "agentops"
    verbose_name = "AgentOps"
    default_auto_field = "django.db.models.BigAutoField"

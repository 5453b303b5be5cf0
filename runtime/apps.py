from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    """The runtime's data: runs, operations, interactions, events, sessions, agent versions.

    Its label stays "agentops", the label these tables, permissions and migrations were made
    under, so moving the models here changed no table, permission name or migration record.
    """

    name = "runtime"
    label = "agentops"
    verbose_name = "AgentOps"
    default_auto_field = "django.db.models.BigAutoField"

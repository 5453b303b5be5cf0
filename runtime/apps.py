from typing import Any

from django.apps import AppConfig
from django.db.models.signals import pre_save


class RuntimeConfig(AppConfig):
    """The runtime's data: runs, operations, interactions, events, sessions, agent versions.

    Its label stays "agentops", the label these tables, permissions and migrations were made
    under, so moving the models here changed no table, permission name or migration record.
    """

    name = "runtime"
    label = "agentops"
    verbose_name = "AgentOps"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from runtime.models import ApprovalRule

        pre_save.connect(_check_rule, sender=ApprovalRule, dispatch_uid="check_approval_rule")


def _check_rule(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
    """Every save of an approval rule is validated (the admin, seeds and shells alike); a
    fixture loaded raw is data already checked when it was made."""
    if raw:
        return
    from runtime.policy import check_rule

    instance.clean_fields()
    check_rule(instance)

from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    name = "agentops.integrations"
    label = "integrations"
    verbose_name = "Integrations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentops.integrations import metrics_fold, tracing_setup
        from runtime import signals

        tracing_setup.configure_from_settings()
        signals.write_refused.connect(
            metrics_fold.count_refused_write, dispatch_uid="integrations.fenced_writes_refused"
        )

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = "Refund desk demo"
    default_auto_field = "django.db.models.BigAutoField"

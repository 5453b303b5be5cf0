"""AgentOps: the Django project and console app for operating durable agent runs."""

# Load the Celery app with Django, so `shared_task` binds to it and `celery -A agentops` finds it.
from agentops.celery import app as celery_app

__all__ = ("celery_app",)

"""AgentOps: the Django project and console app for operating durable agent runs."""

"""`manage.py serve` and the other AgentOps commands."""

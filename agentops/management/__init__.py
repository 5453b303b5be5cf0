"""Management commands of the AgentOps app."""

"""Local stand-ins for external services, so tests exercise real clients without a network."""

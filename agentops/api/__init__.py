"""The HTTP API (/api/v1/), its service accounts and tokens, and the command-line client."""

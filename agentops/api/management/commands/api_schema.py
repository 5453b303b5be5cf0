"""`manage.py api_schema [PATH]`: print the API's OpenAPI schema, or write it to PATH.

docs/openapi.json is written by it; a test fails when that file differs from what is served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentops.api.endpoints import api


class Command(BaseCommand):
    help = "Print the OpenAPI schema of /api/v1/, or write it to a file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", nargs="?", help="write here instead of printing")

    def handle(self, *args: Any, path: str | None = None, **options: Any) -> None:
        text = json.dumps(api.get_openapi_schema(), indent=2, sort_keys=True) + "\n"
        if path:
            Path(path).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")

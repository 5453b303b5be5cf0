"""Error reports mask secrets in development too.

Django masks sensitive variables and POST parameters only when DEBUG is off; a development
server with DEBUG on shows its technical 500 page to whoever triggers it, and a password typed
for a high-risk approval or a Slack URL typed in the admin would be on it.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.views.debug import SafeExceptionReporterFilter


class AlwaysSafeExceptionReporterFilter(SafeExceptionReporterFilter):
    def is_active(self, request: HttpRequest | None) -> bool:
        return True

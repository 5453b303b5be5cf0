"""ASGI entry point: HTTP through Django, websockets through Channels.

Websockets carry the browser's session (AuthMiddlewareStack: the consumer refuses anonymous
users) and must come from one of ALLOWED_HOSTS (AllowedHostsOriginValidator), so that another
site cannot open a socket with a logged-in user's cookies.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
# What get_asgi_application() does, with the console's handler (agentops.handlers).
django.setup(set_prefix=False)

from agentops.handlers import SyncStackASGIHandler  # noqa: E402

django_asgi_app = SyncStackASGIHandler()

# These import models and templates: Django must be set up first.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agentops.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

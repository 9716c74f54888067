"""A Hub-compatible HTTP server for offline use and tests (see ``hub_server.server``)."""

from .server import STEPS, BackgroundHub, HubServer, make_server, running_server, serve
from .storage import HubError, Storage

__all__ = [
    "STEPS",
    "BackgroundHub",
    "HubError",
    "HubServer",
    "Storage",
    "make_server",
    "running_server",
    "serve",
]

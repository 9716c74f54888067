"""A Hub-compatible HTTP server for offline use and tests (see ``hub_server.server``)."""

from .accounts import Account
from .errors import HubError
from .server import STEPS, BackgroundHub, DataDirInUse, HubServer, make_server, running_server, serve
from .storage import Storage
from .transport import ServerLimits

__all__ = [
    "STEPS",
    "Account",
    "BackgroundHub",
    "DataDirInUse",
    "HubError",
    "HubServer",
    "ServerLimits",
    "Storage",
    "make_server",
    "running_server",
    "serve",
]

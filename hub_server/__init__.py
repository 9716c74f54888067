"""A Hub-compatible HTTP server for offline use and tests (the ``[hub]`` extra; see ``hub_server.server``)."""

from .errors import HubError
from .server import Account, BackgroundHub, DataDirInUse, HubServer, ServerLimits
from .storage import Storage

__all__ = ["Account", "BackgroundHub", "DataDirInUse", "HubError", "HubServer", "ServerLimits", "Storage"]

# ruff: noqa: E402 - the extra is checked before its packages are imported
"""A Hub-compatible HTTP server for offline use and tests (see ``hub_server.server``)."""

from briskbert.extras import require_extra

require_extra("hub", "The local Hub (briskbert local-hub, the quickstart's publish step)")  # before uvicorn

from .errors import HubError
from .server import Account, BackgroundHub, DataDirInUse, HubServer, ServerLimits
from .storage import Storage

__all__ = ["Account", "BackgroundHub", "DataDirInUse", "HubError", "HubServer", "ServerLimits", "Storage"]

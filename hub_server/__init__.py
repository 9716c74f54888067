# ruff: noqa: E402 - the extra is checked before its packages are imported
"""A Hub-compatible HTTP server for offline use and tests (see ``hub_server.server``)."""

from briskbert.extras import require_extra

require_extra("hub", "The local Hub (briskbert local-hub, the quickstart's publish step)")  # before uvicorn

from .accounts import Account
from .errors import HubError
from .routes import STEPS
from .server import BackgroundHub, DataDirInUse, HubServer, ServerLimits
from .storage import Storage

__all__ = [
    "STEPS",
    "Account",
    "BackgroundHub",
    "DataDirInUse",
    "HubError",
    "HubServer",
    "ServerLimits",
    "Storage",
]

"""The errors the local Hub answers with: a status code plus the ``X-Error-Code`` the clients map to their own
exception types (``RepositoryNotFoundError``, ``RevisionNotFoundError``, ...)."""

from __future__ import annotations

import errno


class HubError(Exception):
    status = 400
    code = "BadRequest"

    def __init__(self, message: str, status=None, code=None, headers: dict | None = None, body=None):
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})  # extra answer headers, e.g. X-Repo-Commit on a missing file
        self.body = dict(body or {})  # extra fields of the JSON answer, next to "error"
        self.status = status or self.status
        self.code = code or self.code


def _error(name: str, status: int, code: str) -> type[HubError]:
    return type(name, (HubError,), {"status": status, "code": code})


BadRequest = _error("BadRequest", 400, "BadRequest")
Unauthorized = _error("Unauthorized", 401, "Unauthorized")
Forbidden = _error("Forbidden", 403, "Forbidden")
NotFound = _error("NotFound", 404, "NotFound")
RepoNotFound = _error("RepoNotFound", 404, "RepoNotFound")
RevisionNotFound = _error("RevisionNotFound", 404, "RevisionNotFound")
EntryNotFound = _error("EntryNotFound", 404, "EntryNotFound")
MethodNotAllowed = _error("MethodNotAllowed", 405, "MethodNotAllowed")
RequestTimeout = _error("RequestTimeout", 408, "RequestTimeout")
Conflict = _error("Conflict", 409, "Conflict")
PreconditionFailed = _error("PreconditionFailed", 412, "PreconditionFailed")
PayloadTooLarge = _error("PayloadTooLarge", 413, "PayloadTooLarge")
Unprocessable = _error("Unprocessable", 422, "MissingContent")  # names content that is not there
ServerError = _error("ServerError", 500, "ServerError")  # a bug, or the fault injector's
# A stored file of a repo is damaged (the log names it); the other repos serve as before.
StorageDamaged = _error("StorageDamaged", 500, "StorageDamaged")
# The disk is full and nothing was kept. Clients do not retry a 507: the write would fail until space is freed.
InsufficientStorage = _error("InsufficientStorage", 507, "InsufficientStorage")


def disk_full(error: OSError, size: int | None = None) -> HubError | None:
    """The answer to a write that found the disk (or the quota) full; None for any other ``OSError``."""
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    carried = f"; the request carried {size:,} bytes" if size else ""
    return InsufficientStorage(
        f"The Hub's storage is full ({error.strerror or 'no space left on device'}): nothing of this request "
        f"was stored{carried}. Retry once space is freed on the server."
    )


def damaged(repo_id: str, what: str) -> HubError:
    return StorageDamaged(
        f"The stored data of {repo_id} is damaged ({what}); the Hub's log names the file. Restore it from a "
        "backup, or delete the repo and push it again."
    )


def repo_not_found(repo_type: str, repo_id: str) -> HubError:
    # The same words whether the repo is missing or private: its existence is not revealed.
    return RepoNotFound(
        f"Repository Not Found for url: {repo_type}s/{repo_id}. If you are trying to access a private "
        "repo, make sure you are authenticated."
    )

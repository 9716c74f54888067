"""The errors the local Hub answers with: each is a status code plus the ``X-Error-Code`` the clients map to
their own exception types (``RepositoryNotFoundError``, ``RevisionNotFoundError``, ...)."""

from __future__ import annotations

import errno


class HubError(Exception):
    status = 400
    code: str | None = "BadRequest"

    def __init__(
        self,
        message: str,
        status: int | None = None,
        code: str | None = None,
        headers: dict | None = None,
        body: dict | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})  # extra response headers, e.g. X-Repo-Commit on a missing file
        self.body = dict(body or {})  # extra fields of the JSON answer, next to "error"
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code


class BadRequest(HubError):
    pass


class Unauthorized(HubError):
    status, code = 401, "Unauthorized"


class Forbidden(HubError):
    status, code = 403, "Forbidden"


class NotFound(HubError):
    status, code = 404, "NotFound"


class RepoNotFound(NotFound):
    code = "RepoNotFound"


class RevisionNotFound(NotFound):
    code = "RevisionNotFound"


class EntryNotFound(NotFound):
    code = "EntryNotFound"


class MethodNotAllowed(HubError):
    status, code = 405, "MethodNotAllowed"


class Conflict(HubError):
    status, code = 409, "Conflict"


class PreconditionFailed(HubError):
    status, code = 412, "PreconditionFailed"


class PayloadTooLarge(HubError):
    status, code = 413, "PayloadTooLarge"


class Unprocessable(HubError):  # well-formed, but names content that is not there or does not match
    status, code = 422, "MissingContent"


class RequestTimeout(HubError):
    status, code = 408, "RequestTimeout"


class InsufficientStorage(HubError):
    """The disk is full and nothing of the request was kept. The clients do not retry a 507: the same write
    would fail again until space is freed."""

    status, code = 507, "InsufficientStorage"


class StorageDamaged(HubError):
    """A stored file of a repo is damaged (the log names it); the other repos serve as before."""

    status, code = 500, "StorageDamaged"


class ServerError(HubError):  # a bug, or the fault injector's
    status, code = 500, None


def disk_full(error: OSError, size: int | None = None) -> InsufficientStorage | None:
    """The answer to a write that found the disk (or the quota) full; None for any other ``OSError``. The file
    it failed on goes to the server's log, not to the client."""
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    carried = f"; the request carried {size:,} bytes" if size else ""
    return InsufficientStorage(
        f"The Hub's storage is full ({error.strerror or 'no space left on device'}): nothing of this request "
        f"was stored{carried}. Retry once space is freed on the server."
    )


def damaged(repo_id: str, what: str) -> StorageDamaged:
    return StorageDamaged(
        f"The stored data of {repo_id} is damaged ({what}); the Hub's log names the file. Restore it from a "
        "backup, or delete the repo and push it again."
    )


def repo_not_found(repo_type: str, repo_id: str) -> RepoNotFound:
    # The same words whether the repo is missing or private: its existence is not revealed.
    return RepoNotFound(
        f"Repository Not Found for url: {repo_type}s/{repo_id}. If you are trying to access a private "
        "repo, make sure you are authenticated."
    )

"""Who a request acts for. As on the Hub, a token belongs to one user; it may create and change repos under that
user's name and its organisations', and read private repos there. Anywhere else it has a reader's rights."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .errors import Forbidden
from .names import is_repo_name, repo_key


@dataclass(frozen=True)
class Account:
    """A user (``name``, its own namespace) and the organisations (``orgs``) its token may also write in.
    ``token`` is None only for the single account of a server started without any token."""

    name: str
    token: str | None
    orgs: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "orgs", tuple(self.orgs))
        for namespace in (self.name, *self.orgs):
            if not is_repo_name(namespace):
                raise ValueError(
                    f"{namespace!r} cannot be a user or organisation name (letters, digits, -_.)"
                )
        if self.token is not None and not (
            isinstance(self.token, str) and self.token.isprintable() and self.token
        ):
            raise ValueError(f"the token of account {self.name!r} must be a non-empty printable string")

    def owns(self, namespace: str) -> bool:
        return repo_key(namespace) in {repo_key(n) for n in (self.name, *self.orgs)}

    def check_writes(self, namespace: str, what: str) -> None:
        if not self.owns(namespace):
            mine = ", ".join([self.name, *self.orgs])
            raise Forbidden(f"You don't have the rights to write {what}: this token writes only under {mine}")

    def whoami(self) -> dict:
        auth = {"type": "access_token", "accessToken": {"displayName": "local", "role": "write"}}
        orgs = [{"type": "org", "name": org, "fullname": org} for org in self.orgs]
        return {"type": "user", "name": self.name, "fullname": self.name, "orgs": orgs, "auth": auth}


def token_digest(token: str) -> bytes:
    """What tokens are compared by: the time a lookup takes tells nothing about how much of a token was right."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()

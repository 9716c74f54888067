"""Who a request acts for: the accounts a server knows, each a token with the namespaces it may write in.

As on the Hub, a token belongs to one user; it may create and change repos under that user's name and under
the organisations it is a member of, and read private repos there. Anywhere else it has a reader's rights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
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
        if self.token is not None and (
            not isinstance(self.token, str) or not self.token or not self.token.isprintable()
        ):
            raise ValueError(f"the token of account {self.name!r} must be a non-empty printable string")

    def owns(self, namespace: str) -> bool:
        """True when this account may write in ``namespace`` (compared case-insensitively, as the Hub does)."""
        key = repo_key(namespace)
        return key == repo_key(self.name) or any(key == repo_key(org) for org in self.orgs)

    def check_writes(self, namespace: str, what: str) -> None:
        """``Forbidden`` unless this account may write in ``namespace``; ``what`` says what was refused."""
        if not self.owns(namespace):
            mine = ", ".join([self.name, *self.orgs])
            raise Forbidden(f"You don't have the rights to write {what}: this token writes only under {mine}")

    def whoami(self) -> dict:
        auth = {"type": "access_token", "accessToken": {"displayName": "local", "role": "write"}}
        orgs = [{"type": "org", "name": org, "fullname": org} for org in self.orgs]
        return {"type": "user", "name": self.name, "fullname": self.name, "orgs": orgs, "auth": auth}


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class Accounts:
    """The accounts of one server, found by token. With no token configured, every request acts for the one
    tokenless account (an open server); otherwise a request without a known token acts for nobody."""

    def __init__(self, accounts: Iterable[Account], open_account: Account | None = None):
        self._by_digest: dict[bytes, Account] = {}
        for account in accounts:
            digest = _digest(account.token or "")
            if account.token is None or digest in self._by_digest:
                raise ValueError(f"account {account.name!r}: every account needs its own token")
            self._by_digest[digest] = account
        self.open_account = None if self._by_digest else open_account

    def authenticate(self, authorization: str) -> Account | None:
        """The account an ``Authorization`` header value names. The token is compared through its sha256,
        so the time taken tells nothing about how much of a token was right."""
        if self.open_account is not None:
            return self.open_account
        given = authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""
        return self._by_digest.get(_digest(given)) if given else None

"""The names the local Hub accepts, by the Hub's rules: repo ids, file paths in a repo, branch and tag names.
A path is checked as sent *and* in its NFKC form, so look-alikes cannot smuggle a ``..`` or ``.git`` past."""

from __future__ import annotations

import re
import unicodedata

from .errors import BadRequest

REPO_TYPES = ("model", "dataset", "space", "kernel")
# The Hub's repo-name rule: letters, digits, '-', '_', '.', at most 96 characters, starting with a letter or a
# digit; no '--' or '..' (the client refuses both), no '.git' suffix (in any case).
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")
_HEX40_RE = re.compile(r"[0-9a-fA-F]{40}")
COMMIT_ID_RE = re.compile(r"[0-9a-f]{40}")  # the ids this server gives commits
SHA256_RE = re.compile(r"[0-9a-f]{64}")  # blob ids, as git-lfs spells them
# What ``git check-ref-format`` refuses, plus names that would be read as something else here.
_REF_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
# Code points file systems ignore when they compare names (HFS+ drops them), so ".g\u200cit" is ".git" there.
_IGNORABLE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]")

MAX_PATH_BYTES = 1024  # a whole path in a repo, UTF-8
MAX_COMPONENT_BYTES = 255  # one file or folder name, UTF-8: what ext4, APFS and NTFS allow


def is_repo_name(name: str) -> bool:
    return (
        bool(_NAME_RE.fullmatch(name))
        and ".." not in name
        and "--" not in name
        and not name.lower().endswith(".git")
    )


def validate_repo_id(repo_id: str) -> tuple[str, str]:
    """(namespace, name) of a valid ``namespace/name``; a ``BadRequest`` otherwise."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(is_repo_name(p) for p in parts):
        raise BadRequest(
            f"Invalid repo id {repo_id!r}: expected 'namespace/name', each made of letters, digits, '-', '_' "
            "and '.' (at most 96, starting with a letter or digit; no '--' or '..', no '.git' suffix)",
            code="InvalidRepoId",
        )
    return parts[0], parts[1]


def repo_key(repo_id: str) -> str:
    """The form repo ids are compared and stored in: the Hub treats ``me/Pub`` and ``me/pub`` as one repo."""
    return repo_id.lower()


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")  # strict: a lone surrogate has no UTF-8 form
    except UnicodeEncodeError:
        return None


def _is_dot_git(segment: str) -> bool:
    # Windows drops trailing dots and spaces, HFS+ drops ignorable code points: all of these open ".git".
    return _IGNORABLE.sub("", segment).rstrip(". ").casefold() == ".git"


def _segments_problem(form: str) -> str | None:
    if form.startswith("/") or "\\" in form:
        return "paths are relative and use '/'"
    for segment in form.split("/"):
        if segment in ("", ".", ".."):
            return "it has an empty, '.' or '..' segment (also after Unicode NFKC normalisation)"
        if "." in segment and _is_dot_git(segment):
            return "'.git' cannot be a file or folder name, in any case"
        if len(segment) > MAX_COMPONENT_BYTES // 4 and len(segment.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return f"a file or folder name is longer than {MAX_COMPONENT_BYTES} bytes ({segment[:40]!r}...)"
    return None


def path_problem(path) -> str | None:
    """Why ``path`` cannot name a file in a repo, or None when it can."""
    if not path:
        return "it is empty"
    encoded = _utf8(path)
    if encoded is None:
        return "it is not valid Unicode (a lone surrogate)"
    if len(encoded) > MAX_PATH_BYTES:
        return f"it is {len(encoded)} bytes long; at most {MAX_PATH_BYTES} are allowed"
    if not path.isprintable() and any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "it contains a control character"
    problem = _segments_problem(path)
    if problem is None and not path.isascii():  # NFKC changes nothing in ASCII
        problem = _segments_problem(unicodedata.normalize("NFKC", path))
    return problem


def validate_path(path: str) -> str:
    problem = path_problem(path)
    if problem:
        raise BadRequest(f"Invalid file path {path[:200]!r}: {problem}", code="InvalidPath")
    return path


def ref_name_problem(name) -> str | None:
    """Why ``name`` cannot be a branch or tag (git's ref-name rules; no 40-hex names, which would shadow
    commit ids; no ``refs/`` prefix, which ``resolve`` strips), or None when it can."""
    if not 1 <= len(name) <= 200:
        return "it must be 1 to 200 characters"
    if _utf8(name) is None:
        return "it is not valid Unicode (a lone surrogate)"
    if _HEX40_RE.fullmatch(name):
        return "40 hexadecimal characters would shadow a commit id"
    if name.startswith("refs/"):
        return "the refs/ prefix is implied"
    if _REF_FORBIDDEN_CHARS.search(name):
        return "it contains a space, a control character or one of ~ ^ : ? * [ \\"
    if name == "@" or "@{" in name or ".." in name or name.endswith("."):
        return "'@', '@{', '..' and a trailing '.' are not allowed"
    parts = name.split("/")
    if any(not p or p.startswith(".") or p.endswith(".lock") for p in parts):
        return "no empty component, no component starting with '.' or ending with '.lock'"
    return None


def validate_ref_name(name: str) -> str:
    problem = ref_name_problem(name)
    if problem:
        raise BadRequest(f"Invalid branch or tag name {name!r}: {problem}", code="InvalidRef")
    return name

"""The names the local Hub accepts, by the Hub's rules: repo ids, file paths in a repo, branch and tag names.
A path is checked as sent *and* in its NFKC form, so look-alikes cannot smuggle a ``..`` or ``.git`` past."""

from __future__ import annotations

import re
import unicodedata

from .errors import BadRequest

REPO_TYPES = ("model", "dataset", "space", "kernel")
COMMIT_ID_RE = re.compile(r"[0-9a-f]{40}")  # the ids this server gives commits
SHA256_RE = re.compile(r"[0-9a-f]{64}")  # blob ids, as git-lfs spells them
# The Hub's repo-name rule: letters, digits, '-', '_', '.', at most 96 characters, starting with a letter or a
# digit; no '--' or '..' (the client refuses both), no '.git' suffix (in any case).
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")
# What ``git check-ref-format`` refuses, plus names that would be read as something else here.
_REF_BAD_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate has no UTF-8 form
# Code points file systems ignore when they compare names (HFS+ drops them), so ".g\u200cit" is ".git" there.
_IGNORABLE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]")
MAX_PATH_BYTES = 1024  # a whole path in a repo, UTF-8
MAX_COMPONENT_BYTES = 255  # one file or folder name, UTF-8: what ext4, APFS and NTFS allow


def is_repo_name(name: str) -> bool:
    return bool(_NAME_RE.fullmatch(name)) and not (
        "--" in name or ".." in name or name.lower().endswith(".git")
    )


def validate_repo_id(repo_id: str) -> None:
    """A ``BadRequest`` unless ``repo_id`` is a valid ``namespace/name``."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(is_repo_name(p) for p in parts):
        raise BadRequest(
            f"Invalid repo id {repo_id!r}: expected 'namespace/name', each made of letters, digits, '-', '_' "
            "and '.' (at most 96, starting with a letter or digit; no '--' or '..', no '.git' suffix)",
            code="InvalidRepoId",
        )


def _segments_problem(form: str) -> str | None:
    if form.startswith("/") or "\\" in form:
        return "paths are relative and use '/'"
    for segment in form.split("/"):
        if segment in ("", ".", ".."):
            return "it has an empty, '.' or '..' segment (also after Unicode NFKC normalisation)"
        # Windows drops trailing dots and spaces, HFS+ ignorable code points: all of these open ".git".
        if _IGNORABLE.sub("", segment).rstrip(". ").casefold() == ".git":
            return "'.git' cannot be a file or folder name, in any case"
        if len(segment.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return f"a file or folder name is longer than {MAX_COMPONENT_BYTES} bytes ({segment[:40]!r}...)"
    return None


def validate_path(path: str) -> str:
    size = len(path.encode("utf-8", "surrogatepass"))
    checks = [
        (not path, "it is empty"),
        (_SURROGATE.search(path), "it is not valid Unicode (a lone surrogate)"),
        (size > MAX_PATH_BYTES, f"it is {size} bytes long; at most {MAX_PATH_BYTES} are allowed"),
        (any(ord(c) < 32 or ord(c) == 127 for c in path), "it contains a control character"),
    ]
    problem = next((why for failed, why in checks if failed), None) or _segments_problem(path)
    if problem is None and not path.isascii():  # NFKC changes nothing in ASCII
        problem = _segments_problem(unicodedata.normalize("NFKC", path))
    if problem:
        raise BadRequest(f"Invalid file path {path[:200]!r}: {problem}", code="InvalidPath")
    return path


def validate_ref_name(name: str) -> str:
    """A branch or tag name by git's ref-name rules; no 40-hex name (it would shadow a commit id), no ``refs/``
    prefix (``resolve`` strips it)."""
    checks = [
        (not 1 <= len(name) <= 200, "it must be 1 to 200 characters"),
        (_SURROGATE.search(name), "it is not valid Unicode (a lone surrogate)"),
        (re.fullmatch(r"[0-9a-fA-F]{40}", name), "40 hexadecimal characters would shadow a commit id"),
        (name.startswith("refs/"), "the refs/ prefix is implied"),
        (_REF_BAD_CHARS.search(name), "it contains a space, a control character or one of ~ ^ : ? * [ \\"),
        (re.search(r"^@$|@\{|\.\.|\.$", name), "'@', '@{', '..' and a trailing '.' are not allowed"),
        (
            any(not p or p.startswith(".") or p.endswith(".lock") for p in name.split("/")),
            "no empty component, no component starting with '.' or ending with '.lock'",
        ),
    ]
    problem = next((why for failed, why in checks if failed), None)
    if problem:
        raise BadRequest(f"Invalid branch or tag name {name!r}: {problem}", code="InvalidRef")
    return name


def repo_key(repo_id: str) -> str:
    """The form repo ids are compared and stored in: the Hub treats ``me/Pub`` and ``me/pub`` as one repo."""
    return repo_id.lower()

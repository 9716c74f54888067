"""Credentials in files about to be published: well-known credential file names (``NAME_RULES``), private-key
blocks and token formats (``CONTENT_RULES``), and the token in use. Files are searched memory-mapped as they are;
a ``.safetensors`` file in its metadata and tensor names only. A finding never holds the secret."""

from __future__ import annotations

import mmap
import re
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import NamedTuple


class Finding(NamedTuple):
    """One file that must not be published: ``what`` it holds and ``where`` (never the secret)."""

    path: str  # relative to the model folder
    what: str  # e.g. "a Hugging Face token"
    where: str = ""  # e.g. "at byte 12"; "" for a match by name

    def describe(self) -> str:
        return f"{self.path} ({self.what}, {self.where or 'by its name'})"


# what -> globs, matched case-insensitively against the file name or, when a glob holds a ``/``, against as many
# trailing path components.
NAME_RULES = {
    "an environment file": (".env*", "*.env"),
    "an SSH private key": ("id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".ssh/*"),
    "a private key or key store": ("*.pem", "*.key", "*.p12", "*.pfx", "*.p8", "*.jks", "*.ppk"),
    "a netrc file": (".netrc", "_netrc"),
    "package-registry credentials": (".npmrc", ".pypirc", ".gem/credentials"),
    "a database password file": (".pgpass", ".my.cnf"),
    "git credentials": (".git-credentials",),
    "AWS credentials": (".aws/credentials",),
    "a Hugging Face token file": ("*huggingface/token", "*huggingface/stored_tokens"),
    "cloud credentials": (
        "credentials*.json",
        "client_secret*.json",
        "*service_account*.json",
        "*service-account*.json",
        "application_default_credentials.json",
        "token.json",
    ),
    "Docker registry credentials": (".docker/config.json", ".dockercfg"),
    "Kaggle credentials": ("kaggle.json",),
    "Weights & Biases settings": ("wandb/settings",),
    "a kubeconfig": (".kube/config", "kubeconfig", "*.kubeconfig"),
}
# Look-alikes that hold nothing secret: public keys and SSH's other files.
NOT_SECRET = ("*.pub", ".ssh/known_hosts*", ".ssh/config", ".ssh/authorized_keys*")


def credential_file(rel_path: str) -> str | None:
    """What a file is by its name alone (``NAME_RULES``), or None."""
    parts = PurePosixPath(rel_path.lower()).parts

    def matches(globs: tuple[str, ...]) -> bool:
        return any(fnmatchcase("/".join(parts[-(g.count("/") + 1) :]), g) for g in globs)

    if matches(NOT_SECRET):
        return None
    return next((what for what, globs in NAME_RULES.items() if matches(globs)), None)


_MIXED = rb"(?=[\w\-]*[A-Z])(?=[\w\-]*[a-z])"  # a random token body holds both cases, a word rarely


# (what, the literal starts of a match, the regex matched there): ``bytes.find`` on each start is many times
# faster on a large file than one regex searching for them all.
CONTENT_RULES = tuple(
    (what, tuple(anchors), re.compile(regex))
    for what, anchors, regex in (
        ("a private key", [b"-----BEGIN "], rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
        ("a PuTTY private key", [b"PuTTY-User-Key-File-"], rb"PuTTY-User-Key-File-\d+:"),
        ("a Hugging Face token", [b"hf_"], rb"hf_" + _MIXED + rb"[A-Za-z0-9]{30,}"),
        ("an AWS access key id", [b"AKIA", b"ASIA"], rb"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])"),
        (
            "an AWS secret access key",
            [b"aws_secret_access_key", b"AWS_SECRET_ACCESS_KEY"],
            rb"(?i:aws_secret_access_key)[\"']?\s*[=:]\s*[\"']?[A-Za-z0-9/+=]{40}",
        ),
        (
            "a Google Cloud service-account key",
            [b'"private_key_id"'],
            rb'"private_key_id"\s*:\s*"[0-9a-f]{40}"',
        ),
        ("a Google API key", [b"AIza"], rb"AIza[0-9A-Za-z_\-]{35}"),
        ("a Google OAuth token", [b"ya29."], rb"ya29\.[0-9A-Za-z_\-]{30,}"),
        (
            "an OpenAI-style API key",
            [b"sk-"],
            rb"(?<![A-Za-z0-9])sk-(?:proj-|svcacct-|admin-|ant-(?:[a-z]+\d+-)?)?(?=[\w\-]*\d)"
            + _MIXED
            + rb"[\w\-]{32,}",
        ),
        ("a GitHub token", [b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"], rb"gh[pousr]_[A-Za-z0-9]{36,}"),
        ("a GitHub token", [b"github_pat_"], rb"github_pat_[A-Za-z0-9_]{22,}"),
        ("a GitLab token", [b"glpat-"], rb"glpat-[A-Za-z0-9_\-]{20,}"),
        ("a Slack token", [b"xox"], rb"xox[abprse]-(?=[A-Za-z0-9\-]*\d)[A-Za-z0-9\-]{10,}"),
        ("a Slack webhook", [b"hooks.slack.com/services/"], rb"hooks\.slack\.com/services/T\w+/B\w+/\w+"),
        ("a Stripe secret key", [b"sk_live_", b"rk_live_"], rb"[sr]k_live_[A-Za-z0-9]{20,}"),
        ("an npm token", [b"npm_"], rb"npm_" + _MIXED + rb"[A-Za-z0-9]{36}"),
        ("a PyPI token", [b"pypi-AgEIcHlwaS5vcmc"], rb"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"),
    )
)


def _rules(token: str | None) -> tuple:
    """The content rules, plus the token in use (under 8 characters it would match by chance)."""
    if not token or len(token) < 8:
        return CONTENT_RULES
    literal = token.encode()
    return CONTENT_RULES + (("the access token in use", (literal,), re.compile(re.escape(literal))),)


def _first_match(rules: tuple, data) -> tuple[str, int] | None:
    """(what, byte offset) of the first rule that matches ``data`` (bytes or a memory map), or None."""
    for what, anchors, regex in rules:
        for anchor in anchors:
            pos = data.find(anchor)
            while pos != -1:
                if regex.match(data, pos):
                    return what, pos
                pos = data.find(anchor, pos + 1)
    return None


def _safetensors_strings(path: Path) -> bytes | None:
    """A safetensors file's metadata and tensor names, or None when it is not one."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "np") as weights:
            strings = [*(weights.metadata() or {}).items(), *weights.keys()]
    except (SafetensorError, OSError, ValueError):
        return None
    return repr(strings).encode("utf-8", "replace")


def scan_file(folder: Path, rel_path: str, rules: tuple = CONTENT_RULES) -> Finding | None:
    """The first reason ``folder / rel_path`` must not be published, or None."""
    if what := credential_file(rel_path):
        return Finding(rel_path, what)
    path = folder / rel_path
    if path.suffix == ".safetensors" and (strings := _safetensors_strings(path)) is not None:
        found = _first_match(rules, strings)
        return Finding(rel_path, found[0], "in the safetensors metadata") if found else None
    if path.stat().st_size == 0:  # nothing to map
        return None
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        found = _first_match(rules, data)
    return Finding(rel_path, found[0], f"at byte {found[1]}") if found else None


def scan_bytes(data: bytes, label: str, token: str | None = None) -> Finding | None:
    """Scan content that is not a file yet (a rendered card), reported as ``label``."""
    found = _first_match(_rules(token), data)
    return Finding(label, found[0], f"at byte {found[1]}") if found else None


def scan_files(folder: Path, rel_paths: list[str], token: str | None = None) -> list[Finding]:
    """One finding for each file in ``rel_paths`` that holds (or is) a credential, in the given order."""
    rules = _rules(token)
    return [f for f in (scan_file(folder, rel, rules) for rel in rel_paths) if f is not None]

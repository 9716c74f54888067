"""Credentials in files about to be published: found by name, by content, and inside encoded copies.

    findings = scan_files(Path("outputs/sst2"), ["config.json", "notes.md"], token=os.environ.get("HF_TOKEN"))

Three kinds of evidence, each a table below:

* **Names** (``NAME_RULES``): well-known credential files wherever they sit (``.env*``, SSH keys, ``*.pem``,
  cloud, registry and database credentials, a kubeconfig, ...). A name alone is enough: such a file is never
  part of a model.
* **Contents** (``CONTENT_RULES``): private-key blocks, the usual providers' access tokens, and the structured
  files that hold credentials (service-account JSON, kubeconfig users, docker ``auths``, ...). Each rule has
  literal anchors found with ``bytes.find`` and a regex checked only near them, so large files scan fast.
  Tokens are matched without ``\\b``: in ``HF_TOKEN_hf_...`` and ``hf_..._prod`` the underscore is a word
  character, and those are tokens all the same. Generic prefixes (``hf_``, ``sk-``) also need a random-looking
  body (mixed case), which keeps identifiers out.
* **Encodings**: UTF-16 and UTF-32 text (a byte-order mark, or the zero bytes of mostly-ASCII text) is decoded;
  gzip, bz2, xz and zip data is unpacked (zip member names are checked too); base64 runs of 32 or more
  characters are decoded and scanned again. All of it is bounded (``Limits``): nesting depth, unpacked bytes
  and base64 runs per file, zip members.

Weights are not text. A ``.safetensors`` file is scanned in its JSON header only (where its metadata strings
live); other weight formats (``.bin``, ``.pt``, ``.onnx``, ...) are searched byte by byte for the content rules
but never decoded, so tensor bytes cannot turn into false alarms. A finding names the file and what was found,
never the secret itself.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import gzip
import io
import lzma
import re
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import BinaryIO


# ---- what a scan reports -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """One file that must not be published: ``what`` it holds and ``where`` (never the secret)."""

    path: str  # relative to the model folder
    what: str  # e.g. "a Hugging Face token"
    where: tuple[str, ...] = ()  # e.g. ("in gzip data", "in base64 text at byte 12"); () for a name match

    def describe(self) -> str:
        return f"{self.path} ({self.what}, {', '.join(self.where) or 'by its name'})"


@dataclass(frozen=True)
class Limits:
    """Bounds on the decoding work spent on one file (what is past them is not decoded)."""

    max_depth: int = 4  # containers inside containers: gzip in base64 in zip ...
    max_unpacked_bytes: int = 256 << 20  # bytes produced by unpacking and base64-decoding
    max_base64_runs: int = 4096
    max_zip_members: int = 1000
    max_safetensors_header: int = 100 << 20  # larger is not a safetensors header; scanned as a plain file


# ---- names ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NameRule:
    """Credential files known by name. A glob is matched (case-insensitively) against the file name, or, when
    it holds a ``/``, against as many trailing path components."""

    what: str
    globs: tuple[str, ...]
    unless: tuple[str, ...] = ()  # look-alikes that hold nothing secret (public keys)

    def matches(self, rel_path: str) -> bool:
        parts = PurePosixPath(rel_path.lower()).parts

        def any_glob(globs: tuple[str, ...]) -> bool:
            return any(fnmatchcase("/".join(parts[-(g.count("/") + 1) :]), g) for g in globs)

        return any_glob(self.globs) and not any_glob(self.unless)


NAME_RULES: tuple[NameRule, ...] = (
    NameRule("an environment file", (".env*", "*.env")),
    NameRule(
        "an SSH private key",
        ("id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".ssh/*"),
        unless=("*.pub", ".ssh/known_hosts*", ".ssh/config", ".ssh/authorized_keys*"),
    ),
    NameRule(
        "a private key or key store", ("*.pem", "*.key", "*.p12", "*.pfx", "*.p8", "*.jks", "*.keystore")
    ),
    NameRule("a PuTTY private key", ("*.ppk",)),
    NameRule("a netrc file", (".netrc", "_netrc")),
    NameRule("package-registry credentials", (".npmrc", ".pypirc", ".gem/credentials")),
    NameRule("a database password file", (".pgpass", ".my.cnf")),
    NameRule("git credentials", (".git-credentials",)),
    NameRule("AWS credentials", (".aws/credentials",)),
    NameRule("a Hugging Face token file", ("*huggingface/token", "*huggingface/stored_tokens")),
    NameRule(
        "Google Cloud credentials",
        (
            "application_default_credentials.json",
            "credentials*.json",
            "client_secret*.json",
            "*service_account*.json",
            "*service-account*.json",
            "gcloud/credentials.db",
            "gcloud/access_tokens.db",
            "legacy_credentials/*/adc.json",
        ),
    ),
    NameRule("a Google OAuth token file", ("token.json",)),
    NameRule("Docker registry credentials", (".docker/config.json", ".dockercfg")),
    NameRule("Kaggle credentials", ("kaggle.json",)),
    NameRule("Weights & Biases settings", ("wandb/settings",)),
    NameRule("a kubeconfig", (".kube/config", "kubeconfig", "*.kubeconfig", "kubeconfig.y*ml")),
)


def _credential_file(rel_path: str) -> str | None:
    """What a file is by its name alone (``NAME_RULES``), or None."""
    return next((rule.what for rule in NAME_RULES if rule.matches(rel_path)), None)


# ---- contents ------------------------------------------------------------------------------------------
# What a random token body holds and an identifier or a word rarely does: upper and lower case letters,
# digits. Letters and digits tell a value such as ``hf_localtoken_9c1f`` from ``hf_your_token_here``.
_UPPER, _LOWER, _DIGIT, _LETTER = (re.compile(p) for p in (rb"[A-Z]", rb"[a-z]", rb"[0-9]", rb"[A-Za-z]"))
_BEFORE, _AFTER = 96, 512  # the window around an anchor that a rule's regex is checked in


@dataclass(frozen=True)
class ContentRule:
    """What a secret looks like. ``anchors`` are literals every match contains (found with ``bytes.find``,
    fast on large files); ``regex`` is checked only near each anchor. ``context`` patterns must also occur in
    the same text (a kubeconfig is ``kind: Config`` *and* a user with a token). For prefixes that ordinary
    words can follow, the regex's group 1 (the token body) must also hold each of the ``body_has`` patterns."""

    what: str
    anchors: tuple[bytes, ...]
    regex: re.Pattern[bytes]
    context: tuple[re.Pattern[bytes], ...] = ()
    body_has: tuple[re.Pattern[bytes], ...] = ()

    def find(self, data: bytes) -> int | None:
        """The byte offset of the first match in ``data``, or None."""
        for anchor in self.anchors:
            pos = data.find(anchor)
            while pos != -1:
                match = self.regex.search(data, max(0, pos - _BEFORE), pos + len(anchor) + _AFTER)
                if (
                    match
                    and all(pattern.search(match.group(1)) for pattern in self.body_has)
                    and all(pattern.search(data) for pattern in self.context)
                ):
                    return match.start()
                pos = data.find(anchor, pos + 1)
        return None


def _rule(what: str, anchors: list[bytes], regex: bytes, *context: bytes, body_has=()) -> ContentRule:
    return ContentRule(
        what, tuple(anchors), re.compile(regex), tuple(re.compile(c) for c in context), body_has
    )


CONTENT_RULES: tuple[ContentRule, ...] = (
    # service-account JSON holds a PEM key too: the more specific rule goes first
    _rule(
        "a Google Cloud service-account key", [b'"private_key_id"'], rb'"private_key_id"\s*:\s*"[0-9a-f]{40}"'
    ),
    _rule(
        "a Google Cloud service-account key",
        [b"service_account"],
        rb'"type"\s*:\s*"service_account"',
        rb'"private_key"\s*:\s*"',
    ),
    _rule("a private key", [b"PRIVATE KEY"], rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    _rule("a PuTTY private key", [b"PuTTY-User-Key-File-"], rb"PuTTY-User-Key-File-\d+:", rb"Private-Lines:"),
    _rule("a Hugging Face token", [b"hf_"], rb"hf_([A-Za-z0-9]{30,})", body_has=(_UPPER, _LOWER)),
    _rule(
        "a Hugging Face token",
        [b"HF_TOKEN", b"HUB_TOKEN", b"hf_token", b"HUGGINGFACE_TOKEN"],
        rb"(?i:hf_token|hugging_?face_hub_token|huggingface_token)[\"']?\s*[=:]\s*[\"']?hf_([\w\-]{8,})",
        body_has=(_LETTER, _DIGIT),
    ),
    _rule("an AWS access key id", [b"AKIA", b"ASIA"], rb"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])"),
    _rule(
        "an AWS secret access key",
        [b"aws_secret_access_key", b"AWS_SECRET_ACCESS_KEY"],
        rb"(?i:aws_secret_access_key)[\"']?\s*[=:]\s*[\"']?[A-Za-z0-9/+=]{40}",
    ),
    _rule(
        "a Google OAuth refresh token and client secret",
        [b'"refresh_token"'],
        rb'"refresh_token"\s*:\s*"[^"\s]{10,}"',
        rb'"client_secret"\s*:\s*"[^"\s]{6,}"',
    ),
    _rule("a Google OAuth token", [b"ya29.", b"1//0"], rb"(?:ya29\.|1//0)[0-9A-Za-z_\-]{30,}"),
    _rule("a Google API key", [b"AIza"], rb"AIza[0-9A-Za-z_\-]{35}"),
    _rule(
        "an OpenAI-style API key",
        [b"sk-"],
        rb"(?<![A-Za-z0-9])sk-(?:proj-|svcacct-|admin-|ant-(?:[a-z]+\d+-)?)?([A-Za-z0-9_\-]{32,})",
        body_has=(_UPPER, _LOWER, _DIGIT),
    ),
    _rule("a GitHub token", [b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"], rb"gh[pousr]_[A-Za-z0-9]{36,}"),
    _rule("a GitHub token", [b"github_pat_"], rb"github_pat_[A-Za-z0-9_]{22,}"),
    _rule("a GitLab token", [b"glpat-"], rb"glpat-[A-Za-z0-9_\-]{20,}"),
    _rule("a Slack token", [b"xox"], rb"xox[abprse]-([A-Za-z0-9\-]{10,})", body_has=(_DIGIT,)),
    _rule("a Slack webhook", [b"hooks.slack.com/services/"], rb"hooks\.slack\.com/services/T\w+/B\w+/\w+"),
    _rule("a Stripe secret key", [b"_live_"], rb"(?:sk|rk)_live_[A-Za-z0-9]{20,}"),
    _rule("an npm token", [b"npm_"], rb"npm_([A-Za-z0-9]{36})", body_has=(_UPPER, _LOWER)),
    _rule("a PyPI token", [b"pypi-AgEIcHlwaS5vcmc"], rb"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"),
    _rule(
        "a kubeconfig with user credentials",
        [b"kind: Config", b'kind: "Config"'],
        rb"(?m)^kind:\s*\"?Config\"?\s*$",
        rb"(?m)^apiVersion:\s*\"?v1\"?\s*$",
        rb"(?m)^users:",
        rb"(?m)^\s+(?:token|client-key-data|password|auth-provider):",
    ),
    _rule(
        "Docker registry credentials",
        [b'"auths"'],
        rb'"auths"\s*:\s*\{',
        rb'"(?:auth|identitytoken)"\s*:\s*"[^"\s]{8,}"',
    ),
    _rule("a Kaggle API key", [b'"key"'], rb'"key"\s*:\s*"[0-9a-f]{32}"', rb'"username"\s*:'),
    _rule(
        "an API key (api_key = ...)",
        [b"api_key", b"API_KEY"],
        rb"(?i:api_key)[\"']?\s*[=:]\s*[\"']?(?:local-)?[0-9a-f]{40}(?![0-9a-f])",
    ),
    _rule("a netrc password", [b"machine"], rb"\bmachine\s+\S+\s+login\s+\S+\s+password\s+\S+"),
)


def token_rule(token: str | None) -> tuple[ContentRule, ...]:
    """The access token in use, whatever its format (too short a string would match by chance)."""
    if not token or len(token) < 8:
        return ()
    literal = token.encode()
    return (ContentRule("the access token in use", (literal,), re.compile(re.escape(literal))),)


# ---- encodings -----------------------------------------------------------------------------------------
WEIGHT_SUFFIXES = (
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".onnx",
    ".gguf",
    ".h5",
    ".msgpack",
    ".npy",
    ".npz",
    ".tflite",
)
_BLOCK = 16 << 20
_OVERLAP = 64 << 10  # a secret (or base64 run) split by a block boundary is whole in the next block
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_CODE_UNIT = {"utf-16-le": 2, "utf-16-be": 2, "utf-32-le": 4, "utf-32-be": 4}
# Standard base64 wrapped in lines (as `base64` writes it), or one unwrapped run, standard or URL-safe.
_BASE64_RUN = re.compile(rb"(?:[A-Za-z0-9+/]{60,}\r?\n)+[A-Za-z0-9+/]*={0,2}|[A-Za-z0-9+/_\-]{32,}={0,2}")
_BASE64_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
_BASE64_MASK = bytes(0x41 if c in _BASE64_CHARS else 0x20 for c in range(256))  # run chars -> "A", others " "
_MIN_RUN_MASK = b"A" * 32


def _text_encoding(head: bytes) -> str | None:
    """UTF-16/32 by byte-order mark, or by where the zero bytes of mostly-ASCII text fall."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec
    sample = head[:4096]
    sample = sample[: len(sample) - len(sample) % 4]
    if len(sample) < 16:
        return None
    zeros4 = [sample[i::4].count(0) / len(sample[i::4]) for i in range(4)]
    if min(zeros4[1:]) > 0.9 and zeros4[0] < 0.1:
        return "utf-32-le"
    if min(zeros4[:3]) > 0.9 and zeros4[3] < 0.1:
        return "utf-32-be"
    even, odd = (sample[i::2].count(0) / len(sample[i::2]) for i in (0, 1))
    if odd > 0.6 and even < 0.1:
        return "utf-16-le"
    if even > 0.6 and odd < 0.1:
        return "utf-16-be"
    return None


_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"PK\x03\x04", "zip"))


def _container(magic: bytes) -> str | None:
    if magic.startswith(b"BZh") and magic[3:4].isdigit():  # "BZh" and the block size
        return "bz2"
    return next((kind for prefix, kind in _MAGIC if magic.startswith(prefix)), None)


def _base64_payloads(text: bytes) -> list[tuple[int, bytes]]:
    """(offset, decoded bytes) for each run in ``text`` that decodes as base64. Runs are located with
    ``bytes.translate`` and ``bytes.find`` (a regex alone spends seconds per megabyte-scale block)."""
    mask = text.translate(_BASE64_MASK)
    payloads = []
    pos = mask.find(_MIN_RUN_MASK)
    while pos != -1:
        start = mask.rfind(b" ", 0, pos) + 1
        match = _BASE64_RUN.match(text, start)
        end = match.end() if match else pos + len(_MIN_RUN_MASK)
        decoded = _decode_base64(match.group()) if match else None
        if decoded is not None:
            payloads.append((start, decoded))
        pos = mask.find(_MIN_RUN_MASK, end)
    return payloads


def _decode_base64(run: bytes) -> bytes | None:
    run = re.sub(rb"\s+", b"", run).rstrip(b"=")
    urlsafe = b"-" in run or b"_" in run
    if urlsafe and (b"+" in run or b"/" in run):
        return None
    run = run[: len(run) - (len(run) % 4 == 1)]
    try:
        return base64.b64decode(run + b"=" * (-len(run) % 4), altchars=b"-_" if urlsafe else None)
    except (binascii.Error, ValueError):
        return None


# ---- the scan ------------------------------------------------------------------------------------------
_OPENERS: dict[str, Callable[[BinaryIO], BinaryIO]] = {
    "gzip": lambda fh: gzip.GzipFile(fileobj=fh, mode="rb"),
    "bz2": bz2.BZ2File,
    "xz": lzma.LZMAFile,
}
# What damaged (or merely look-alike) compressed data raises while it is read
_BAD_CONTAINER = (OSError, EOFError, lzma.LZMAError, zlib.error, zipfile.BadZipFile, ValueError)


@dataclass
class _Scan:
    """One file's scan: its rules, whether it decodes what it reads (never weights), its budget left."""

    rules: tuple[ContentRule, ...]
    limits: Limits
    decode: bool = True

    def __post_init__(self):
        self.unpacked_left, self.base64_left = self.limits.max_unpacked_bytes, self.limits.max_base64_runs


_Hit = tuple[str, tuple[str, ...]]  # (what, where)


def _match_rules(scan: _Scan, data: bytes) -> tuple[str, int] | None:
    for rule in scan.rules:
        pos = rule.find(data)
        if pos is not None:
            return rule.what, pos
    return None


def _scan_text(scan: _Scan, data: bytes, base: int, encoding: str | None, depth: int, where) -> _Hit | None:
    """One block: the rules on the bytes, on the decoded text, then inside its base64 runs."""
    found = _match_rules(scan, data)
    if found:
        return found[0], where or (f"at byte {base + found[1]}",)
    text = data
    if encoding:
        unit = _CODE_UNIT[encoding]
        text = data[(-base) % unit :].decode(encoding, "replace").encode("utf-8", "replace")
        found = _match_rules(scan, text)
        if found:
            return found[0], (*where, f"in {encoding.upper()} text")
    if not scan.decode or depth >= scan.limits.max_depth:
        return None
    for start, payload in _base64_payloads(text):
        if scan.base64_left <= 0 or scan.unpacked_left <= 0:
            return None
        scan.base64_left -= 1
        label = f"in base64 text at byte {base + start}" if not encoding else "in base64 text"
        hit = _scan_stream(scan, io.BytesIO(payload), depth + 1, (*where, label))
        if hit:
            return hit
    return None


def _scan_blocks(scan: _Scan, fh: BinaryIO, depth: int, where) -> _Hit | None:
    """Read ``fh`` in overlapping blocks; unpacked data (depth > 0) counts against the budget."""
    base, tail, encoding = 0, b"", None
    while True:
        size = _BLOCK if depth == 0 else min(_BLOCK, scan.unpacked_left)
        block = fh.read(size) if size > 0 else b""
        if not block:
            return None
        if depth > 0:
            scan.unpacked_left -= len(block)
        if base == 0 and scan.decode:
            encoding = _text_encoding(block)
        data = tail + block
        hit = _scan_text(scan, data, base - len(tail), encoding, depth, where)
        if hit:
            return hit
        base += len(block)
        tail = data[-_OVERLAP:]


def _scan_zip(scan: _Scan, fh: BinaryIO, depth: int, where) -> _Hit | None:
    with zipfile.ZipFile(fh) as archive:
        for info in archive.infolist()[: scan.limits.max_zip_members]:
            if info.is_dir():
                continue
            label = f"zip member {info.filename}"
            if credential_file := _credential_file(info.filename):
                return credential_file, (*where, f"as {label}")
            if info.flag_bits & 0x1:  # encrypted: nothing readable to scan
                continue
            try:
                with archive.open(info) as member:
                    hit = _scan_stream(scan, member, depth + 1, (*where, f"in {label}"))
            except _BAD_CONTAINER:  # one damaged member: the others are still scanned
                continue
            if hit:
                return hit
    return None


def _scan_stream(scan: _Scan, fh: BinaryIO, depth: int, where: tuple[str, ...]) -> _Hit | None:
    """Unpack what is compressed (bounded), scan the rest as text. ``fh`` must be seekable."""
    magic = fh.read(8)
    fh.seek(0)
    kind = _container(magic) if depth < scan.limits.max_depth else None
    if kind:
        try:
            if kind == "zip":
                return _scan_zip(scan, fh, depth, where)
            with _OPENERS[kind](fh) as unpacked:
                return _scan_stream(scan, unpacked, depth + 1, (*where, f"in {kind} data"))
        except _BAD_CONTAINER:
            fh.seek(0)  # damaged or not really compressed: scan the bytes as they are
    return _scan_blocks(scan, fh, depth, where)


def _safetensors_header(fh: BinaryIO, size: int, limits: Limits) -> bytes | None:
    head = fh.read(8)
    if len(head) < 8:
        return None
    (length,) = struct.unpack("<Q", head)
    if length > min(limits.max_safetensors_header, size - 8):
        return None
    header = fh.read(length)
    return header if header.lstrip().startswith(b"{") else None


def scan_file(
    folder: Path, rel_path: str, rules: tuple[ContentRule, ...] = CONTENT_RULES, limits: Limits = Limits()
) -> Finding | None:
    """The first reason ``folder / rel_path`` must not be published, or None."""
    if credential_file := _credential_file(rel_path):
        return Finding(rel_path, credential_file)
    path = folder / rel_path
    scan = _Scan(rules, limits, decode=path.suffix not in WEIGHT_SUFFIXES)
    with open(path, "rb") as fh:
        if path.suffix == ".safetensors" and (header := _safetensors_header(fh, path.stat().st_size, limits)):
            hit = _scan_stream(scan, io.BytesIO(header), 0, ("in the safetensors header",))
        else:
            fh.seek(0)
            hit = _scan_stream(scan, fh, 0, ()) if scan.decode else _scan_blocks(scan, fh, 0, ())
    return Finding(rel_path, *hit) if hit else None


def scan_bytes(
    data: bytes, label: str, token: str | None = None, limits: Limits = Limits()
) -> Finding | None:
    """Scan content that is not a file yet (a rendered card), reported as ``label``."""
    hit = _scan_stream(_Scan(CONTENT_RULES + token_rule(token), limits), io.BytesIO(data), 0, ())
    return Finding(label, *hit) if hit else None


def scan_files(
    folder: Path, rel_paths: list[str], token: str | None = None, limits: Limits = Limits()
) -> list[Finding]:
    """One finding for each file in ``rel_paths`` that holds (or is) a credential, in the given order."""
    rules = CONTENT_RULES + token_rule(token)
    return [f for f in (scan_file(folder, rel, rules, limits) for rel in rel_paths) if f is not None]

"""What a client sends, read into checked values: JSON fields, the ndjson commit (into storage operations),
sizes and ranges; anything malformed is a ``BadRequest`` naming the field, never a 500. A commit line's one
string over 64 KiB (a file's base64 content) is decoded into the blob store as it arrives and replaced by a
placeholder: memory holds ``max_line`` bytes of JSON and one body piece, whatever the file's size."""

from __future__ import annotations

import binascii
import contextlib
import json
import re
import secrets
from collections.abc import Iterator

from .errors import BadRequest, HubError, PayloadTooLarge, Unprocessable
from .index import FileEntry, looks_like_lfs
from .names import validate_path
from .storage import AddFile, BlobWriter, DeleteFile, DeleteFolder, Storage, StoredBlob

STREAM_STRINGS_OVER = 64 << 10  # in a commit line, a string longer than this is streamed
_PLACEHOLDER = f"streamed-content-{secrets.token_hex(16)}"  # what a streamed string is replaced by
_KINDS = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "an object"}
_REQUIRED = object()


def parse_json(raw: bytes, what: str):
    try:
        return json.loads(raw) if raw.strip() else {}
    except RecursionError:
        raise BadRequest(f"{what} is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise BadRequest(f"{what} is not valid JSON: {e}") from None


class Fields:
    """Typed access to one JSON object, with errors that say where: ``Fields(obj, "commit header")``."""

    def __init__(self, obj, where: str):
        if not isinstance(obj, dict):
            raise BadRequest(f"{where} must be a JSON object, got {type(obj).__name__}")
        self.obj, self.where = obj, where

    def get(self, key: str, kind: type = str, default=_REQUIRED):
        """The value of ``key``, of type ``kind`` (an ``int`` is never negative); ``default`` when it is absent
        or null, a ``BadRequest`` when no default is given."""
        value = self.obj.get(key)
        if value is None:
            if default is _REQUIRED:
                raise BadRequest(f"{self.where}: '{key}' is required")
            return default
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise BadRequest(f"{self.where}: '{key}' must be {_KINDS[kind]}, got {type(value).__name__}")
        if kind is int and value < 0:
            raise BadRequest(f"{self.where}: '{key}' must not be negative")
        return value


def base64_field(text: str | bytes, where: str) -> bytes:
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where} is not valid base64") from None


def parse_size(text: str | None) -> int | None:
    """A non-negative decimal of at most 19 ASCII digits, or None (``int()`` also takes '²' and '٣')."""
    return int(text) if isinstance(text, str) and re.fullmatch(r"[0-9]{1,19}", text) else None


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """The (first, last) byte a ``Range`` header asks for, or None to send the whole file (no header, several
    ranges, not ``bytes=``, last before first: RFC 9110 says to ignore those). Past the end is a 416."""
    m = re.fullmatch(r"bytes=([0-9]*)-([0-9]*)", header.strip())
    if m is None or not (m[1] or m[2]):
        return None
    # More than 19 digits is past any file's end (and int() of 5,000 digits is refused).
    first, last = (int(x) if len(x) <= 19 else 1 << 64 for x in (m[1] or "0", m[2] or "0"))
    if not m[1]:  # a suffix: the last N bytes (none at all: a 416)
        first, last = max(0, size - last), size - 1
    elif not m[2]:
        last = size - 1
    elif last < first:
        return None
    if first >= size:
        raise HubError(
            f"Range {header.strip()[:40]!r} is outside the file's {size} bytes",
            status=416,
            code="RangeNotSatisfiable",
            headers={"Content-Range": f"bytes */{size}"},
        )
    return first, min(last, size - 1)


# ---- the ndjson commit, streamed ------------------------------------------------------------------------
_PLAIN_TEXT = re.compile(rb'[^"\\\n]*')  # one character class: no backtracking stack, whatever the length
_ESCAPE = re.compile(rb'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
_STRING_OR_LINE_END = re.compile(rb'["\n]')


class _Base64Stream:
    """Base64 text in, decoded bytes out to a ``BlobWriter``, at most three characters held back."""

    def __init__(self, writer: BlobWriter, where: str):
        self.writer, self._where = writer, where
        self._tail, self._padded = b"", False

    def _invalid(self, why: str) -> BadRequest:
        return BadRequest(f"{self._where}: a value this long must be a file's base64 content, and {why}")

    def feed(self, text: bytes) -> None:
        if self._padded and text:
            raise self._invalid("it goes on after its '=' padding")
        if b"\\" in text:  # JSON may escape any character
            try:
                text = json.loads(b'"' + text + b'"').encode("ascii")
            except UnicodeEncodeError:
                raise self._invalid("it is not") from None
        data = self._tail + text
        cut = len(data) - len(data) % 4
        self._tail = data[cut:]
        try:
            self.writer.write(binascii.a2b_base64(data[:cut], strict_mode=True))
        except binascii.Error:
            raise self._invalid("it is not valid base64") from None
        self._padded = data[:cut].endswith(b"=")

    def finish(self) -> StoredBlob:
        if self._tail:
            raise self._invalid("its length is not a multiple of 4")
        return self.writer.finish()


def _string_text_end(data: bytes, pos: int) -> int:
    """Where string text from ``pos`` stops: at a quote, a newline, an invalid or cut escape, or the end."""
    while True:
        pos = _PLAIN_TEXT.match(data, pos).end()
        escape = _ESCAPE.match(data, pos)
        if escape is None:
            return pos
        pos = escape.end()


def commit_lines(
    chunks: Iterator[bytes], max_line: int, storage: Storage
) -> Iterator[tuple[bytes, StoredBlob | None]]:
    """The lines of an ndjson body, each with the blob its one long string went to as it arrived."""
    line = bytearray()  # the current line's JSON, a streamed string replaced by its placeholder
    string: bytearray | None = None  # the current string's text while it is short, when inside one
    stream: _Base64Stream | None = None  # the current string's decoder once it is long
    blob, number, data = None, 1, b""

    def keep(text: bytes) -> None:
        line.extend(text)
        if len(line) > max_line:
            raise PayloadTooLarge(
                f"commit line {number} is longer than {max_line} bytes without counting a file's content"
            )

    try:
        for chunk in chunks:
            data, pos = (data + chunk if data else chunk), 0
            while pos < len(data):
                if string is None and stream is None:  # between strings: up to a quote or the line's end
                    stop = _STRING_OR_LINE_END.search(data, pos)
                    if stop is None:
                        keep(data[pos:])
                        pos = len(data)
                    elif data[stop.start()] == ord("\n"):
                        keep(data[pos : stop.start()])
                        yield bytes(line), blob
                        line, blob, number, pos = bytearray(), None, number + 1, stop.end()
                    else:
                        keep(data[pos : stop.end()])
                        string, pos = bytearray(), stop.end()
                    continue
                end = _string_text_end(data, pos)
                text, pos = data[pos:end], end
                if stream is not None:
                    stream.feed(text)
                else:
                    string += text
                    if len(string) > STREAM_STRINGS_OVER:
                        if blob is not None:
                            raise PayloadTooLarge(
                                f"commit line {number}: only one value in a line may be longer than 64 KiB"
                            )
                        stream = _Base64Stream(BlobWriter(storage), f"commit line {number}")
                        stream.feed(bytes(string))
                        string = None
                if pos == len(data) or data[pos] == ord("\\") and len(data) - pos < 6:
                    break  # wait for the rest of the string (or of an escape cut in two)
                if data[pos] != ord('"'):
                    raise BadRequest(f"commit line {number} ends inside a string, or has an invalid escape")
                pos += 1
                if stream is not None:
                    blob, stream = stream.finish(), None
                    keep(_PLACEHOLDER.encode() + b'"')
                else:
                    keep(bytes(string) + b'"')
                string = None
            data = data[pos:]
        if string is not None or stream is not None or data:
            raise BadRequest(f"commit line {number} ends inside a string")
        if line:
            yield bytes(line), blob
    finally:
        if stream is not None:
            stream.writer.close()


def _inline_file(v: Fields, storage, streamed: StoredBlob | None) -> AddFile:
    """A ``file`` line: base64 content inside the commit, short (decoded here) or already streamed to disk."""
    if v.get("encoding", default="base64") != "base64":
        raise BadRequest(f"{v.where}: only base64 file content is supported")
    path = validate_path(v.get("path"))
    if streamed is None:
        data = base64_field(v.get("content"), f"{v.where}.content")
        streamed = storage.put_bytes(data), len(data), data[:8000]
    sha256, size, sample = streamed
    return AddFile(FileEntry(path, sha256, size, storage.git_oid(sha256), looks_like_lfs(path, size, sample)))


def _lfs_file(v: Fields, storage, streamed) -> AddFile:
    """An ``lfsFile`` line: content uploaded before, named by sha256 (``size`` is absent for copies)."""
    path, oid, size = validate_path(v.get("path")), v.get("oid"), v.get("size", int, None)
    if not storage.has_blob(oid):
        raise Unprocessable(f"LFS object for {path} (oid {oid}) was never uploaded")
    stored = storage.blob_path(oid).stat().st_size
    if size not in (None, stored):
        raise Unprocessable(f"Size mismatch for {path}: {size} != {stored}", code="BadOid")
    return AddFile(FileEntry(path, oid, stored, storage.git_oid(oid), True))


_LINE_PARSERS = {  # the header is (summary, description, parent commit); the storage checks the parent
    "header": lambda v, storage, streamed: (
        v.get("summary", default=None) or "update",
        v.get("description", default=""),
        v.get("parentCommit", default=None),
    ),
    "file": _inline_file,
    "lfsFile": _lfs_file,
    "deletedFile": lambda v, storage, streamed: DeleteFile(v.get("path")),
    "deletedFolder": lambda v, storage, streamed: DeleteFolder(v.get("path")),
}


def parse_commit_line(raw: tuple[bytes, StoredBlob | None], number: int, storage):
    """The header or the storage operation of one commit line (its text, and the blob of its long string)."""
    (text, blob), where = raw, f"commit line {number}"
    line = Fields(parse_json(text, where), where)
    key = line.get("key")
    if key not in _LINE_PARSERS:
        raise BadRequest(f"{where}: unsupported operation {key!r}; one of {sorted(_LINE_PARSERS)}")
    value = Fields(line.get("value", dict), f"{where}.value")
    # The one long string of a line is streamed: it must have been the file's content.
    content = key == "file" and value.obj.get("content") == _PLACEHOLDER
    if blob is not None and not (content and text.count(_PLACEHOLDER.encode()) == 1):
        raise BadRequest(f"{where}: only a file's base64 content may be longer than 64 KiB")
    return _LINE_PARSERS[key](value, storage, blob)


def read_commit(chunks, storage, max_line: int, max_operations: int) -> tuple[tuple, list]:
    """The header and the storage operations of an ndjson commit body."""
    header, operations = None, []
    with contextlib.closing(commit_lines(chunks, max_line, storage)) as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw[0].strip():
                continue
            line = parse_commit_line(raw, number, storage)
            if isinstance(line, tuple):
                if header is not None or operations:
                    raise BadRequest(f"commit line {number}: the header must be the first line, once")
                header = line
            elif len(operations) < max_operations:
                operations.append(line)
            else:
                raise PayloadTooLarge(
                    f"A commit holds at most {max_operations} operations", code="TooManyFiles"
                )
    if header is None:
        raise BadRequest("The commit has no header line")
    return header, operations

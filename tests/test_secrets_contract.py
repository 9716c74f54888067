"""The secret scan's building blocks, case by case: what a finding says, the name rules' matching, the
token rule, text encodings, containers, base64 runs, safetensors headers and the decoding budget.

Written to kill the mutants of ``hub_cards/secrets.py`` (see docs/testing.md); the catalogue of credential
formats and files is in ``tests/test_secret_scan.py``.
"""

import base64
import bz2
import gzip
import io
import json
import lzma
import struct
import zipfile

import pytest

from briskbert.hub_cards.secrets import (
    CONTENT_RULES,
    NAME_RULES,
    Finding,
    Limits,
    NameRule,
    scan_bytes,
    scan_file,
    scan_files,
    token_rule,
)

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"  # a well-formed token (mixed case, 32 characters)


def test_a_finding_says_the_file_what_and_where_never_the_secret():
    assert Finding("a/b.md", "a Hugging Face token", ("in gzip data", "at byte 3")).describe() == (
        "a/b.md (a Hugging Face token, in gzip data, at byte 3)"
    )
    assert Finding(".env", "an environment file").describe() == ".env (an environment file, by its name)"


def test_default_limits():
    limits = Limits()
    assert (limits.max_depth, limits.max_base64_runs, limits.max_zip_members) == (4, 4096, 1000)
    assert (
        limits.max_unpacked_bytes == 256 * 1024 * 1024 and limits.max_safetensors_header == 100 * 1024 * 1024
    )


def test_name_rules_match_the_file_name_or_as_many_trailing_folders_case_insensitively():
    rule = NameRule("x", ("*.pem", ".aws/credentials"), unless=("public*.pem",))
    assert rule.matches("KEYS/server.PEM")
    assert rule.matches("home/.aws/credentials") and rule.matches(".AWS/Credentials")
    assert not rule.matches("credentials") and not rule.matches("aws/credentials")
    assert not rule.matches("keys/public_server.pem")  # the look-alike
    assert not rule.matches("server.pem.txt")
    what = {r.what for r in NAME_RULES if r.matches("deploy/.ssh/id_ed25519")}
    assert what == {"an SSH private key"}
    assert not any(r.matches("deploy/.ssh/id_ed25519.pub") for r in NAME_RULES)


def test_the_token_in_use_is_a_rule_only_when_long_enough():
    assert token_rule(None) == () and token_rule("") == () and token_rule("short12") == ()
    (rule,) = token_rule("abc.def+12")  # any format, matched literally
    assert rule.what == "the access token in use"
    assert rule.find(b"xx abc.def+12 yy") == 3 and rule.find(b"abcXdef+12") is None


def test_scan_bytes_finds_the_token_in_use_and_the_rules(tmp_path):
    assert scan_bytes(b"nothing here", "README.md") is None
    found = scan_bytes(f"see {HF}".encode(), "README.md")
    assert found == Finding("README.md", "a Hugging Face token", ("at byte 4",))
    found = scan_bytes(b"token: my-own-secret-value", "README.md", token="my-own-secret-value")
    assert found == Finding("README.md", "the access token in use", ("at byte 7",))


def test_scan_files_reports_in_order_and_only_files_with_findings(tmp_path):
    (tmp_path / "a.md").write_text(f"token {HF}")
    (tmp_path / "b.md").write_text("fine")
    (tmp_path / ".env").write_text("")
    (tmp_path / "c.txt").write_text("uses sec-ret-123456 here")
    findings = scan_files(tmp_path, ["c.txt", "b.md", "a.md", ".env"], token="sec-ret-123456")
    assert [f.path for f in findings] == ["c.txt", "a.md", ".env"]
    assert findings[2].what == "an environment file" and findings[2].where == ()
    assert scan_files(tmp_path, ["c.txt"]) == []  # without the token, it is ordinary text


def utf(text: str, codec: str, bom: bool) -> bytes:
    data = text.encode(codec)
    marks = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff", "utf-32-le": b"\xff\xfe\x00\x00"}
    marks["utf-32-be"] = b"\x00\x00\xfe\xff"
    return (marks[codec] if bom else b"") + data


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("bom", [True, False])
def test_utf16_and_utf32_text_is_decoded_with_or_without_a_byte_order_mark(codec, bom):
    text = "A note about the model, written on Windows.\n" * 3 + f"token={HF}\n"
    found = scan_bytes(utf(text, codec, bom), "notes.txt")
    assert found is not None and found.what == "a Hugging Face token"
    assert found.where == (f"in {codec.upper()} text",)


def test_short_or_binary_data_is_not_taken_for_utf16():
    assert scan_bytes(utf("hi", "utf-16-le", False), "x") is None
    binary = bytes(range(256)) * 4
    assert scan_bytes(binary, "x") is None


@pytest.mark.parametrize(
    "pack, label",
    [
        (gzip.compress, "in gzip data"),
        (bz2.compress, "in bz2 data"),
        (lzma.compress, "in xz data"),
    ],
)
def test_compressed_data_is_unpacked(pack, label):
    found = scan_bytes(pack(f"secret {HF}".encode()), "blob")
    assert found == Finding("blob", "a Hugging Face token", (label,))


def test_look_alike_magic_bytes_are_scanned_as_they_are():
    fake_gzip = b"\x1f\x8b not really gzip " + HF.encode()
    assert scan_bytes(fake_gzip, "x").what == "a Hugging Face token"
    assert scan_bytes(b"BZhx " + HF.encode(), "x").where == ("at byte 5",)  # BZh + a non-digit: not bz2


def test_zip_members_are_scanned_by_name_and_content_and_directories_skipped():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("folder/", "")
        archive.writestr("folder/readme.txt", "fine")
        archive.writestr("folder/notes.txt", f"token {HF}")
    found = scan_bytes(buffer.getvalue(), "bundle.zip")
    assert found == Finding("bundle.zip", "a Hugging Face token", ("in zip member folder/notes.txt",))


def test_zip_member_limit_is_respected():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.txt", "fine")
        archive.writestr("b.txt", f"token {HF}")
    assert scan_bytes(buffer.getvalue(), "z", limits=Limits(max_zip_members=1)) is None
    assert scan_bytes(buffer.getvalue(), "z", limits=Limits(max_zip_members=2)) is not None


def test_base64_runs_are_decoded_standard_url_safe_and_wrapped():
    payload = f"the token is {HF} ok".encode()
    standard = base64.b64encode(payload)
    found = scan_bytes(b"data: " + standard, "x")
    assert found == Finding("x", "a Hugging Face token", ("in base64 text at byte 6",))
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff" + payload).rstrip(b"=")
    assert b"-" in urlsafe or b"_" in urlsafe
    assert scan_bytes(b"x=" + urlsafe, "x").what == "a Hugging Face token"
    wrapped = base64.encodebytes(b"." * 50 + payload)  # 76-character lines
    assert b"\n" in wrapped.strip() and scan_bytes(wrapped, "x").what == "a Hugging Face token"


def test_base64_depth_and_run_limits():
    payload = f"token {HF}".encode()
    twice = base64.b64encode(base64.b64encode(payload))
    assert scan_bytes(twice, "x").where == ("in base64 text at byte 0", "in base64 text at byte 0")
    assert scan_bytes(twice, "x", limits=Limits(max_depth=1)) is None
    assert scan_bytes(twice, "x", limits=Limits(max_depth=2)) is not None
    assert scan_bytes(base64.b64encode(payload), "x", limits=Limits(max_base64_runs=0)) is None
    filler = base64.b64encode(b"nothing to see here at all, really")
    data = filler + b" " + base64.b64encode(payload)
    assert scan_bytes(data, "x", limits=Limits(max_base64_runs=1)) is None
    assert scan_bytes(data, "x", limits=Limits(max_base64_runs=2)) is not None


def test_unpacked_bytes_are_bounded():
    data = gzip.compress(b"." * 5000 + f"token {HF}".encode())
    assert scan_bytes(data, "x", limits=Limits(max_unpacked_bytes=4000)) is None
    assert scan_bytes(data, "x", limits=Limits(max_unpacked_bytes=6000)) is not None


def safetensors(header: dict, body: bytes = b"\x00" * 64) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def test_safetensors_are_scanned_in_their_header_only(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(safetensors({"__metadata__": {"note": HF}}))
    assert scan_file(tmp_path, "model.safetensors") == Finding(
        "model.safetensors", "a Hugging Face token", ("in the safetensors header",)
    )
    (tmp_path / "clean.safetensors").write_bytes(safetensors({"__metadata__": {}}, body=HF.encode()))
    assert scan_file(tmp_path, "clean.safetensors") is None  # tensor bytes are not text


def test_a_file_that_only_looks_like_safetensors_is_scanned_whole(tmp_path):
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x02" + HF.encode())
    assert scan_file(tmp_path, "short.safetensors").what == "a Hugging Face token"
    too_long = struct.pack("<Q", 10**9) + b"{" + HF.encode()
    (tmp_path / "long.safetensors").write_bytes(too_long)
    assert scan_file(tmp_path, "long.safetensors").where == ("at byte 9",)
    not_json = struct.pack("<Q", 40) + b"[" + HF.encode() + b" " * 8
    (tmp_path / "list.safetensors").write_bytes(not_json)
    assert scan_file(tmp_path, "list.safetensors").where == ("at byte 9",)


def test_weights_are_searched_raw_never_decoded(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"\x00" * 10 + HF.encode())
    assert scan_file(tmp_path, "model.bin") == Finding("model.bin", "a Hugging Face token", ("at byte 10",))
    (tmp_path / "encoded.bin").write_bytes(base64.b64encode(f"token {HF}".encode()))
    assert scan_file(tmp_path, "encoded.bin") is None
    (tmp_path / "packed.pt").write_bytes(gzip.compress(HF.encode()))
    assert scan_file(tmp_path, "packed.pt") is None


def test_content_rules_report_the_first_match_offset():
    rule = next(r for r in CONTENT_RULES if r.what == "an AWS access key id")
    assert rule.find(b"id=AKIAABCDEFGHIJKLMNOP;") == 3
    assert rule.find(b"AKIAABCDEFGHIJKLMNOPQ") is None  # too long: not a key id
    assert rule.find(b"xAKIA AKIAABCDEFGHIJKLMNOP") == 6  # the second anchor is the key

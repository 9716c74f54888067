"""The publisher: folder checks, file selection, one-commit pushes, tags, verification, faults, secrecy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from hub_fixtures import ROOT, TOKEN, client_env, make_briskbert

from briskbert.hub_cards import publishing
from briskbert.hub_cards.model_files import IncompleteModelFolder, OutsideTheFolder, collect_files
from briskbert.hub_cards.publishing import PublishError, SecretsFound
from briskbert.hub_cards.settings import PublishSettings
from briskbert.hub_server import BackgroundHub

MODEL_FILES = set(
    "README.md config.json configuration_briskbert.py model.safetensors modeling_briskbert.py "
    "pipeline_question_answering.py tokenization_briskbert.py tokenizer.json tokenizer_config.json vocab.txt".split()
)


NOWHERE = "http://127.0.0.1:9"  # a closed port: a publish that contacts it fails with another error


def publish(folder, repo_id, *, endpoint=None, log=lambda *_: None, token=TOKEN, **settings):
    """The publisher, with its settings given as keywords (the test token's unless another is given)."""
    settings = PublishSettings(str(folder), repo_id, token=token, **settings)
    return publishing.publish(settings, endpoint=endpoint, log=log)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_briskbert(tmp_path_factory.mktemp("models") / "sst2")


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    """The same model with other weights."""
    return make_briskbert(tmp_path_factory.mktemp("models") / "changed", extra_files=False, seed=2)


def assert_no_token_anywhere(*texts, data_dir=None):
    for text in texts:
        assert TOKEN not in text
    if data_dir is not None:
        for p in data_dir.rglob("*"):
            if p.is_file():
                assert TOKEN.encode() not in p.read_bytes(), p


def test_incomplete_folder_is_refused_with_everything_it_lacks(tmp_path):
    auto_map = {"AutoModelForMaskedLM": "modeling_briskbert.BriskBertForMaskedLM", "AutoConfig": "x.Config"}
    config = {"model_type": "briskbert", "architectures": ["BriskBertForMaskedLM"], "auto_map": auto_map}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(IncompleteModelFolder) as e:
        collect_files(tmp_path)
    for what in ("x.py", "modeling_briskbert.py", "model.safetensors", "save_pretrained", "tokenizer"):
        assert what in str(e.value)


def test_dry_run_lists_the_model_files_and_the_card_and_what_is_left_out_once_each(folder, tmp_path):
    """The folder's own README.md is replaced by the card, said once; the rest is left out with its reason."""
    copy = shutil.copytree(folder, tmp_path / "readme")
    (copy / "README.md").write_text("# my own notes\n")
    (copy / "notes.json").write_text("{}")
    lines = []  # the endpoint is a closed port: a dry run must not touch it
    result = publish(copy, "testuser/sst2", tag="v1", dry_run=True, endpoint=NOWHERE, log=lines.append)
    out = "\n".join(lines)
    # the model files, plus any further remote-code module the model file imports
    assert MODEL_FILES <= set(result.files)
    assert all(f in MODEL_FILES or f.endswith(".py") for f in result.files)
    assert f"  README.md  ({len(result.card.encode()):,} bytes, the card shown below)" in lines
    assert "Not uploaded: the folder's own README.md (the card shown below takes its place)" in lines
    assert "(include_training_state uploads it): checkpoint-10/model.safetensors, optimizer.pt" in lines[-4]
    assert lines[-3].endswith("(include uploads them): .env, logs/train.log, notes.json, training_facts.json")
    assert out.count("README.md") == 3 + result.card.count("README.md")  # the listing, the note, the header
    assert lines[-1].startswith("---- README.md ----") and 'revision = "v1"' in out
    assert result.commit_id is None
    assert_no_token_anywhere(out, result.card)
    # weights above max_shard_size are uploaded as shards and their index
    sharded = publish(folder, "testuser/sst2", dry_run=True, max_shard_size=20_000).files
    assert "model.safetensors" not in sharded and "model.safetensors.index.json" in sharded
    assert len([f for f in sharded if f.startswith("model-")]) > 1


def test_a_token_the_rendered_card_would_show_blocks_the_upload(folder, tmp_path):
    copy = shutil.copytree(folder, tmp_path / "leaky")
    facts = json.loads((copy / "training_facts.json").read_text())
    facts["description"] = TOKEN  # shown on the card
    (copy / "training_facts.json").write_text(json.dumps(facts))
    with pytest.raises(SecretsFound) as e:
        publish(copy, "testuser/leaky", dry_run=True)
    message = str(e.value)
    assert "README.md (the rendered card) (the access token in use" in message and TOKEN not in message


@pytest.mark.slow  # ~30 s: the user journey through the command line with verification in a clean process;
# then, in process over HTTP: a no-op re-publish and a private repo
def test_publish_end_to_end_with_xet_client(folder, changed, tmp_path):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    with BackgroundHub(tmp_path / "data", TOKEN, log_file=str(tmp_path / "server.log")) as h:
        script = str(ROOT / "scripts" / "publish.py")
        argv = [script, "--model_dir", str(folder), "--repo_id", "testuser/sst2", "--tag", "v1"]
        env = client_env(h.url, tmp_path / "home")
        run = dict(env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        proc = subprocess.run([sys.executable, *argv], **run)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert "Verified: transformers_modules.testuser.sst2." in out
        assert "BriskBertForSequenceClassification" in out
        api = HfApi(endpoint=h.url, token=TOKEN)
        v1 = api.repo_info("testuser/sst2").sha
        expected = publish(folder, "testuser/sst2", dry_run=True).files
        assert sorted(api.list_repo_files("testuser/sst2")) == sorted([*expected, ".gitattributes"])
        assert len(api.list_repo_commits("testuser/sst2")) == 2
        assert f"{h.url}/testuser/sst2/commit/{v1}" in out

        lines = []
        opts = dict(endpoint=h.url, no_verify=True, log=lines.append)
        assert not publish(folder, "testuser/sst2", tag="v1", **opts).new_commit
        assert "No changes; already published at" in "\n".join(lines)
        publish(changed, "testuser/private", private=True, **opts)
        with pytest.raises(RepositoryNotFoundError):  # anonymous
            HfApi(endpoint=h.url, token=False).list_repo_files("testuser/private")
    server_log = (tmp_path / "server.log").read_text()
    assert_no_token_anywhere(out, "\n".join(lines), server_log, data_dir=tmp_path / "data")


@pytest.mark.filterwarnings("ignore:Use .content=<...>. to upload raw bytes/text content.:DeprecationWarning")
def test_publish_through_the_lfs_api(folder, lfs_hub, monkeypatch):
    """LFS uploads with Xet off; a re-run compares by sha256; a 507 shows in one line and is not retried."""
    from hub_fixtures import FullDisk
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    opts = dict(endpoint=lfs_hub.url, no_verify=True)
    assert publish(folder, "testuser/sst2", tag="v1", **opts).new_commit
    assert any(p.startswith("/lfs-upload/") for _, p, _ in lfs_hub.server.request_log)
    again = publish(folder, "testuser/sst2", tag="v1", **opts)
    assert not again.new_commit and again.tagged
    FullDisk(monkeypatch).full = True
    with pytest.raises(PublishError) as e:
        publish(folder, "testuser/sst2", tag="v2", **opts)  # a changed card: a new commit
    message = str(e.value)
    assert "commit failed: the Hub answered 507: The Hub's storage is full" in message and "\n" not in message
    assert message.endswith(f"testuser/sst2@main is unchanged at commit {again.commit_id}.")
    assert [status for _, _, status in lfs_hub.server.request_log].count(507) == 1  # not retried
    assert head(lfs_hub) == again.commit_id


def head(hub_, repo="testuser/sst2"):
    return hub_.server.storage.resolve("model", repo, "main")


@pytest.mark.parametrize("how", ["412", "500 after the other commit", "answer lost after our commit"])
def test_a_failed_commit_says_where_the_branch_is_now(folder, changed, hub, monkeypatch, how):
    """A real race: another client commits over HTTP between this publish reading the head and committing."""
    import httpx2
    from huggingface_hub import HfApi

    opts = dict(endpoint=hub.url, no_verify=True)
    first = publish(folder, "testuser/sst2", **opts)
    other, create_commit, calls = HfApi(endpoint=hub.url, token=TOKEN), HfApi.create_commit, []

    def create_commit_in_a_race(self, *args, **kwargs):
        calls.append(kwargs.get("parent_commit"))
        if len(calls) > 1:  # the other writer's own commit
            return create_commit(self, *args, **kwargs)
        if how == "answer lost after our commit":
            create_commit(self, *args, **kwargs)
            raise httpx2.ReadError("connection reset")
        other.upload_file(path_or_fileobj=b"notes", path_in_repo="NOTES.md", repo_id="testuser/sst2")
        if how.startswith("500"):
            hub.set_fault({"step": "commit", "kind": "500", "times": 99})
        return create_commit(self, *args, **kwargs)

    monkeypatch.setattr(HfApi, "create_commit", create_commit_in_a_race)
    with pytest.raises(PublishError) as e:
        publish(changed, "testuser/sst2", **opts)
    now, message = head(hub), str(e.value)
    assert now != first.commit_id and "unchanged" not in message and TOKEN not in message
    if how.startswith("answer"):
        assert f"main moved to {now}, which holds exactly these files" in message
        assert "re-run to verify" in message
        return
    assert "NOTES.md" in hub.server.storage.files("model", "testuser/sst2", now)  # the other writer's commit
    moved = f"main moved to {now} meanwhile (this publish started from {first.commit_id})"
    assert f"{moved}; nothing was published; re-run to publish on top of it." in message
    if how == "412":
        assert message.startswith("commit failed: the Hub answered 412: ")
    hub.set_fault(None)
    monkeypatch.undo()
    again = publish(changed, "testuser/sst2", **opts)  # the re-run publishes on top of the other commit
    assert hub.server.storage.commit_object("model", "testuser/sst2", again.commit_id)["parent"] == now


def test_publishing_to_a_branch_and_refusing_to_move_a_tag(folder, changed, hub):
    opts = dict(endpoint=hub.url, no_verify=True)
    main = publish(folder, "testuser/sst2", tag="v1", **opts)
    dev = publish(folder, "testuser/sst2", revision="dev", tag="dev-1", **opts)
    refs = hub.server.storage.refs("model", "testuser/sst2")
    assert refs["branches"] == {"main": main.commit_id, "dev": dev.commit_id}
    assert main.commit_id != dev.commit_id
    with pytest.raises(PublishError, match="'v1' already names commit .* Nothing was published"):
        publish(folder, "testuser/sst2", revision="dev", tag="v1", commit_message="x", **opts)
    with pytest.raises(PublishError, match="'v1' already names commit"):
        publish(changed, "testuser/sst2", tag="v1", **opts)
    assert hub.server.storage.refs("model", "testuser/sst2") == refs  # refused before any write


def test_main_only_ever_holds_verified_content(folder, hub, monkeypatch, tmp_path):
    """Main only moves to files verified on a staging branch from its head, unchanged on disk meanwhile."""
    from huggingface_hub import HfApi

    hub.server.storage.create_repo("model", "testuser/sst2", private=False, author="testuser")
    before, client, verified, lines = head(hub), HfApi(endpoint=hub.url, token=TOKEN), [], []
    opts = dict(endpoint=hub.url)

    def fails(repo_id, commit_id, **_):
        verified.append(hub.server.storage.files("model", repo_id, commit_id))
        assert head(hub) == before  # main has not moved while its next content is being verified
        (staging,) = [b for b in client.list_repo_refs(repo_id).branches if b.name != "main"]
        assert staging.target_commit == commit_id
        return {"ok": False, "error": "broken"}

    monkeypatch.setattr(publishing, "verify_commit", fails)
    failed = publish(folder, "testuser/sst2", tag="v1", log=lines.append, **opts)
    assert not failed.verified and not failed.tagged and failed.commit_id is None
    assert "README.md" in verified[0]
    staged = f"Not published: testuser/sst2@main stays at {before}; the staged commit failed verification."
    assert staged in lines
    copy = shutil.copytree(folder, tmp_path / "changing")

    def passes_while_a_run_saves_again(repo_id, commit_id, **_):
        (copy / "vocab.txt").write_text((copy / "vocab.txt").read_text() + "newword\n")
        return {"ok": True}

    monkeypatch.setattr(publishing, "verify_commit", passes_while_a_run_saves_again)
    with pytest.raises(PublishError, match="The files changed on disk while [0-9a-f]{40} was verified"):
        publish(copy, "testuser/sst2", **opts)
    assert hub.server.storage.refs("model", "testuser/sst2") == {"branches": {"main": before}, "tags": {}}

    def passes(repo_id, commit_id, **_):
        verified.append(hub.server.storage.files("model", repo_id, commit_id))
        return {"ok": True, **dict.fromkeys(("model_class", "tokenizer_class", "pipeline_output"), "x")}

    monkeypatch.setattr(publishing, "verify_commit", passes)
    fixed = publish(folder, "testuser/sst2", tag="v1", **opts)  # the re-run publishes
    assert fixed.tagged and fixed.new_commit
    refs = {"branches": {"main": fixed.commit_id}, "tags": {"v1": fixed.commit_id}}
    assert hub.server.storage.refs("model", "testuser/sst2") == refs
    on_main = hub.server.storage.files("model", "testuser/sst2", fixed.commit_id)
    assert {p: e.sha256 for p, e in on_main.items()} == {p: e.sha256 for p, e in verified[-1].items()}
    assert hub.server.storage.commit_object("model", "testuser/sst2", fixed.commit_id)["parent"] == before
    again = publish(folder, "testuser/sst2", tag="v1", **opts)  # nothing to do
    assert not again.new_commit and again.commit_id == fixed.commit_id == head(hub) and again.verified


def test_include_everything_still_refuses_credentials_and_training_state(folder, tmp_path):
    # refused before the Hub is contacted: the closed port would be another error
    with pytest.raises(SecretsFound) as e:
        publish(folder, "testuser/x", include=["*"], endpoint=NOWHERE, no_verify=True)
    message = str(e.value)
    assert message.startswith("refusing to publish: .env (an environment file, by its name); ")
    assert "logs/train.log (the access token in use, at byte 22)" in message and TOKEN not in message
    copy = shutil.copytree(folder, tmp_path / "clean")
    (copy / ".env").unlink()
    shutil.rmtree(copy / "logs")  # the training log holds the token
    everything = publish(copy, "testuser/x", include=["*"], dry_run=True)
    assert "training_facts.json" in everything.files and "optimizer.pt" not in everything.files
    assert set(everything.selection.training_state) == {"optimizer.pt", "checkpoint-10/model.safetensors"}
    state = publish(copy, "testuser/x", include_training_state=True, dry_run=True)
    assert {"optimizer.pt", "checkpoint-10/model.safetensors"} <= set(state.files)


# Any JSON value in any field: wrong types, nesting where text is expected, lone surrogates, NaN, huge numbers.
FUZZ_VALUES = [None, True, 0, -1, 1.5, float("nan"), 10**30, "", "oops", "\ud800", "x\udfffy"]
FUZZ_VALUES += [[], ["x"], [{}], [1, [2]], [None], {}, {"a": 1}, {"0": {}}, {"AutoModel": 3}, {"\ud800": "k"}]


def _fuzzed(document, rng):
    """``document`` with one field (or a field inside a field, or the whole document) replaced."""
    if not isinstance(document, dict) or not document or rng.random() < 0.05:
        return rng.choice(FUZZ_VALUES)
    key = rng.choice(sorted(document))
    return {**document, key: _fuzzed(document[key], rng) if rng.random() < 0.3 else rng.choice(FUZZ_VALUES)}


def test_fuzzed_config_and_training_facts_give_a_card_or_one_line_naming_the_file(folder, tmp_path):
    """240 seeded mutations of config.json and training_facts.json: a card, or one line naming the file."""
    import random

    from briskbert.errors import UserError

    rng, copy = random.Random(31), shutil.copytree(folder, tmp_path / "fuzzed")
    originals = {name: (folder / name).read_bytes() for name in ("config.json", "training_facts.json")}
    outcomes = {"card": 0, "refused": 0}
    for case in range(240):
        name = sorted(originals)[case % 2]
        document = _fuzzed(json.loads(originals[name]), rng)
        raw = json.dumps(document, ensure_ascii=case % 4 < 2).encode("utf-8", "surrogatepass")
        if case % 37 == 0:
            raw = raw[: len(raw) // 2] + b"\xff" + raw[len(raw) // 2 :]  # not UTF-8
        for other, content in originals.items():
            (copy / other).write_bytes(raw if other == name else content)
        try:
            result = publish(copy, "testuser/fuzz", dry_run=True)
            result.card.encode("utf-8")
            outcomes["card"] += 1
        except UserError as error:
            assert name in str(error) and "\n" not in str(error), (raw[:300], str(error))
            outcomes["refused"] += 1
    assert outcomes["card"] > 20 and outcomes["refused"] > 60, outcomes


# (link, target) in the model folder, made in this order; {out} is a folder beside it
OUTSIDE_LINKS = {
    "file": [("chat_template.jinja", "{out}/passwd")],
    "relative": [("notes.txt", "../outside/passwd")],
    "folder": [("extra", "{out}")],
    "chain": [("hop", "{out}/passwd"), ("chat_template.jinja", "hop")],
    "dangling": [("chat_template.jinja", "{out}/gone")],
    "parent": [("up", "..")],
}


@pytest.mark.parametrize("case", OUTSIDE_LINKS)
def test_a_symlink_that_resolves_outside_the_folder_is_refused_before_anything_is_sent(
    folder, tmp_path, case
):
    """A symlink (a default file or an --include) leading outside the folder stops the publish in one line."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    copy = shutil.copytree(folder, tmp_path / "linked")
    for link, target in OUTSIDE_LINKS[case]:
        (copy / link).symlink_to(target.format(out=outside))
    with pytest.raises(OutsideTheFolder) as e:
        publish(copy, "testuser/sst2", include=["*.txt", "extra"], endpoint=NOWHERE, no_verify=True)
    message = str(e.value)  # contacting the closed port would have been another error
    assert f"{OUTSIDE_LINKS[case][0][0]} -> " in message and "resolve outside" in message
    assert "\n" not in message
    assert "root:x" not in message  # nothing read through it


def test_symlinks_inside_the_folder_are_followed_and_the_dry_run_says_which(folder, tmp_path):
    copy = shutil.copytree(folder, tmp_path / "linked")
    (copy / "templates").mkdir()
    (copy / "templates" / "chat.jinja").write_text("{{ messages }}")
    (copy / "chat_template.jinja").symlink_to("templates/chat.jinja")
    (copy / "latest").symlink_to("templates", target_is_directory=True)
    (copy / "self").symlink_to(".", target_is_directory=True)  # a loop back up is listed, never walked twice
    lines = []
    result = publish(copy, "testuser/sst2", include=["latest"], dry_run=True, log=lines.append)
    assert result.files["chat_template.jinja"] == len("{{ messages }}")
    assert "latest/chat.jinja" in result.files
    followed = "chat_template.jinja -> templates/chat.jinja; latest -> templates; self -> ."
    assert f"Symlinks followed (each resolves inside the folder): {followed}" in lines


AUTO_MAP_VALUES = {
    "absolute": "/tmp/x/evil_outside.BriskBertForMaskedLM",
    "dotdot": "../evil_outside.BriskBertForMaskedLM",
    "another repo's path": "me/x--/tmp/x/evil_outside.BriskBertForMaskedLM",
}


@pytest.mark.parametrize(
    "where, value",
    [("config.json", value) for value in AUTO_MAP_VALUES]
    + [("tokenizer_config.json", "absolute"), ("custom_pipelines", "dotdot")],
)
def test_a_code_reference_outside_the_folder_is_refused_before_anything_is_sent(
    folder, tmp_path, where, value
):
    """auto_map naming /tmp/x/evil_outside.Class once staged /tmp/x/evil_outside.py for the commit."""
    evil = tmp_path / "x" / "evil_outside.py"
    evil.parent.mkdir()
    evil.write_text("raise SystemExit('outside code')\n")
    copy = shutil.copytree(folder, tmp_path / "refs")
    name = "tokenizer_config.json" if where == "tokenizer_config.json" else "config.json"
    config = json.loads((copy / name).read_text())
    ref = AUTO_MAP_VALUES[value].replace("/tmp/x", str(evil.parent))
    if where == "config.json":
        config["auto_map"]["AutoModelForMaskedLM"] = ref
    elif where == "tokenizer_config.json":
        config["auto_map"]["AutoTokenizer"] = [ref, None]
    else:
        config["custom_pipelines"] = {"evil": {"impl": ref, "pt": ["AutoModel"], "tf": [], "type": "text"}}
    (copy / name).write_text(json.dumps(config))
    with pytest.raises(OutsideTheFolder) as e:
        publish(copy, "testuser/sst2", endpoint=NOWHERE, no_verify=True)
    assert f"{name}: " in str(e.value) and repr(ref) in str(e.value) and "\n" not in str(e.value)


def test_a_relative_import_or_a_shard_from_above_the_folder_is_refused(folder, tmp_path):
    copy = shutil.copytree(folder, tmp_path / "imports")
    (copy / "crf.py").write_text((copy / "crf.py").read_text() + "\nfrom ..evil_outside import x\n")
    with pytest.raises(OutsideTheFolder, match=r"crf\.py: 'from \.\.evil_outside import'"):
        publish(copy, "testuser/sst2", dry_run=True)
    copy = shutil.copytree(folder, tmp_path / "sharded")
    (copy / "model.safetensors").rename(copy / "model-00001-of-00001.safetensors")
    shutil.copy(folder / "model.safetensors", tmp_path / "outside.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00001.safetensors", "b": "../outside.safetensors"}}
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        OutsideTheFolder, match=r"\.\./outside\.safetensors named by model\.safetensors\.index"
    ):
        publish(copy, "testuser/sst2", dry_run=True)


def test_a_republish_keeps_files_on_the_branch_unless_delete_missing(folder, hub):
    from huggingface_hub import HfApi

    opts = dict(endpoint=hub.url, no_verify=True)
    publish(folder, "testuser/sst2", **opts)
    client = HfApi(endpoint=hub.url, token=TOKEN)
    client.upload_file(path_or_fileobj=b"onnx bytes", path_in_repo="onnx/model.onnx", repo_id="testuser/sst2")
    lines = []
    kept = publish(folder, "testuser/sst2", tag="v2", log=lines.append, **opts)  # a changed card
    assert kept.new_commit and kept.kept == ["onnx/model.onnx"] and kept.deleted == []
    assert "onnx/model.onnx" in client.list_repo_files("testuser/sst2")
    assert "Keeping on main (not in the folder; delete_missing would delete them): onnx/model.onnx" in lines
    again = publish(folder, "testuser/sst2", tag="v2", **opts)
    assert not again.new_commit  # kept files do not make every re-run a new commit
    lines.clear()
    gone = publish(folder, "testuser/sst2", tag="v3", delete_missing=True, log=lines.append, **opts)
    assert gone.deleted == ["onnx/model.onnx"]
    assert "onnx/model.onnx" not in client.list_repo_files("testuser/sst2")
    assert "Deleting from main (not in the folder; delete_missing): onnx/model.onnx" in lines

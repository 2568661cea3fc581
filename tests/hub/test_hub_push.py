"""Hub pushes of ESTrainer through the real `huggingface_hub` client against a local Hub endpoint.

`tests/hub_server.py` serves the Hub upload API on 127.0.0.1; `LocalHub.patch` sets `HF_ENDPOINT` and
`huggingface_hub.constants.ENDPOINT` (read by every `HfApi()` created without `endpoint=`; the module reads the
environment variable only at import). Nothing on the client side is monkeypatched: the tests check the files that
arrive, commit by commit, and every request the client sent.
"""

import json
import os
import re

import pytest
import yaml
from hub_server import LocalHub
from utils import make_trainer, target_token_reward, tiny_llama

from hf_es.hub import HubPushError

TOKEN = "hf_" + "PushTokenAbCdEfGhIjKlMnOpQrStUv0123"
REPO = "me/tiny-es"


def assert_token_only_in_authorization(hub, caplog=None, output_dir=None):
    assert hub.requests
    for request in hub.requests:
        assert TOKEN.encode() not in request.body, request.path
        for name, value in request.headers.items():
            if name.lower() == "authorization":
                assert value == f"Bearer {TOKEN}"
            else:
                assert TOKEN not in value, name
    for commit in hub.commits:
        for path, content in commit.files.items():
            assert TOKEN.encode() not in content, path
    if caplog is not None:
        assert TOKEN not in caplog.text
    if output_dir is not None:
        for root, _, files in os.walk(output_dir):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    assert TOKEN.encode() not in f.read(), os.path.join(root, name)


def front_matter(readme: bytes) -> dict:
    match = re.match(r"^---\n(.*?)\n---\n", readme.decode(), re.DOTALL)
    assert match, "README.md has no YAML metadata"
    return yaml.safe_load(match.group(1))


def local_snapshot(folder):
    snapshot = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                snapshot[os.path.relpath(path, folder)] = f.read()
    return snapshot


@pytest.fixture
def base_model_dir(tmp_path):
    """The tiny model saved as a folder, so the card gets drift statistics (`model_card_drift` needs one)."""
    path = tmp_path / "base"
    tiny_llama().save_pretrained(path)
    return str(path)


def test_push_to_hub_sends_weights_card_drift_state_and_plots_in_one_commit(
    tmp_path, monkeypatch, caplog, base_model_dir
):
    with LocalHub(fail_commits=2) as hub:  # the first two commits get HTTP 500: retried with backoff
        hub.patch(monkeypatch)
        trainer = make_trainer(
            tmp_path, model=base_model_dir, hub_model_id=REPO, hub_token=TOKEN, logging_steps=1, max_steps=2
        )
        trainer.hub_push_backoff_s = 0.01
        trainer.train()
        with caplog.at_level("WARNING"):
            info = trainer.push_to_hub()
    out = trainer.args.output_dir
    assert hub.failed_commits == 2 and len(hub.commits) == 1
    commit = hub.commits[0]
    assert commit.repo_id == REPO and commit.revision == "main" and commit.summary == "End of training"
    assert info.oid == commit.oid and "retrying" in caplog.text
    files = commit.files
    for name in (
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "README.md",
        "drift_stats.json",
        "trainer_state.json",
        "es_state.json",
        "reward_curve.png",
        "training_args.json",
        "hf_es_lineage.json",
    ):
        assert name in files, name
    assert not any(name.startswith(("checkpoint-", "_", "runs/")) for name in files)
    assert "training_args.bin" not in files and "es_master.safetensors" not in files
    # The arrived files are the local ones, byte for byte, and the local folder was left complete.
    local = local_snapshot(out)
    assert all(local[name] == content for name, content in files.items())
    assert files["reward_curve.png"].startswith(b"\x89PNG")
    metadata = front_matter(files["README.md"])
    assert metadata["library_name"] == "hf_es" and "evolution-strategies" in metadata["tags"]
    assert json.loads(files["trainer_state.json"])["global_step"] == 2
    assert "relative_l2" in json.loads(files["drift_stats.json"])
    assert_token_only_in_authorization(hub, caplog, out)


def test_push_that_keeps_failing_raises_and_keeps_the_local_files(tmp_path, monkeypatch):
    with LocalHub(fail_commits=100) as hub:
        hub.patch(monkeypatch)
        trainer = make_trainer(tmp_path, hub_model_id=REPO, hub_token=TOKEN, max_steps=1)
        trainer.hub_push_retries, trainer.hub_push_backoff_s = 2, 0.0
        trainer.train()
        with pytest.raises(HubPushError, match=r"The Hub answered HTTP 500.*The local copy in .* is intact") as error:
            trainer.push_to_hub()
    assert hub.failed_commits == 3 and not hub.commits
    assert TOKEN not in str(error.value)
    local = local_snapshot(trainer.args.output_dir)
    assert {"model.safetensors", "README.md", "trainer_state.json", "es_state.json"} <= set(local)
    assert_token_only_in_authorization(hub, output_dir=trainer.args.output_dir)


@pytest.mark.parametrize(
    "strategy, sub_folders",
    [
        ("end", None),
        ("every_save", None),
        ("checkpoint", ["last-checkpoint", "last-checkpoint"]),
        ("all_checkpoints", ["checkpoint-1", "checkpoint-2"]),
    ],
)
def test_hub_strategy_pushes_from_checkpoints(tmp_path, monkeypatch, strategy, sub_folders):
    with LocalHub(fail_commits=1) as hub:  # the first push is retried
        hub.patch(monkeypatch)
        trainer = make_trainer(
            tmp_path,
            reward_funcs=target_token_reward,
            push_to_hub=True,
            hub_strategy=strategy,
            hub_model_id=REPO,
            hub_token=TOKEN,
            save_strategy="steps",
            save_steps=1,
            max_steps=2,
        )
        trainer.hub_push_backoff_s = 0.01
        trainer.train()
    out = trainer.args.output_dir
    assert sorted(n for n in os.listdir(out) if n.startswith("checkpoint-")) == ["checkpoint-1", "checkpoint-2"]
    if strategy == "end":
        assert not hub.commits and hub.failed_commits == 0  # only the repo creation
        return
    per_save = 1 if sub_folders is None else 2
    assert hub.failed_commits == 1 and len(hub.commits) == 2 * per_save
    for step in (1, 2):
        root = hub.commits[(step - 1) * per_save]
        assert root.summary == f"Training in progress, step {step}"
        checkpoint = local_snapshot(os.path.join(out, f"checkpoint-{step}"))
        assert {"model.safetensors", "README.md", "trainer_state.json", "es_state.json"} <= set(root.files)
        assert {"training_args.json", "hf_es_lineage.json"} <= set(root.files)
        assert not any("/" in name for name in root.files)
        assert all(checkpoint[name] == content for name, content in root.files.items())
        assert json.loads(root.files["trainer_state.json"])["global_step"] == step
        if sub_folders is not None:
            folder = hub.commits[(step - 1) * per_save + 1]
            prefix = sub_folders[step - 1] + "/"
            assert folder.summary == f"Training in progress, step {step}, checkpoint"
            # the whole checkpoint folder, so a run can resume from the Hub copy
            assert {prefix + name for name in checkpoint} == set(folder.files)
            assert all(checkpoint[name[len(prefix) :]] == content for name, content in folder.files.items())
    if strategy == "checkpoint":
        assert {n for n in hub.repos[REPO] if n.startswith("checkpoint-")} == set()
    assert_token_only_in_authorization(hub, output_dir=out)


def test_failed_checkpoint_push_is_logged_and_training_continues(tmp_path, monkeypatch, caplog):
    with LocalHub(fail_commits=100) as hub:
        hub.patch(monkeypatch)
        trainer = make_trainer(
            tmp_path,
            push_to_hub=True,
            hub_strategy="checkpoint",
            hub_model_id=REPO,
            hub_token=TOKEN,
            save_strategy="steps",
            save_steps=1,
            max_steps=2,
        )
        trainer.hub_push_retries, trainer.hub_push_backoff_s = 1, 0.0
        with caplog.at_level("WARNING"):
            trainer.train()
    assert trainer.state.global_step == 2 and not hub.commits and hub.failed_commits == 2 * 2 * 2
    assert caplog.text.count("is intact; push it again later. Training continues.") == 4
    out = trainer.args.output_dir
    for step in (1, 2):
        assert {"model.safetensors", "es_state.json", "trainer_state.json"} <= set(
            os.listdir(os.path.join(out, f"checkpoint-{step}"))
        )
    assert_token_only_in_authorization(hub, caplog, out)


def test_non_blocking_push_returns_a_future(tmp_path, monkeypatch):
    with LocalHub() as hub:
        hub.patch(monkeypatch)
        trainer = make_trainer(tmp_path, hub_model_id=REPO, hub_token=TOKEN, max_steps=1)
        trainer.train()
        future = trainer.push_to_hub(commit_message="async", blocking=False)
        info = future.result(timeout=60)
    assert len(hub.commits) == 1 and hub.commits[0].summary == "async" and info.oid == hub.commits[0].oid
    assert trainer.push_in_progress.is_done()

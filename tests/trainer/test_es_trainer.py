"""ESTrainer behaviour that issue 14 (None rewards) and issue 15 (final saves, push_to_hub) changed."""

import logging
import os
import socket

import pytest
import torch
from utils import centre_snapshot, make_trainer, target_token_reward, tiny_llama

from hf_es.hub import HubPushError


def test_member_whose_completions_are_all_none_is_left_out_of_the_update(tmp_path, caplog):
    calls = {"n": 0}

    def half_members_none(completion_ids, **kwargs):
        calls["n"] += 1
        if calls["n"] % 2 == 0:  # every second member: nothing applies
            return [None] * len(completion_ids)
        return target_token_reward(completion_ids)

    trainer = make_trainer(tmp_path, reward_funcs=half_members_none, max_steps=2)  # reward_failure="error"
    before = centre_snapshot(trainer)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "population/skipped_members" in h]
    assert [h["population/skipped_members"] for h in logged] == [4.0, 4.0]
    assert [h["completions/unscorable"] for h in logged] == [16.0, 16.0]  # 4 members x 4 completions
    assert "Every reward function returned None for 4 of 4 completions (step 0, member 1)" in caplog.text
    assert "prompt 'Say something about number" in caplog.text
    assert any(not torch.equal(before[n], t) for n, t in trainer.backend.centre.master.items())  # it still learns


def test_step_without_any_scorable_member_makes_no_update_and_training_continues(tmp_path, caplog):
    def never(completion_ids, **kwargs):
        return [None] * len(completion_ids)

    trainer = make_trainer(tmp_path, reward_funcs=never, max_steps=2)
    before = centre_snapshot(trainer)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert trainer.state.global_step == 2
    assert all(torch.equal(before[n], t) for n, t in trainer.backend.centre.master.items())
    assert "Step 0: no member has a scorable completion" in caplog.text
    assert "Step 1: no member has a scorable completion" in caplog.text


def bf16_trainer(tmp_path, **overrides):
    return make_trainer(tmp_path, model=tiny_llama().to(torch.bfloat16), max_steps=1, **overrides)


def test_final_save_leaves_the_fp32_master_to_checkpoints_unless_asked(tmp_path):
    trainer = bf16_trainer(tmp_path, save_strategy="steps", save_steps=1)
    trainer.train()
    trainer.save_model()
    out = tmp_path / "out"
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file() and (out / "README.md").is_file()
    assert not (out / "es_master.safetensors").exists()
    assert (out / "checkpoint-1" / "es_master.safetensors").is_file()  # exact resume

    asked = bf16_trainer(tmp_path / "asked", save_es_master=True)
    asked.train()
    asked.save_model()
    assert (tmp_path / "asked" / "out" / "es_master.safetensors").is_file()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


def test_push_to_hub_saves_first_and_names_an_unreachable_hub(tmp_path, monkeypatch):
    from huggingface_hub import constants

    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    trainer = make_trainer(tmp_path, max_steps=1, save_strategy="no", hub_model_id="me/tiny-es")
    trainer.hub_push_retries, trainer.hub_push_backoff_s = 1, 0.0
    trainer.train()
    with pytest.raises(HubPushError) as info:
        trainer.push_to_hub(token="hf_" + "x" * 34)
    message = str(info.value)
    assert "Hub unreachable at " + endpoint in message and "local copy" in message and "is intact" in message
    assert "hf_xxxx" not in message
    out = tmp_path / "out"
    assert {"model.safetensors", "config.json", "README.md", "es_state.json"} <= set(os.listdir(out))

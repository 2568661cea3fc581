"""`hf_es.trainer.checkpoint_files`: atomic commit, rotation, completeness and ES state, on plain folders."""

import json
import os

import pytest
import torch

from hf_es.trainer import checkpoint_files as ckpt


def complete_checkpoint(path, step=1):
    os.makedirs(path, exist_ok=True)
    for name, text in (("trainer_state.json", "{}"), ("es_state.json", json.dumps({"global_step": step}))):
        with open(os.path.join(path, name), "w") as f:
            f.write(text)
    open(os.path.join(path, "model.safetensors"), "wb").close()


def test_commit_replaces_atomically_and_latest_skips_incomplete(tmp_path):
    run = str(tmp_path)
    for step in (1, 2):
        staging = ckpt.staging_dir(run, step)
        complete_checkpoint(staging, step)
        ckpt.commit_checkpoint(staging, os.path.join(run, f"checkpoint-{step}"))
    assert sorted(os.listdir(run)) == ["checkpoint-1", "checkpoint-2"]
    os.makedirs(os.path.join(run, "checkpoint-3"))  # a crash left it empty
    with open(os.path.join(run, "checkpoint-2", "es_state.json"), "w") as f:
        f.write("{")  # truncated JSON
    assert (
        ckpt.checkpoint_problem(os.path.join(run, "checkpoint-3"))
        == "trainer_state.json is missing (the save did not finish)"
    )
    assert "es_state.json is unreadable" in ckpt.checkpoint_problem(os.path.join(run, "checkpoint-2"))
    assert ckpt.latest_complete_checkpoint(run) == os.path.join(run, "checkpoint-1")


def test_rotation_keeps_newest_and_best(tmp_path):
    run = str(tmp_path)
    for step in range(1, 5):
        complete_checkpoint(os.path.join(run, f"checkpoint-{step}"))
        os.utime(os.path.join(run, f"checkpoint-{step}"), (step, step))
    ckpt.rotate_checkpoints(run, limit=2, best_checkpoint=os.path.join(run, "checkpoint-1"))
    assert sorted(os.listdir(run)) == ["checkpoint-1", "checkpoint-4"]


def test_es_state_round_trip_and_missing_master(tmp_path):
    state = {"global_step": 3, "seed": 1}
    master = {"w": torch.tensor([1.0, 1.0 + 2**-10])}  # a value bf16 rounds
    ckpt.save_es_state(str(tmp_path), state, master)
    loaded, loaded_master = ckpt.load_es_state(str(tmp_path))
    assert loaded == {**state, "has_fp32_master": True, "fp32_master_omitted": False}
    assert torch.equal(loaded_master["w"], master["w"])
    os.remove(tmp_path / ckpt.ES_MASTER_NAME)
    with pytest.raises(ValueError, match="es_master.safetensors is missing"):
        ckpt.load_es_state(str(tmp_path))
    ckpt.save_es_state(str(tmp_path), state, None, master_omitted=True)
    loaded, loaded_master = ckpt.load_es_state(str(tmp_path))
    assert loaded_master is None and loaded["fp32_master_omitted"] and os.listdir(tmp_path) == ["es_state.json"]


def test_resume_settings_name_what_the_perturbation_covers(tmp_path):
    from hf_es import ESConfig

    def settings(**overrides):
        return ckpt.resume_settings(ESConfig(output_dir=str(tmp_path), report_to="none", **overrides))

    everything, attention = settings(), settings(es_target_modules=["q_proj", "v_proj"])
    assert everything["es_target_modules"] is None
    assert attention["es_target_modules"] == "['q_proj', 'v_proj']"  # JSON-safe, compared on resume
    assert {name for name in everything if everything[name] != attention[name]} == {"es_target_modules"}

"""Checkpoints, exact resume, TensorBoard logging, model cards and Hub pushes of ESTrainer (tiny model, CPU)."""

import glob
import json
import os

import torch
from safetensors.torch import load_file
from utils import make_trainer, target_token_reward, tiny_llama


def test_resume_from_checkpoint_is_bit_identical_in_bf16(tmp_path):
    def bf16_model():
        return tiny_llama(seed=1).to(torch.bfloat16)

    full = make_trainer(tmp_path / "full", model=bf16_model(), max_steps=4)
    full.train()
    full_rewards = [h["reward"] for h in full.state.log_history if "reward" in h]

    first = make_trainer(tmp_path / "half", model=bf16_model(), max_steps=4, save_strategy="steps", save_steps=2)
    # Stop after the checkpoint at step 2, as an interrupted run would.
    from transformers import TrainerCallback

    class StopAt2(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                control.should_training_stop = True

    first.add_callback(StopAt2())
    first.train()
    checkpoint = os.path.join(first.args.output_dir, "checkpoint-2")
    assert os.path.isfile(os.path.join(checkpoint, "es_master.safetensors"))  # bf16 model: fp32 master saved
    master = load_file(os.path.join(checkpoint, "es_master.safetensors"))
    assert all(t.dtype == torch.float32 for t in master.values())

    resumed = make_trainer(tmp_path / "half", model=bf16_model(), max_steps=4, save_strategy="steps", save_steps=2)
    resumed.train(resume_from_checkpoint=checkpoint)
    resumed_rewards = [h["reward"] for h in resumed.state.log_history if "reward" in h]
    assert resumed_rewards == full_rewards
    for name, tensor in full.backend.centre.master.items():
        assert torch.equal(resumed.backend.centre.master[name], tensor), name


def test_tensorboard_logging_and_model_card_on_save(tmp_path):
    trainer = make_trainer(tmp_path, report_to=["tensorboard"], max_steps=2, hub_token="hf_" + "x" * 34)
    trainer.train()
    events = glob.glob(os.path.join(trainer.args.output_dir, "runs", "**", "events.out.tfevents*"), recursive=True)
    assert events and os.path.getsize(events[0]) > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(os.path.dirname(events[0]))
    accumulator.Reload()
    assert "train/reward" in accumulator.Tags()["scalars"]
    assert len(accumulator.Scalars("train/reward")) == 2

    trainer.save_model()
    out = trainer.args.output_dir
    card = open(os.path.join(out, "README.md")).read()
    assert "evolution-strategies" in card and "library_name: hf_es" in card
    assert "population_size" in card or "Population size" in card
    state = json.load(open(os.path.join(out, "es_state.json")))
    assert state["global_step"] == 2 and state["population_size"] == 8
    for path in glob.glob(os.path.join(out, "**", "*"), recursive=True):
        if os.path.isfile(path):
            assert b"hf_" + b"x" * 34 not in open(path, "rb").read(), path


def test_push_to_hub_uploads_the_card_and_weights(tmp_path, monkeypatch):
    """Through the real huggingface_hub client against a local Hub endpoint (more in tests/hub/test_hub_push.py)."""
    from hub_server import LocalHub

    token = "hf_" + "y" * 34
    with LocalHub() as hub:
        hub.patch(monkeypatch)
        trainer = make_trainer(
            tmp_path, reward_funcs=target_token_reward, push_to_hub=False, hub_model_id="me/tiny-es", hub_token=token
        )
        trainer.train()
        trainer.push_to_hub()
    assert len(hub.commits) == 1 and hub.commits[0].repo_id == "me/tiny-es"
    assert {"README.md", "model.safetensors", "es_state.json", "trainer_state.json"} <= set(hub.commits[0].files)
    assert all(token.encode() not in request.body for request in hub.requests)


def test_verifier_failure_counters_are_logged_per_step(tmp_path):
    from datasets import Dataset

    from hf_es.rewards import make_accuracy_reward

    accuracy = make_accuracy_reward(extract="boxed")
    dataset = Dataset.from_dict(
        {"prompt": [f"What is {i} + 1?" for i in range(8)], "solution": [str(i + 1) for i in range(8)]}
    )
    trainer = make_trainer(tmp_path, reward_funcs=[accuracy], dataset=dataset, max_steps=2)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "reward" in h]
    # A random tiny model never writes \boxed{...}: every completion of every member lacks an answer.
    assert [h["rewards/accuracy_reward/no_answer"] for h in logged] == [8 * 4, 8 * 4]
    assert all(h["rewards/accuracy_reward/timeouts"] == 0 for h in logged)


def test_drift_is_computed_once_per_step_however_often_the_card_is_written(tmp_path, monkeypatch):
    import hf_es.analysis

    base = tmp_path / "base"
    tiny_llama(seed=1).save_pretrained(base)
    calls = []
    real = hf_es.analysis.compute_drift
    monkeypatch.setattr(hf_es.analysis, "compute_drift", lambda *a, **k: calls.append(1) or real(*a, **k))
    trainer = make_trainer(tmp_path, model=str(base), max_steps=1)
    trainer.train()
    trainer.save_model()
    trainer.save_model(str(tmp_path / "again"))
    assert len(calls) == 1
    assert json.load(open(tmp_path / "again" / "drift_stats.json"))["relative_l2"] > 0

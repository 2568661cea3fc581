"""ESTrainer with perturbation='low_rank': climbs, matches the 1-process run on 2 processes, and refuses vLLM."""

import json
import os
import subprocess
import sys

import pytest
import torch
from utils import TESTS_DIR, make_trainer, prompt_dataset, tiny_llama

from hf_es import ESConfig
from hf_es.es import LowRankCentre


def test_low_rank_es_climbs_the_synthetic_reward(tmp_path):
    """Same reward, model and budget as the full-rank test_es_climbs_a_synthetic_reward_quickly, with sigma / 4.

    A low-rank direction moves every position's activations along the same few vectors, so at the full-rank test's
    sigma = 0.02 the members of this tiny random model already emit all-target or no-target completions (rewards
    0 or 1) and the run does not climb; at sigma = 0.005 it does.
    """
    trainer = make_trainer(
        tmp_path,
        population_size=16,
        per_device_train_batch_size=8,
        max_steps=20,
        sigma=0.005,
        learning_rate=0.01,
        max_completion_length=8,
        model=tiny_llama(seed=1),
        perturbation="low_rank",
        perturbation_rank=1,
    )
    assert isinstance(trainer.backend.centre, LowRankCentre)
    trainer.eval_dataset = prompt_dataset(16)
    before = trainer.evaluate()["eval_reward"]
    trainer.train()
    after = trainer.evaluate()["eval_reward"]
    assert before < 0.6 and after >= before + 0.3, (before, after)
    history = [h for h in trainer.state.log_history if "reward" in h]
    assert all((h["update_norm"] > 0) == (h["frac_zero_std"] == 0.0) for h in history)


@pytest.mark.slow
def test_two_process_low_rank_run_equals_one_process_run(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = os.path.join(TESTS_DIR, "scripts", "tiny_es_run.py")
    overrides = json.dumps({"perturbation": "low_rank", "perturbation_rank": 2, "estimator": "antithetic"})
    one, two, full = tmp_path / "one", tmp_path / "two", tmp_path / "full"
    subprocess.run([sys.executable, script, str(one), "3", overrides], env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, script, str(full), "3"], env=env, check=True, capture_output=True)
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    launcher += [os.path.join(TESTS_DIR, "..", "accelerate_configs", "cpu.yaml"), "--num_processes", "2"]
    proc = subprocess.run(
        launcher + [script, str(two), "3", overrides], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = json.loads((one / "result-rank0.json").read_text())
    ranks = [json.loads((two / f"result-rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["digest"] == ranks[1]["digest"] == single["digest"]
    assert ranks[0]["rewards"] == single["rewards"]
    assert single["digest"] != json.loads((full / "result-rank0.json").read_text())["digest"]  # really low-rank


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"perturbation": "sparse"}, "perturbation must be"),
        ({"perturbation": "low_rank", "perturbation_rank": 0}, "perturbation_rank"),
        ({"perturbation": "low_rank", "low_rank_non_matrix_noise": "some"}, "low_rank_non_matrix_noise"),
        ({"perturbation": "low_rank", "use_vllm": True}, "use_vllm=False"),
    ],
)
def test_low_rank_config_errors(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        ESConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **overrides)


def test_low_rank_resume_from_an_fp32_checkpoint_keeps_the_low_rank_centre(tmp_path):
    """fp32 models resume by re-snapshotting the loaded weights; that must rebuild a LowRankCentre, not an ESCentre."""
    settings = dict(perturbation="low_rank", perturbation_rank=2, sigma=0.005, learning_rate=0.01, max_steps=2)
    full = make_trainer(tmp_path / "full", model=tiny_llama(seed=1), **settings)
    full.train()
    first = make_trainer(tmp_path / "half", model=tiny_llama(seed=1), save_strategy="steps", save_steps=1, **settings)
    first.args.max_steps = 1
    first.train()
    resumed = make_trainer(tmp_path / "half", model=tiny_llama(seed=1), **settings)
    resumed.train(resume_from_checkpoint=os.path.join(first.args.output_dir, "checkpoint-1"))
    assert isinstance(resumed.backend.centre, LowRankCentre) and resumed.backend.centre.rank == 2
    for name, tensor in full.backend.centre.master.items():
        assert torch.equal(resumed.backend.centre.master[name], tensor), name

"""scripts/train_es.py end to end: recipe + CLI overrides, real bundled model, saved artefacts."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "train_es.py")
RECIPE = os.path.join(ROOT, "recipes", "smollm2_cpu_arithmetic.yaml")


def run_script(*args, timeout=600):
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run(
        [sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.mark.slow
def test_recipe_trains_the_bundled_model_and_saves_model_card_and_curve(tmp_path):
    out = tmp_path / "run"
    proc = run_script(
        "--config",
        RECIPE,
        "--max_steps",
        "2",
        "--population_size",
        "4",
        "--per_device_train_batch_size",
        "8",
        "--num_eval_samples",
        "4",
        "--eval_steps",
        "2",
        "--output_dir",
        str(out),
        "--report_to",
        "none",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in (
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "es_state.json",
        "reward_curve.png",
        "README.md",
        "training_args.json",
        "drift_stats.json",
        "trainer_state.json",
    ):
        assert (out / name).is_file(), name
    assert not (out / "training_args.bin").exists()
    assert not (out / "es_master.safetensors").exists()
    state = json.loads((out / "es_state.json").read_text())
    assert state["global_step"] == 2 and state["population_size"] == 4
    # The demo recipe trains in float32: the saved weights are the exact centre, so no master is needed or omitted.
    assert not state["has_fp32_master"] and not state["fp32_master_omitted"]
    card = (out / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card
    drift = json.loads((out / "drift_stats.json").read_text())
    logged_steps = [
        e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "update_norm" in e
    ]
    assert any(entry["update_norm"] > 0 for entry in logged_steps)  # a step whose members did not tie
    assert drift["relative_l2"] > 0  # ... moved the weights
    assert "eval_reward:" in proc.stdout
    # the demo recipe evaluates on held-out problems, and the summary says so and reports the population's coverage
    assert "accuracy_reward on 4 evaluation problems, none in the training data: step 0: " in proc.stdout
    assert "population/coverage (chance that at least one member solves a step's prompt): " in proc.stdout
    logged = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [entry["step"] for entry in logged if "population/coverage" in entry] == [1, 2]


def test_grpo_only_field_on_the_command_line_is_a_clear_error(tmp_path):
    proc = run_script("--config", RECIPE, "--beta", "0.04", "--output_dir", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "GRPO-only field(s) ['beta']" in proc.stderr and "KL penalty" in proc.stderr

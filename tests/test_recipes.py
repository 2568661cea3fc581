"""The paper's experiments as scripts: GRPO baseline, ES/GRPO composition, N sweep, two-point diagnostic, recipes."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
ES_RECIPE = os.path.join(ROOT, "recipes", "smollm2_cpu_arithmetic.yaml")
GRPO_RECIPE = os.path.join(ROOT, "recipes", "smollm2_cpu_arithmetic_grpo.yaml")
sys.path.insert(0, SCRIPTS)

import estimator_diagnostic  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1"}
TINY_ES = (
    "--per_device_train_batch_size 4 --num_eval_samples 4 --eval_steps 1 --max_completion_length 8 --report_to none "
    "--dtype float32"
)
TINY_GRPO = (
    "--per_device_train_batch_size 8 --gradient_accumulation_steps 1 --num_generations 2 --num_eval_samples 4 "
    "--eval_steps 1 --max_completion_length 8 --report_to none"
)


def run(script: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, script), *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


# ------------------------------------------------------------------------------------------------ fast tests


class _SyntheticWeights:
    """theta in R^d held by a real ESCentre (the trainer's perturbation code, exact Gaussian noise)."""

    def __init__(self, dim: int):
        from hf_es.es import ESCentre, GaussianNoise

        self.theta = torch.zeros(dim)
        self.centre = ESCentre({"theta": self.theta}, GaussianNoise())

    def perturb(self, seed: int, scale: float) -> None:
        self.centre.perturb_(seed, scale)

    def restore(self) -> None:
        self.centre.restore_()


def test_kappa_pair_on_synthetic_objectives_matches_the_analytic_value():
    """R(theta, seed) = a.theta + tau * xi(seed) (+ c |theta|^2), with eps ~ N(0, I):
    - common seed: Var(R+ - R-) = 4 s^2 |a|^2, Var(R+) = s^2 |a|^2 + tau^2;
    - independent seeds: Var(R+ - R-) = 4 s^2 |a|^2 + 2 tau^2;
    - no noise, curvature c: R+- = +-s a.eps + c s^2 |eps|^2, Var(R+) = s^2 |a|^2 + 2 d c^2 s^4, Var(R+ - R-) as
      above, so kappa < 1 when the even (common-mode) term dominates.
    """
    dim, sigma, tau, curvature = 64, 0.5, 1.0, 0.5
    weights = _SyntheticWeights(dim)
    a = torch.linspace(-1, 1, dim, dtype=torch.float64)
    a = a / a.norm() * (tau / sigma)  # sigma |a| = tau

    def noisy_linear(seed: int, direction: int) -> float:
        xi = torch.randn(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        return float(a @ weights.theta.double() + tau * xi)

    def quadratic(seed: int, direction: int) -> float:
        theta = weights.theta.double()
        return float(a @ theta + curvature * theta @ theta)

    objectives = {"rollouts_common": noisy_linear, "rollouts_independent": noisy_linear, "fixed_target": quadratic}
    results = estimator_diagnostic.measure_pairs(weights, objectives, sigma, num_directions=3000)
    assert torch.equal(weights.theta, torch.zeros(dim))  # restored

    s2a2 = (sigma * a.norm()) ** 2
    analytic = {
        "rollouts_common": 4 * s2a2 / (s2a2 + tau**2),  # = 2
        "rollouts_independent": (4 * s2a2 + 2 * tau**2) / (s2a2 + tau**2),  # = 3
        "fixed_target": 4 * s2a2 / (s2a2 + 2 * dim * curvature**2 * sigma**4),  # = 4 / 3
    }
    for name, expected in analytic.items():
        assert results[name].kappa == pytest.approx(float(expected), rel=0.1), (name, results[name].kappa)
    table = estimator_diagnostic.format_table(list(results.values()))
    assert "rollouts_common" in table and "sigma=0.5" in table


def test_kappa_pair_limits():
    plus = torch.randn(2000, generator=torch.Generator().manual_seed(0)).tolist()
    independent = torch.randn(2000, generator=torch.Generator().manual_seed(1)).tolist()
    assert estimator_diagnostic.kappa_pair(plus, independent).kappa == pytest.approx(2.0, rel=0.1)
    assert estimator_diagnostic.kappa_pair(plus, plus).kappa == 0.0
    assert estimator_diagnostic.kappa_pair(plus, [-x for x in plus]).kappa == pytest.approx(4.0)
    with pytest.raises(ValueError):
        estimator_diagnostic.kappa_pair([1.0], [1.0])


def test_sweep_summary_picks_the_smallest_n_within_tolerance():
    from hf_es.recipes import sweep

    results = [
        {"population_size": n, "sigma": 1e-3, "final": value}
        for n, value in [(8, 0.70), (16, 0.795), (32, 0.80), (64, 0.803)]
    ]
    summary = sweep.summarize(results, tolerance=0.01)["by_sigma"]["0.001"]
    assert summary["reference_N"] == 64 and summary["within_tolerance"] == [16, 32, 64]
    assert summary["smallest_sufficient_N"] == 16
    trajectory = sweep.trajectory_from_log_history(
        [{"reward": 0.1, "step": 1}, {"reward": 0.3, "step": 2}, {"eval_reward": 0.5, "step": 2}]
    )
    assert trajectory == {"reward": [[1, 0.1], [2, 0.3]], "eval_reward": [[2, 0.5]]}
    assert sweep.final_value(trajectory, "reward", window=2) == pytest.approx(0.2)
    assert sweep.final_value(trajectory, "eval_reward", window=1) == 0.5


def test_every_recipe_parses_with_its_script():
    from trl import GRPOConfig, ModelConfig, TrlParser

    from hf_es import ESConfig
    from hf_es.grpo import GRPOEvalArguments
    from hf_es.tasks import TaskArguments

    recipes = sorted(glob.glob(os.path.join(ROOT, "recipes", "*.yaml")))
    assert len(recipes) >= 12
    for path in recipes:
        if path.endswith("_grpo.yaml"):
            types = (TaskArguments, GRPOConfig, ModelConfig, GRPOEvalArguments)
            cli = ["--bf16", "false", "--use_cpu", "true"]  # the GPU recipes, parsed on a CPU machine
        else:
            types = (TaskArguments, ESConfig, ModelConfig)
            cli = []
        task, config, model = TrlParser(types).parse_args_and_config(["--config", path, "--output_dir", "x", *cli])[:3]
        assert model.model_name_or_path and task.reward_funcs == ["accuracy"], path
        if "deepscaler" in path:
            assert task.dataset_name == "deepscaler" and task.eval_dataset_name == "math500"
            assert config.max_completion_length == 8192 and config.temperature == 0.6
        elif "gsm8k" in path:
            assert task.dataset_name == "gsm8k" and config.max_completion_length == 2048
            assert config.num_train_epochs == 2
            if path.endswith("_grpo.yaml"):
                assert config.num_generations == 8 and config.temperature == 1.0
            else:
                assert config.population_size == 32 and config.temperature == 0.0
    for name in ("deepspeed_zero2.yaml", "deepspeed_zero3.yaml"):
        import yaml

        with open(os.path.join(ROOT, "accelerate_configs", name)) as f:
            config = yaml.safe_load(f)
        assert config["distributed_type"] == "DEEPSPEED" and config["deepspeed_config"]["zero_stage"] in (2, 3)


def test_deepscaler_task_reads_a_local_jsonl(tmp_path):
    from hf_es.tasks import TaskArguments, load_task

    path = tmp_path / "deepscaler.jsonl"
    rows = [{"problem": f"What is {i}+{i}?", "answer": str(2 * i), "solution": "..."} for i in range(5)]
    path.write_text("\n".join(json.dumps(row) for row in rows))
    train, evaluation = load_task(
        TaskArguments(
            dataset_name="deepscaler", dataset_path=str(path), eval_dataset_name="math500", num_eval_samples=3
        )
    )
    assert len(train) == 5 and train[2]["solution"] == "4" and train[2]["prompt"][-1]["content"] == "What is 2+2?"
    assert len(evaluation) == 3 and "problem" in evaluation.column_names


def test_grpo_group_coverage_counts_prompts_with_a_correct_completion_among_their_g():
    from types import SimpleNamespace

    from hf_es.grpo import SharedEvalGRPOTrainer

    nan = float("nan")
    # 3 prompts x G=2 completions (consecutive), two reward functions weighted 1 and 0.5: the maximum total is 1.5.
    rewards = torch.tensor([[1, 1], [1, 0], [0, 1], [0, 0], [nan, nan], [1, 1]], dtype=torch.float32)
    trainer = SimpleNamespace(_shared_reward_weights=torch.tensor([1.0, 0.5]), num_generations=2)
    # prompt 0: one completion reaches 1.5; prompt 1: none; prompt 2: one unscorable, one correct
    assert SharedEvalGRPOTrainer._group_coverage(trainer, rewards) == pytest.approx(2 / 3)
    trainer.num_generations = 3  # 2 prompts x G=3: each has a correct completion
    assert SharedEvalGRPOTrainer._group_coverage(trainer, rewards) == pytest.approx(1.0)


# ------------------------------------------------------------------------------- real bundled model (slow)


@pytest.mark.slow
def test_grpo_script_trains_and_writes_lineage_card(tmp_path):
    out = tmp_path / "grpo"
    proc = run(
        "train_grpo.py", "--config", GRPO_RECIPE, "--max_steps", "1", *TINY_GRPO.split(), "--output_dir", str(out)
    )
    for name in ("model.safetensors", "README.md", "reward_curve.png", "log_history.json", "hf_es_lineage.json"):
        assert (out / name).is_file(), name
    assert not (out / "training_args.bin").exists()
    history = json.loads((out / "log_history.json").read_text())
    # The same metric names as ESTrainer: training reward and the shared greedy evaluation.
    assert any("reward" in e and "rewards/accuracy_reward/mean" in e for e in history)
    assert any("eval_reward" in e and "eval_completions/mean_length" in e for e in history)
    assert any(e.get("eval_entropy", 0) > 0 for e in history)  # the same token-entropy function as ES
    coverage = [e["group/coverage"] for e in history if "group/coverage" in e]  # ES's population/coverage twin
    assert coverage and all(0 <= value <= 1 for value in coverage)
    lineage = json.loads((out / "hf_es_lineage.json").read_text())
    assert lineage == [
        {"method": "GRPO", "model": "HuggingFaceTB/SmolLM2-135M-Instruct", "steps": 1, "dataset": "arithmetic"}
    ]
    card = (out / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card and "## Lineage" in card
    assert "eval_reward:" in proc.stdout


@pytest.mark.slow
def test_composition_second_stage_starts_from_first_stage_weights(tmp_path):
    """Both orders, one update per stage. Stage 1 trains (with enough sampling diversity that it really moves);
    stage 2 runs with learning rate 0, so its saved weights are exactly what it loaded: equal checksums show that
    it started from stage 1's checkpoint and not from the base model."""
    from hf_es.models import prepare_smollm2
    from hf_es.recipes import compose

    base = compose.weights_checksum(prepare_smollm2())
    moving = " --max_completion_length 10 --temperature 0.7"  # sampled rewards differ, so stage 1 updates
    es_args = TINY_ES + moving + " --per_device_train_batch_size 8 --population_size 4 --sigma 0.01"
    grpo_args = TINY_GRPO + moving + " --per_device_train_batch_size 16 --num_generations 4 --learning_rate 1e-4"
    # ES -> GRPO: ES moves, GRPO (lr 0) keeps; GRPO -> ES: GRPO moves, ES (alpha 0) keeps.
    for order, es_extra, grpo_extra in (
        ("es_grpo", es_args, TINY_GRPO + " --learning_rate 0"),
        ("grpo_es", TINY_ES + " --population_size 2 --learning_rate 0", grpo_args),
    ):
        run(
            "compose.py",
            "--order",
            order,
            "--total_steps",
            "2",
            "--output_dir",
            str(tmp_path),
            "--es_config",
            ES_RECIPE,
            "--grpo_config",
            GRPO_RECIPE,
            "--es_args",
            es_extra,
            "--grpo_args",
            grpo_extra,
        )
        summary = json.loads((tmp_path / order / "compose_summary.json").read_text())
        first, second = summary["stages"]
        assert [first["method"], second["method"]] == [m.upper() for m in order.split("_")]
        assert first["steps"] == second["steps"] == 1
        assert second["init_from"] == first["output_dir"]
        assert first["weights_sha256"] != base, f"{order}: stage 1 did not move the weights"
        assert second["weights_sha256"] == first["weights_sha256"] == compose.weights_checksum(second["output_dir"])
        lineage = json.loads((tmp_path / order / f"stage2_{order.split('_')[1]}" / "hf_es_lineage.json").read_text())
        assert [stage["method"] for stage in lineage] == [m.upper() for m in order.split("_")]
        assert lineage[0]["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
        assert lineage[1]["model"] == first["output_dir"]
        card = (tmp_path / order / f"stage2_{order.split('_')[1]}" / "README.md").read_text()
        assert "Lineage" in card and "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card


@pytest.mark.slow
def test_sweep_writes_trajectories_and_summary(tmp_path):
    run(
        "sweep.py",
        "--config",
        ES_RECIPE,
        "--output_dir",
        str(tmp_path),
        "--population_sizes",
        "2",
        "4",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "2",
        "--max_completion_length",
        "6",
        "--dataset_test_split",
        "null",
        "--report_to",
        "none",
    )
    for name in ("N2_sigma0.002", "N4_sigma0.002"):
        trajectory = json.loads((tmp_path / name / "trajectory.json").read_text())
        assert len(trajectory["trajectory"]["reward"]) == 2 and trajectory["steps"] == 2
        assert (tmp_path / name / "trajectory.png").is_file()
    summary = json.loads((tmp_path / "summary.json").read_text())
    row = summary["by_sigma"]["0.002"]
    assert row["reference_N"] == 4 and set(row["final_by_N"]) == {"2", "4"} and 4 in row["within_tolerance"]
    assert (tmp_path / "summary.md").is_file() and (tmp_path / "rewards.png").is_file()


@pytest.mark.slow
def test_estimator_diagnostic_runs_on_the_bundled_model(tmp_path):
    out = tmp_path / "kappa.json"
    proc = run(
        "estimator_diagnostic.py",
        "--num_directions",
        "3",
        "--num_prompts",
        "2",
        "--max_completion_length",
        "6",
        "--sigmas",
        "1e-3",
        "--output_json",
        str(out),
    )
    assert "| rollouts_common |" in proc.stdout and "| fixed_target |" in proc.stdout
    report = json.loads(out.read_text())
    assert {r["objective"] for r in report["results"]} == set(estimator_diagnostic.OBJECTIVES)
    fixed = next(r for r in report["results"] if r["objective"] == "fixed_target")
    assert len(fixed["plus"]) == 3 and all(v < 0 for v in fixed["plus"] + fixed["minus"])  # log-probs


@pytest.mark.slow
def test_installed_package_runs_a_shipped_recipe_outside_the_checkout(tmp_path):
    """`pip install .` (not editable) into a folder outside the checkout, then `scripts/train_es.py --config <name>`
    copied elsewhere and run from elsewhere: hf_es, the recipe and the model card template all come from the install."""
    import shutil

    source = tmp_path / "source"  # pip builds in the source tree; a copy keeps build/ and *.egg-info out of ROOT
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv*", "__pycache__", "build", "*.egg-info", "outputs", "runs"),
    )
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet"]
    subprocess.run([*pip, "--target", str(site), str(source)], check=True, capture_output=True, timeout=600)
    shutil.rmtree(source)
    for shipped in ("hf_es/recipes/configs/smollm2_cpu_arithmetic.yaml", "hf_es/templates/model_card.md"):
        assert (site / shipped).is_file(), shipped

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = shutil.copy(os.path.join(SCRIPTS, "train_es.py"), elsewhere / "train_es.py")
    env = {**ENV, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import hf_es.recipes.train_es as m; print(m.__file__)"],
        env=env, cwd=elsewhere, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.strip() == str(site / "hf_es" / "recipes" / "train_es.py")
    out = tmp_path / "run"
    tiny = "--max_steps 1 --population_size 2 --output_dir"
    proc = subprocess.run(
        [sys.executable, script, "--config", "smollm2_cpu_arithmetic", *TINY_ES.split(), *tiny.split(), str(out)],
        env=env, cwd=elsewhere, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"Saved the model to {out}" in proc.stdout
    state = json.loads((out / "es_state.json").read_text())
    assert state["global_step"] == 1 and state["population_size"] == 2
    card = (out / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card

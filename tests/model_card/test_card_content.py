"""The card records the run (hf_es.model_card with hf_es.tasks): task and generator parameters, rewards and weights,
the exact command and recipe, ES-relevant arguments only, base vs final scores, and a quick start from the run."""

from __future__ import annotations

from pathlib import Path

from hf_es import ESConfig
from hf_es.model_card import RunRecord, base_and_final_metrics, build_model_card, dataset_ids, recipe_of_command
from hf_es.tasks import TaskArguments, describe_task, load_task

REPO = Path(__file__).resolve().parents[2]
RECIPE = "recipes/smollm2_cpu_arithmetic.yaml"
BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
LOG_HISTORY = [
    {"step": 0, "eval_reward": 0.547, "eval_rewards/accuracy/mean": 0.547, "eval_runtime": 3.0},
    {"step": 1, "reward": 0.5, "reward_std": 0.1},
    {"step": 45, "eval_reward": 0.938, "eval_rewards/accuracy/mean": 0.938, "eval_runtime": 2.9},
]


def arithmetic_run(tmp_path, monkeypatch) -> tuple[RunRecord, dict]:
    monkeypatch.chdir(REPO)  # the recipe path of the command is read relative to the working directory
    task_args = TaskArguments(num_train_samples=2048, num_eval_samples=128)
    train, _ = load_task(TaskArguments(num_train_samples=1), seed=0)
    args = ESConfig(
        output_dir=str(tmp_path / "run"),
        max_steps=45,
        max_completion_length=10,
        noise_table_size=2**23,  # the trainer records the size it used when the config leaves it automatic
        report_to="none",
    )
    args.reward_weights = [1.0, 0.25]
    run = RunRecord(
        task=describe_task(task_args, seed=0),
        reward_funcs=["accuracy", "format"],
        reward_weights=args.reward_weights,
        command=["scripts/train_es.py", "--config", RECIPE],
        example_prompt=train[0]["prompt"],
        max_new_tokens=args.max_completion_length,
    )
    run.recipe_path, run.recipe = recipe_of_command(run.command)
    return run, args.to_dict()


def test_card_records_task_rewards_command_and_scores(tmp_path, monkeypatch):
    run, hyperparameters = arithmetic_run(tmp_path, monkeypatch)
    text = str(build_model_card(base_model=BASE, hyperparameters=hyperparameters, log_history=LOG_HISTORY, run=run))
    # task: generator and its parameters, not a Hub dataset
    assert "generated locally by `hf_es.data.load_arithmetic`" in text
    parameters = "arithmetic_operation=mul, arithmetic_min_value=2, arithmetic_max_value=9"
    assert f"{parameters}, arithmetic_held_out_fraction=0, seed=0" in text
    assert "Training problems: 2048" in text and "Evaluation: 128 problems of `arithmetic` split `test`" in text
    assert "huggingface.co/datasets" not in text
    # rewards and weights
    assert "| `accuracy` | 1 |" in text and "| `format` | 0.25 |" in text
    # the exact command and its recipe, no placeholders
    assert f"accelerate launch scripts/train_es.py --config {RECIPE}" in text
    assert "dataset_name: arithmetic" in text and "sigma: 2.0e-3" in text
    assert "reward_funcs=..." not in text and "<your dataset>" not in text
    # base vs final, side by side, without the runtime
    assert "| eval_reward | 0.547 | 0.938 |" in text and "(step 45)" in text
    assert "eval_runtime" not in text.split("## Base model vs this model")[1].split("##")[0]
    # quick start from the run's own prompt and generation length
    assert "max_new_tokens=10" in text and "What is" in text and "Natalia" not in text


def test_card_lists_es_and_applicable_trainer_fields_only(tmp_path, monkeypatch):
    from hf_es.trainer.publishing import method_fields

    run, hyperparameters = arithmetic_run(tmp_path, monkeypatch)
    fields = method_fields(ESConfig)  # what ESTrainer passes
    text = str(build_model_card(base_model=BASE, hyperparameters=hyperparameters, method_fields=fields, run=run))
    for optimizer_field in (
        "adam_beta1",
        "adam_epsilon",
        "optim",
        "num_train_epochs",
        "weight_decay",
        "max_grad_norm",
    ):
        assert f"| {optimizer_field} |" not in text, optimizer_field
    for es_field in ("| noise_table_size |", "| reward_failure |", "| eval_strategy |", "| logging_steps |"):
        assert es_field in text, es_field


def test_snippet_without_command_names_task_and_rewards():
    task = describe_task(TaskArguments(dataset_name="gsm8k"))
    run = RunRecord(task=task, reward_funcs=["accuracy"])
    text = str(build_model_card(base_model=BASE, hyperparameters={"output_dir": "o", "sigma": 0.001}, run=run))
    assert "load_task(TaskArguments(**{'dataset_name': 'gsm8k'}), seed=0)" in text
    assert "reward_funcs=reward_functions(['accuracy'])" in text
    assert "[openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k), config `main`" in text


def test_base_and_final_metrics_need_a_step_zero_evaluation():
    assert base_and_final_metrics(LOG_HISTORY[1:]) == (
        None,
        {"eval_reward": 0.938, "eval_rewards/accuracy/mean": 0.938},
        45,
    )
    base, final, step = base_and_final_metrics(LOG_HISTORY)
    assert base == {"eval_reward": 0.547, "eval_rewards/accuracy/mean": 0.547} and step == 45
    assert final["eval_reward"] == 0.938


def test_generated_tasks_are_not_labelled_as_hub_datasets():
    assert dataset_ids("countdown") == ("countdown", "Countdown (generated)", None)
    assert dataset_ids("arithmetic")[0] == "arithmetic"
    assert dataset_ids("math-500") == ("HuggingFaceH4/MATH-500", "MATH-500", None)


def test_trainer_card_records_the_noise_table_size_the_run_used(tmp_path):
    from hf_es.es import NoiseTable
    from hf_es.trainer.publishing import recorded_hyperparameters

    args = ESConfig(output_dir=str(tmp_path / "run"), report_to="none")
    assert args.noise_table_size is None  # automatic: sized to the model when the centre is built
    noise = NoiseTable(size=2**22)
    assert recorded_hyperparameters(args, noise)["noise_table_size"] == 2**22
    explicit = ESConfig(output_dir=str(tmp_path / "r2"), report_to="none", noise_table_size=2**23)
    assert recorded_hyperparameters(explicit, noise)["noise_table_size"] == 2**23


def test_run_facts_given_to_the_trainer_reach_its_card_and_lineage(tmp_path):
    import json

    from utils import make_args, prompt_dataset, target_token_reward, tiny_llama, tiny_tokenizer

    from hf_es import ESTrainer
    from hf_es.model_card import RunFacts
    from hf_es.model_card.lineage import write_lineage

    source = tmp_path / "stage1"  # an earlier stage's output, with its own lineage
    source.mkdir()
    earlier = [{"method": "GRPO", "model": BASE, "steps": 5, "dataset": "arithmetic"}]
    write_lineage(str(source), earlier)
    facts = RunFacts(task=describe_task(TaskArguments(), seed=0), source=str(source), dataset_name="arithmetic")
    trainer = ESTrainer(
        tiny_llama(),
        target_token_reward,
        make_args(tmp_path, model_card_drift=False),
        prompt_dataset(4),
        processing_class=tiny_tokenizer(),
        run_facts=facts,
    )
    trainer.save_model()
    out = tmp_path / "out"
    card = (out / "README.md").read_text()
    assert "generated locally by `hf_es.data.load_arithmetic`" in card  # the task description
    assert f"base_model: {BASE}" in card  # the root of the lineage the run continued
    lineage = json.loads((out / "hf_es_lineage.json").read_text())
    assert lineage == [*earlier, {"method": "ES", "model": str(source), "steps": 0, "dataset": "arithmetic"}]
    plain = ESTrainer(
        tiny_llama(), target_token_reward, make_args(tmp_path / "plain"), processing_class=tiny_tokenizer()
    )
    assert plain.run_facts == RunFacts()  # nothing told: no task section, the lineage starts from the given model

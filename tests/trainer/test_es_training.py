"""Integration tests of ESTrainer on a tiny random Llama (CPU, seconds)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from datasets import Dataset
from utils import TESTS_DIR, centre_snapshot, make_args, make_trainer, prompt_dataset, target_token_reward, tiny_llama

from hf_es import ESConfig, RewardFunctionError


def test_es_climbs_a_synthetic_reward_quickly(tmp_path):
    # Quickly = in 20 steps (asserted below); the wall time of these 20 steps is a target of bench/latency.py.
    eval_set = prompt_dataset(16)
    # Seed 1: the centre's greedy completions score 0.45 on this reward.
    trainer = make_trainer(
        tmp_path,
        population_size=16,
        per_device_train_batch_size=8,
        max_steps=20,
        sigma=0.02,
        learning_rate=0.02,
        max_completion_length=8,
        model=tiny_llama(seed=1),
    )
    trainer.eval_dataset = eval_set
    before = trainer.evaluate()["eval_reward"]
    trainer.train()
    after = trainer.evaluate()["eval_reward"]
    assert before < 0.6 and after >= before + 0.3, (before, after)
    history = [h for h in trainer.state.log_history if "reward" in h]
    assert len(history) == 20
    assert all((h["update_norm"] > 0) == (h["frac_zero_std"] == 0.0) for h in history)  # tied steps do not move
    for key in (
        "reward_std",
        "population/reward_max",
        "population/reward_min",
        "rewards/target_token_reward/mean",
        "completions/mean_length",
        "completions/clipped_ratio",
        "frac_zero_std",
        "timing/generate",
        "timing/score",
        "timing/perturb_restore",
        "timing/update",
        "tokens_per_second",
    ):
        assert key in history[0], key
    assert history[0]["population/reward_min"] <= history[0]["reward"] <= history[0]["population/reward_max"]


def test_update_is_the_formula_from_logged_rewards(tmp_path):
    """One trainer step moves the centre exactly by lr/N * sum z_i eps_i of the members' rewards."""
    from hf_es.es import make_population, zscore

    rewards_seen = []

    def recording_reward(completion_ids, **kwargs):
        values = target_token_reward(completion_ids)
        rewards_seen.append(sum(values) / len(values))
        return values

    trainer = make_trainer(tmp_path, reward_funcs=recording_reward, max_steps=1, noise_type="gaussian")
    before = centre_snapshot(trainer)
    trainer.train()
    members = make_population(0, 0, 8)
    z = zscore(torch.tensor(rewards_seen))
    noise = trainer.backend.centre.noise
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight"):
        shape = before[name].shape
        expected = before[name] + 0.05 / 8 * sum(
            float(z[i]) * noise.full(m.seed, name, shape) for i, m in enumerate(members)
        )
        assert torch.allclose(trainer.backend.centre.master[name], expected, atol=1e-6)
        live = dict(trainer.model.named_parameters())[name]
        assert torch.equal(live.data, trainer.backend.centre.master[name])  # restored to the new centre


def test_all_tied_rewards_leave_weights_unchanged_and_are_logged(tmp_path):
    trainer = make_trainer(tmp_path, reward_funcs=lambda completions, **kw: [1.0] * len(completions))
    before = centre_snapshot(trainer)
    live_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    for name, tensor in trainer.backend.centre.master.items():
        assert torch.equal(tensor, before[name])
    for name, param in trainer.model.named_parameters():
        assert torch.equal(param, live_before[name])
    logged = [h for h in trainer.state.log_history if "frac_zero_std" in h]
    assert [h["frac_zero_std"] for h in logged] == [1.0, 1.0]
    assert all(h["update_norm"] == 0.0 for h in logged)


def test_conversational_prompts_get_the_chat_template_and_columns_reach_rewards(tmp_path):
    seen = {}

    def spy_reward(prompts, completions, completion_ids, target, **kwargs):
        seen.update(prompt=prompts[0], completion=completions[0], target=target, kwargs=set(kwargs))
        return [float(len(ids)) for ids in completion_ids]

    trainer = make_trainer(
        tmp_path,
        reward_funcs=spy_reward,
        dataset=prompt_dataset(8, conversational=True),
        max_steps=1,
        num_generations=2,
    )
    trainer.train()
    assert seen["prompt"][0]["role"] == "user"
    assert seen["completion"][0]["role"] == "assistant" and isinstance(seen["completion"][0]["content"], str)
    assert seen["target"] == [" the"] * 8  # 4 prompts x 2 generations
    assert "trainer_state" in seen["kwargs"]
    texts = trainer._prompt_texts([[{"role": "user", "content": "hi"}]])
    assert texts[0].startswith("<|im_start|>") and texts[0].endswith("<|im_start|>assistant\n")


def test_greedy_generation_is_padded_left_and_stops_at_eos(tmp_path):
    trainer = make_trainer(tmp_path)
    backend = trainer.backend
    from hf_es.generation import SamplingConfig

    prompts = ["a", "a much longer prompt with many more tokens in it"]
    result = backend.generate(prompts, SamplingConfig(max_completion_length=5))
    alone = backend.generate(prompts[:1], SamplingConfig(max_completion_length=5))
    assert result.completion_ids[0] == alone.completion_ids[0]  # left padding does not change greedy output
    assert all(len(ids) <= 5 for ids in result.completion_ids)
    assert all(2 not in ids for ids in result.completion_ids)  # EOS (id 2) is stripped

    # Force EOS: a model whose LM head prefers token 2 stops immediately and is not truncated.
    def prefer_eos(module, inputs, logits):
        logits[..., 2] += 1e4
        return logits

    trainer.model.lm_head.register_forward_hook(prefer_eos)
    stopped = backend.generate(prompts, SamplingConfig(max_completion_length=5))
    assert [len(ids) for ids in stopped.completion_ids] == [0, 0] and stopped.truncated == [False, False]


def test_two_process_run_equals_one_process_run(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = os.path.join(TESTS_DIR, "scripts", "tiny_es_run.py")
    one = tmp_path / "one"
    two = tmp_path / "two"
    subprocess.run([sys.executable, script, str(one)], env=env, check=True, capture_output=True)
    launcher = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        os.path.join(TESTS_DIR, "..", "accelerate_configs", "cpu.yaml"),
        "--num_processes",
        "2",
    ]
    proc = subprocess.run(launcher + [script, str(two)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = json.loads((one / "result-rank0.json").read_text())
    ranks = [json.loads((two / f"result-rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["digest"] == ranks[1]["digest"] == single["digest"]
    assert ranks[0]["rewards"] == single["rewards"]


def test_grpo_style_script_runs_with_only_the_two_names_swapped(tmp_path):
    grpo_script = f"""
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
import sys; sys.path.insert(0, {TESTS_DIR!r})
from utils import tiny_llama, tiny_tokenizer

def reward_len(completions, **kwargs):
    return [-abs(6 - len(c)) for c in completions]

dataset = Dataset.from_dict({{"prompt": ["Tell me a story.", "Count to three.", "Hello!", "Why?"]}})
training_args = GRPOConfig(output_dir={str(tmp_path / "grpo_out")!r}, per_device_train_batch_size=4,
                           num_generations=1, max_completion_length=8, max_steps=2, report_to="none",
                           logging_steps=1, use_cpu=True)
trainer = GRPOTrainer(model=tiny_llama(), reward_funcs=reward_len, args=training_args, train_dataset=dataset,
                      processing_class=tiny_tokenizer())
trainer.train()
trainer.save_model()
"""
    es_script = grpo_script.replace("GRPOConfig", "ESConfig").replace("GRPOTrainer", "ESTrainer")
    es_script = es_script.replace("from trl import", "from hf_es import")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", es_script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = tmp_path / "grpo_out"
    assert (saved / "model.safetensors").exists() and (saved / "es_state.json").exists()
    assert json.loads((saved / "es_state.json").read_text())["global_step"] == 2


# ----------------------------------------------------------------------------------------- bad input


def test_reward_function_that_raises_names_itself(tmp_path):
    def broken_reward(completions, **kwargs):
        raise KeyError("solution")

    trainer = make_trainer(tmp_path, reward_funcs=broken_reward)
    before = centre_snapshot(trainer)
    with pytest.raises(RewardFunctionError, match=r"'broken_reward' raised KeyError.*step 0, member 0"):
        trainer.train()
    assert all(torch.equal(t, before[n]) for n, t in trainer.backend.centre.master.items())


@pytest.mark.parametrize(
    "values, message",
    [
        (lambda n: [float("nan")] * n, r"returned nan for completion 0"),
        (lambda n: [float("inf")] * n, r"returned inf for completion 0"),
        (lambda n: [1.0] * (n - 1), r"returned 3 values for 4 completions"),
    ],
    ids=["nan", "inf", "wrong-length"],
)
def test_bad_reward_values_are_clear_errors(tmp_path, values, message):
    def bad_reward(completions, **kwargs):
        return values(len(completions))

    trainer = make_trainer(tmp_path, reward_funcs=bad_reward)
    with pytest.raises(RewardFunctionError, match=message):
        trainer.train()


def test_skip_member_policy_excludes_failing_members_and_logs_them(tmp_path):
    calls = {"n": 0}

    def flaky_reward(completion_ids, **kwargs):
        calls["n"] += 1
        if calls["n"] % 4 == 0:  # every fourth member fails
            return [float("nan")] * len(completion_ids)
        return target_token_reward(completion_ids)

    trainer = make_trainer(tmp_path, reward_funcs=flaky_reward, reward_failure="skip_member")
    trainer.train()
    logged = [h for h in trainer.state.log_history if "population/skipped_members" in h]
    assert [h["population/skipped_members"] for h in logged] == [2.0, 2.0]
    for tensor in trainer.backend.centre.master.values():
        assert torch.isfinite(tensor).all()


def test_none_from_one_function_is_not_applicable_when_another_scores(tmp_path):
    def only_first(completions, **kwargs):
        return [1.0] + [None] * (len(completions) - 1)

    trainer = make_trainer(tmp_path, reward_funcs=[only_first, target_token_reward], max_steps=1)
    trainer.train()
    logged = next(h for h in trainer.state.log_history if "rewards/only_first/mean" in h)
    assert logged["rewards/only_first/mean"] == 1.0


def test_missing_prompt_column_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"no 'prompt' column \(columns: \['question'\]\).*rename_column"):
        make_trainer(tmp_path, dataset=Dataset.from_dict({"question": ["a", "b"]}))


def test_empty_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="train_dataset is empty"):
        make_trainer(tmp_path, dataset=Dataset.from_dict({"prompt": []}))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("population_size", 1, "population_size must be an integer >= 2"),
        ("sigma", 0.0, "sigma must be > 0"),
        ("sigma", -1e-3, "sigma must be > 0"),
        ("fitness_shaping", "softmax", "fitness_shaping must be one of"),
        ("estimator", "three_point", "estimator must be"),
        ("reward_failure", "ignore", "reward_failure must be"),
        ("temperature", -1.0, "temperature must be >= 0"),
    ],
)
def test_invalid_es_config_values(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        make_args(tmp_path, **{field: value})


def test_antithetic_needs_an_even_population(tmp_path):
    with pytest.raises(ValueError, match="population_size must be even"):
        make_args(tmp_path, estimator="antithetic", population_size=5)


def test_grpo_only_fields_are_rejected_by_name_and_translated(tmp_path):
    with pytest.raises(ValueError, match=r"GRPO-only field\(s\) \['beta'\].*KL penalty.*from_grpo_config"):
        ESConfig(output_dir=str(tmp_path), beta=0.04)
    from trl import GRPOConfig

    grpo = GRPOConfig(
        output_dir=str(tmp_path),
        beta=0.04,
        temperature=0.7,
        max_completion_length=64,
        num_generations=4,
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
    )
    with pytest.warns(UserWarning, match="beta"):
        es = ESConfig.from_grpo_config(grpo, population_size=8)
    assert (es.temperature, es.max_completion_length, es.num_generations, es.population_size) == (0.7, 64, 4, 8)
    assert es.learning_rate == 2.5e-4  # GRPO's AdamW rate is not an ES step size


def test_over_long_prompt_is_a_clear_error(tmp_path):
    long_prompt = "word " * 600  # the tiny model has 512 positions
    trainer = make_trainer(tmp_path, dataset=Dataset.from_dict({"prompt": [long_prompt] * 4}))
    with pytest.raises(
        ValueError, match=r"has \d+ tokens, more than the 506 the model context leaves.*prompt_overflow=.truncate."
    ):
        trainer.train()

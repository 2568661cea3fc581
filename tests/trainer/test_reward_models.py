"""Reward models in `reward_funcs`: scored as TRL's GRPOTrainer scores them, mixed with functions and weights."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification, LlamaConfig, LlamaForSequenceClassification
from trl import GRPOConfig, GRPOTrainer
from utils import make_args, prompt_dataset, target_token_reward, tiny_llama, tiny_tokenizer

from hf_es import ESTrainer
from hf_es.scoring.reward_model import RewardModelReward, resolve_reward_models


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    """A tiny random sequence-classification Llama with one label, saved with the fixture tokenizer."""
    torch.manual_seed(3)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, num_labels=1, pad_token_id=2, tie_word_embeddings=False,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("reward_model")
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return str(folder)


PLAIN = (["2 + 2 =", "The sky is", "Hello"], [" 4", " blue today, I think", "!"])
CHAT = (
    [[{"role": "user", "content": p}] for p in PLAIN[0]],
    [[{"role": "assistant", "content": c}] for c in PLAIN[1]],
)


def trl_scores(tmp_path, reward_model_dir, prompts, completions) -> list[float]:
    """TRL's own reward-model scoring (`GRPOTrainer._calculate_rewards`) of the given pairs."""
    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=3, num_generations=3, report_to="none",
        use_cpu=True, max_completion_length=4, bf16=False,  # fp32 on both sides: same numbers, not same rounding
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=tiny_llama(), reward_funcs=reward_model_dir, args=args,
        train_dataset=prompt_dataset(3), processing_class=tiny_tokenizer(),
    )  # fmt: skip
    inputs = [{"prompt": p} for p in prompts]
    rewards = trainer._calculate_rewards(inputs, list(prompts), list(completions), [[1]] * len(prompts))
    return rewards[:, 0].tolist()


@pytest.mark.parametrize("pairs", [PLAIN, CHAT], ids=["plain", "conversational"])
def test_reward_model_scores_as_trl_does(tmp_path, reward_model_dir, pairs):
    prompts, completions = pairs
    expected = trl_scores(tmp_path, reward_model_dir, prompts, completions)
    (reward,) = resolve_reward_models(reward_model_dir)
    assert isinstance(reward, RewardModelReward)
    assert reward(prompts=prompts, completions=completions) == pytest.approx(expected, abs=1e-5)
    # Batching never changes a score (right padding, read at the last real token).
    one_by_one = RewardModelReward(reward.model, reward.processing_class, batch_size=1)
    assert one_by_one(prompts=prompts, completions=completions) == pytest.approx(expected, abs=1e-5)
    assert len(set(expected)) == len(expected)  # distinct texts, distinct scores: the comparison can fail


def test_reward_model_object_with_processing_class_mixed_with_functions(tmp_path, reward_model_dir):
    model = AutoModelForSequenceClassification.from_pretrained(reward_model_dir, num_labels=1)
    trainer = ESTrainer(
        model=tiny_llama(),
        reward_funcs=[target_token_reward, model],
        args=make_args(tmp_path, reward_weights=[1.0, 0.5], max_steps=1, population_size=4),
        train_dataset=prompt_dataset(4),
        processing_class=tiny_tokenizer(),
        reward_processing_classes=[None, tiny_tokenizer()],
    )
    assert trainer.reward_func_names[1] == RewardModelReward(model, tiny_tokenizer()).__name__
    trainer.train()
    logged = {k for entry in trainer.state.log_history for k in entry}
    assert f"rewards/{trainer.reward_func_names[1]}/mean" in logged
    assert "rewards/target_token_reward/mean" in logged


def test_mismatched_processing_classes_are_an_error(reward_model_dir):
    with pytest.raises(ValueError, match="one per reward function"):
        resolve_reward_models([reward_model_dir, target_token_reward], [None])
    with pytest.raises(ValueError, match="not a reward model"):
        resolve_reward_models([target_token_reward], [tiny_tokenizer()])

"""Shared test fixtures: tiny random models and synthetic rewards."""

from __future__ import annotations

import os

from datasets import Dataset
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from hf_es import ESConfig, ESTrainer

TOKENIZER_DIR = os.path.join(os.path.dirname(__file__), "fixtures", "tokenizer")

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
"""tests/: the folder of the shared helpers and of the subprocess scripts (tests/scripts)."""


def tiny_tokenizer():
    """A small real BPE tokenizer with a chat template (SmolLM2's, shipped in tests/fixtures)."""
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_llama(seed: int = 0, vocab_size: int = 49152, **overrides) -> LlamaForCausalLM:
    """A random 2-layer Llama small enough to generate in milliseconds on CPU."""
    import torch

    torch.manual_seed(seed)
    values = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    values.update(overrides)
    config = LlamaConfig(**values)
    return LlamaForCausalLM(config).eval()


def prompt_dataset(num: int = 16, conversational: bool = False) -> Dataset:
    prompts = [f"Say something about number {i}." for i in range(num)]
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
    return Dataset.from_dict({"prompt": prompts, "target": [" the"] * num})


def target_token_reward(completion_ids, **kwargs):
    """Fraction of generated tokens in a target set (ids divisible by 3): graded, and climbable by ES."""
    return [sum(t % 3 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def make_args(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"),
        population_size=8,
        sigma=0.05,
        learning_rate=0.05,
        per_device_train_batch_size=4,
        max_completion_length=6,
        max_steps=2,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        use_cpu=True,
    )
    values.update(overrides)
    return ESConfig(**values)


def make_trainer(tmp_path, reward_funcs=target_token_reward, dataset=None, model=None, **overrides):
    return ESTrainer(
        model=model or tiny_llama(),
        reward_funcs=reward_funcs,
        args=make_args(tmp_path, **overrides),
        train_dataset=dataset if dataset is not None else prompt_dataset(16),
        processing_class=tiny_tokenizer(),
    )


def centre_snapshot(trainer):
    return {name: t.clone() for name, t in trainer.backend.centre.master.items()}

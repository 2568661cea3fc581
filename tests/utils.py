"""Shared test fixtures: tiny random models and synthetic rewards."""

from __future__ import annotations

import os

from datasets import Dataset
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

TOKENIZER_DIR = os.path.join(os.path.dirname(__file__), "fixtures", "tokenizer")


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

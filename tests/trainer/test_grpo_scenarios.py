"""TRL's own GRPOTrainer test scenarios (`tests/test_grpo_trainer.py` of huggingface/trl) and TRL's quick start, run
against ESTrainer with only the names swapped: `GRPOConfig` -> `ESConfig`, `GRPOTrainer` -> `ESTrainer`.

Each test keeps TRL's body (its field names, reward functions and assertions). What differs, and why:

- Model: TRL uses "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5", which is not available offline; a tiny random
  Llama saved to a local folder (`tiny_model_id`) stands in for it, passed by path as TRL passes its id.
- Data: TRL's "trl-internal-testing/zen" configs are not available offline; `load_dataset` below builds the same two
  configurations ("standard_prompt_only", "conversational_prompt_only") in memory from the same text.
- `ES_TEST_KNOBS` adds ES's own knobs, sized for a tiny random model on CPU (see there).
- Reward models given by name (TRL's "tiny-Qwen2ForSequenceClassification-2.5") are not supported by ESTrainer
  (`NotImplementedError`), so the scenarios that use one as their only reward use TRL's `reward_func` instead.
"""

import logging

import pytest
import torch
from datasets import Dataset
from utils import tiny_llama, tiny_tokenizer

from hf_es import ESConfig, ESTrainer

# The lines of "The Zen of Python" split as in TRL's "trl-internal-testing/zen" prompt-only configurations.
ZEN_PROMPTS = [
    "Beautiful is better than",
    "Explicit is",
    "Simple is better",
    "Complex",
    "Flat is better than",
    "Sparse is better",
]

# ES's own knobs (GRPOConfig has no equivalent). The defaults (population 32, sigma 1.5e-3, 3 epochs) train real
# models; a random 2-layer model needs a larger sigma for its greedy completions to differ between members (members
# that tie give no update), and 4 members x 2 steps keep each test at a few seconds on CPU.
ES_TEST_KNOBS = dict(population_size=4, sigma=0.05, max_steps=2, seed=0)


def load_dataset(path, name, split="train"):
    """In-memory stand-in for `datasets.load_dataset("trl-internal-testing/zen", name, split="train")`."""
    assert (path, split) == ("trl-internal-testing/zen", "train")
    if name == "standard_prompt_only":
        return Dataset.from_dict({"prompt": ZEN_PROMPTS})
    if name == "conversational_prompt_only":
        return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in ZEN_PROMPTS]})
    raise ValueError(name)


@pytest.fixture(scope="module")
def tiny_model_id(tmp_path_factory):
    """A local folder holding a tiny random causal LM and its tokenizer: stands in for TRL's tiny Hub model id."""
    path = tmp_path_factory.mktemp("tiny-LlamaForCausalLM")
    tiny_llama().save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def assert_all_params_changed(previous_trainable_params, trainer):
    for n, param in previous_trainable_params.items():
        new_param = trainer.model.get_parameter(n)
        assert not torch.equal(param, new_param), f"Parameter {n} has not changed."


def assert_es_step_logged(trainer, num_reward_funcs=1):
    """ES specifics: every step logged its population's reward spread and updated the centre (no tie skipped it)."""
    steps = [entry for entry in trainer.state.log_history if "update_norm" in entry]
    assert len(steps) == ES_TEST_KNOBS["max_steps"]
    for entry in steps:
        assert entry["population/skipped_members"] == 0
        assert entry["update_norm"] > 0
        assert entry["train_loss" if "train_loss" in entry else "loss"] == pytest.approx(-entry["reward"])
    assert trainer.state.global_step == ES_TEST_KNOBS["max_steps"]


def reward_len(completions, **kwargs):
    """TRL's reward_func of test_train_reward_func_standard: rewards longer completions."""
    return [float(len(completion)) for completion in completions]


@pytest.mark.parametrize("config_name", ["standard_prompt_only", "conversational_prompt_only"])
def test_train_dataset_format(tmp_path, tiny_model_id, config_name):
    # TRL's test_train / test_train_dataset_format; TRL scores with a reward model by name, replaced here by a
    # function of the completion's content (the only difference, see the module docstring).
    dataset = load_dataset("trl-internal-testing/zen", config_name, split="train")

    def reward_func(completions, **kwargs):
        contents = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [float(len(content)) for content in contents]

    training_args = ESConfig(
        output_dir=str(tmp_path),
        learning_rate=0.1,  # use higher lr because gradients are tiny and default lr can stall updates
        per_device_train_batch_size=3,  # reduce the batch size to reduce memory usage
        num_generations=3,  # reduce the number of generations to reduce memory usage
        max_completion_length=8,  # reduce the completion length to reduce memory usage
        report_to="none",
        **ES_TEST_KNOBS,
    )
    trainer = ESTrainer(model=tiny_model_id, reward_funcs=reward_func, args=training_args, train_dataset=dataset)

    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    assert_es_step_logged(trainer)

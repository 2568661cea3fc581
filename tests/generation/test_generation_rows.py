"""Bounded generation: `ESConfig.generation_max_rows` caps the rows of one transformers `generate` call."""

import pytest
import torch
from transformers import LlamaConfig
from utils import make_trainer, tiny_llama, tiny_tokenizer

from hf_es.es import GaussianNoise, make_population
from hf_es.generation import SamplingConfig, TransformersGenerationBackend
from hf_es.generation.transformers_backend import rows_that_fit


def test_capped_low_rank_population_makes_several_calls_and_returns_what_one_call_returns():
    prompts = ["Say something about number 1.", "Hello there, how are", "One two three", "Colours: red"]
    members = make_population(noise_seed=2, step=1, population_size=8)
    sampling = SamplingConfig(max_completion_length=6, temperature=0.0)

    def run(batch_size):
        backend = TransformersGenerationBackend(tiny_llama(seed=3), tiny_tokenizer(), batch_size=batch_size)
        backend.init_centre(GaussianNoise(), perturbation="low_rank", rank=2)
        calls = []
        generate = backend.model.generate
        backend.model.generate = lambda **kwargs: calls.append(kwargs["input_ids"].shape[0]) or generate(**kwargs)
        return [r.completion_ids for r in backend.generate_members(members, prompts, sampling, sigma=0.3)], calls

    capped, capped_calls = run(8)
    whole, whole_calls = run(None)
    assert whole_calls == [32] and len(capped_calls) >= 4 and max(capped_calls) <= 8
    assert capped == whole
    assert len({tuple(map(tuple, ids)) for ids in whole}) > 1  # members really differ


def test_the_config_cap_reaches_the_backend_and_defaults_to_free_memory(tmp_path):
    assert make_trainer(tmp_path, generation_max_rows=8).backend.batch_size == 8
    backend = make_trainer(tmp_path).backend
    assert backend.batch_size == "auto"
    assert backend._rows_per_call(["a prompt"], SamplingConfig(), 40) == 40  # no cap on the CPU
    with pytest.raises(ValueError, match="generation_max_rows must be None"):
        make_trainer(tmp_path, generation_max_rows=0)


def test_rows_that_fit_follow_the_model_shape_and_the_free_memory():
    # Qwen2.5-1.5B's shape in bf16: 28 layers, 2 KV heads of 128, hidden 1536, MLP 8960, vocabulary 151936.
    config = LlamaConfig(
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        hidden_size=1536,
        intermediate_size=8960,
        vocab_size=151936,
    )
    gib = 1 << 30
    per_row = 2 * 28 * 2 * 128 * 4096 * 2 + 4096 * (3 * 8960 + 4 * 1536) * 2 + 2 * 151936 * 4
    assert rows_that_fit(config, 4096, 40 * gib, torch.bfloat16) == int(40 * gib * 0.8) // per_row == 88
    assert rows_that_fit(config, 8192, 40 * gib, torch.bfloat16) == 44  # twice the tokens, half the rows
    assert rows_that_fit(config, 4096, 1 << 20, torch.bfloat16) == 1  # never zero


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_samples_of_one_prompt_share_its_prefill_and_match_the_unshared_path(temperature, batch_size):
    # Pass@K draws M samples of one prompt per call: the prompt's KV is computed once and repeated over the rows.
    backend = TransformersGenerationBackend(tiny_llama(seed=5), tiny_tokenizer(), batch_size=batch_size)
    sampling = SamplingConfig(max_completion_length=6, temperature=temperature, num_generations=8)
    prompt = ["Say something about number 7, please."]
    cache = backend._shared_prompt_cache(prompt[0])
    prompt_tokens = len(tiny_tokenizer()(prompt[0], add_special_tokens=False)["input_ids"])
    assert cache is not None and cache.get_seq_length() == prompt_tokens - 1
    forwards = []
    hook = backend.model.register_forward_pre_hook(lambda _, args, kwargs: forwards.append(kwargs["input_ids"].shape), with_kwargs=True)  # fmt: skip
    shared = backend.generate(prompt, sampling, seed=11)
    hook.remove()
    # the prefill once at batch 1, then every generate step sees one new token per row
    assert forwards[0] == (1, prompt_tokens - 1) and all(shape[1] == 1 for shape in forwards[1:])
    backend._shared_prompt_cache = lambda text: None
    unshared = backend.generate(prompt, sampling, seed=11)
    assert shared.completion_ids == unshared.completion_ids and shared.truncated == unshared.truncated
    if temperature:
        assert len({tuple(ids) for ids in shared.completion_ids}) > 1  # really sampled

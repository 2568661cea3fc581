#!/usr/bin/env python
# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""
Pass@K / Maj@K evaluation of one or more checkpoints, with Pass@K profile and Pareto plots.

For every checkpoint (local folder or Hub id) and every problem of the dataset, samples M completions (default 32, at
temperature 0.6) with vLLM when it is installed and a GPU is present, transformers otherwise; optionally adds a greedy
pass; scores every completion with the dataset's verifier; and writes

- `<output_dir>/results.json`: per checkpoint and per problem the number of correct samples `c` (and the per-sample
  correctness, extracted answers, greedy correctness, per-K majority-vote correctness), plus the summary
  Pass@K for K = 1..M, Maj@K, greedy accuracy, the settings and the model revision;
- `<output_dir>/pass_at_k.png`: Pass@K against K (log2 axis), one curve per checkpoint;
- `<output_dir>/pareto.png`: Pass@1 against Pass@16 / Pass@32 (or Pass@M when M is smaller) across checkpoints,
  non-dominated checkpoints marked.

Re-running with the same output directory resumes: finished problems are read back from the JSON and only the missing
ones are generated (the model is not even loaded when nothing is missing). Changing a setting that affects the numbers
(M, temperature, max new tokens, ...) for an existing checkpoint is refused unless `--overwrite` is given.

Examples:

```bash
python scripts/evaluate_pass_at_k.py --model Qwen/Qwen2.5-1.5B-Instruct outputs/es/checkpoint-500 \
    --dataset gsm8k --num_samples 32 --greedy --output_dir outputs/eval_gsm8k
python scripts/evaluate_pass_at_k.py --model ./my_ckpt --dataset problems.jsonl --reward accuracy \
    --num_samples 4 --max_problems 20 --max_new_tokens 64 --output_dir outputs/eval_small
```

A local JSONL needs a `prompt` column (text or chat messages) and whatever the reward function reads (the bundled
math verifier reads the gold answer from `solution`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("evaluate_pass_at_k")

FORMAT_VERSION = 1
# Settings that change the numbers: a resumed run must agree on all of them.
RESUME_KEYS = (
    "dataset",
    "split",
    "reward",
    "num_samples",
    "temperature",
    "top_p",
    "top_k",
    "max_new_tokens",
    "seed",
    "system_prompt",
    "chat_template",
)

# Make `hf_es` importable when the script is run from a source checkout without installing the package.
_REPO_ROOT = Path(__file__).resolve().parent.parent
if (_REPO_ROOT / "hf_es").is_dir() and str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from hf_es.metrics.estimators import estimate_maj_at_k, estimate_pass_at_k  # noqa: E402

# --------------------------------------------------------------------------------------------------------------------
# Arguments


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """
    Command-line arguments of the script.

    Args:
        argv (`Sequence[str]`, *optional*): arguments (defaults to `sys.argv[1:]`).

    Returns:
        `argparse.Namespace`.
    """
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--model", nargs="+", required=True, help="Checkpoints: local folders or Hub ids.")
    parser.add_argument(
        "--dataset",
        required=True,
        help="gsm8k, math500, countdown, or a local .jsonl/.json file with a `prompt` column.",
    )
    parser.add_argument("--split", default="test", help="Dataset split (ignored for local files).")
    parser.add_argument(
        "--reward",
        default=None,
        help="Verifier: `accuracy` (math-verify against `solution`), `countdown`, or `package.module:function` "
        "(TRL convention f(prompts, completions, **columns) -> list[float]). Default: by dataset.",
    )
    parser.add_argument(
        "--correct_threshold", type=float, default=1.0, help="A sample is correct when its reward is >= this."
    )
    parser.add_argument("--max_problems", type=int, default=None, help="Evaluate only the first N problems.")
    parser.add_argument("--num_samples", "-M", type=int, default=32, help="Samples per problem (M).")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument("--top_k", type=int, default=0)
    parser.add_argument("--max_new_tokens", type=int, default=1024)
    parser.add_argument("--greedy", action="store_true", help="Also decode greedily once per problem.")
    parser.add_argument(
        "--maj",
        choices=("auto", "on", "off"),
        default="auto",
        help="Majority vote over extracted answers (auto: on except for countdown).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--system_prompt", default=None, help="Prepended as a system message to chat prompts.")
    parser.add_argument(
        "--no_chat_template", action="store_true", help="Feed text prompts as-is instead of as a user message."
    )
    parser.add_argument("--backend", choices=("auto", "vllm", "transformers"), default="auto")
    parser.add_argument(
        "--batch_size", type=int, default=64, help="Most sequences per `generate` call (transformers)."
    )
    parser.add_argument("--problems_per_call", type=int, default=None, help="Problems per generation call.")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16, float16 or float32.")
    parser.add_argument("--revision", default=None, help="Hub revision (applies to every Hub checkpoint).")
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.85, help="vLLM only.")
    parser.add_argument("--save_completions", action="store_true", help="Store the completion texts in the JSON.")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--overwrite", action="store_true", help="Discard stored results that disagree on settings.")
    parser.add_argument("--plot_only", action="store_true", help="Redraw the plots from the JSON; generate nothing.")
    parser.add_argument("--no_progress", action="store_true", help="Disable the progress bar.")
    args = parser.parse_args(argv)
    if args.num_samples < 1:
        parser.error("--num_samples must be >= 1")
    if args.temperature <= 0 and args.num_samples > 1:
        parser.error("--temperature must be > 0 to draw several samples (use --greedy for greedy decoding)")
    return args


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings recorded in the JSON (those in `RESUME_KEYS` must match to resume)."""
    return {
        "dataset": args.dataset,
        "split": None if _is_local_file(args.dataset) else args.split,
        "reward": args.reward or default_reward_name(args.dataset),
        "correct_threshold": args.correct_threshold,
        "num_samples": args.num_samples,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "max_new_tokens": args.max_new_tokens,
        "greedy": args.greedy,
        "seed": args.seed,
        "system_prompt": args.system_prompt,
        "chat_template": not args.no_chat_template,
        "max_problems": args.max_problems,
    }


# --------------------------------------------------------------------------------------------------------------------
# Data and verifiers


def _is_local_file(name: str) -> bool:
    return name.endswith((".jsonl", ".json")) or os.path.isfile(name)


def default_reward_name(dataset: str) -> str:
    """`countdown` for the Countdown dataset, `accuracy` (math-verify against `solution`) otherwise."""
    return "countdown" if dataset.lower() == "countdown" else "accuracy"


_DATA_LOADERS = {
    "gsm8k": ("load_gsm8k", "gsm8k"),
    "math500": ("load_math500", "math500", "load_math_500", "math_500"),
    "math-500": ("load_math500", "math500", "load_math_500", "math_500"),
    "countdown": ("load_countdown", "countdown"),
}


def load_problems(dataset: str, split: str, max_problems: int | None = None):
    """
    Load the evaluation problems as a `datasets.Dataset` with a `prompt` column (text or chat messages).

    Named datasets come from `hf_es.data`; a local `.jsonl` / `.json` file is read with `datasets`.

    Args:
        dataset (`str`): `gsm8k`, `math500`, `countdown` or a local file.
        split (`str`): the split of a named dataset.
        max_problems (`int`, *optional*): keep the first N problems.

    Returns:
        `datasets.Dataset`.
    """
    import datasets

    if _is_local_file(dataset):
        data = datasets.load_dataset("json", data_files=dataset, split="train")
    else:
        key = dataset.lower()
        if key not in _DATA_LOADERS:
            raise ValueError(f"Unknown dataset {dataset!r}: use gsm8k, math500, countdown or a local .jsonl file.")
        import hf_es.data as hf_data

        loader = next((getattr(hf_data, name) for name in _DATA_LOADERS[key] if hasattr(hf_data, name)), None)
        if loader is None:
            raise ImportError(f"hf_es.data has no loader for {dataset!r} (looked for {_DATA_LOADERS[key]}).")
        data = loader(split=split)
    if "prompt" not in data.column_names:
        raise ValueError(f"The dataset needs a `prompt` column; it has {data.column_names}.")
    if max_problems is not None:
        data = data.select(range(min(max_problems, len(data))))
    return data


def load_reward(name: str) -> Callable[..., list[float | None]]:
    """
    Resolve a verifier: `accuracy`, `countdown` (`hf_es.rewards.<name>_reward`) or `package.module:function`.

    Args:
        name (`str`): the reward name.

    Returns:
        A TRL-style reward function `f(prompts, completions, **columns) -> list[float | None]`.
    """
    if ":" in name:
        module_name, function_name = name.split(":", 1)
        return getattr(importlib.import_module(module_name), function_name)
    import hf_es.rewards

    function = getattr(hf_es.rewards, f"{name}_reward", None)
    if function is None:
        raise ValueError(f"Unknown reward {name!r}: use accuracy, countdown, or package.module:function.")
    return function


def problem_id(example: dict[str, Any], index: int) -> str:
    """The `id` / `unique_id` / `problem_id` column when present, else the row index."""
    for key in ("id", "unique_id", "problem_id"):
        if example.get(key) is not None:
            return str(example[key])
    return str(index)


def score_completions(
    reward_fn: Callable[..., list[float | None]],
    example: dict[str, Any],
    completions: list[str],
    threshold: float,
) -> list[bool]:
    """
    Score the completions of one problem with a TRL-style reward function.

    Args:
        reward_fn: `f(prompts, completions, **columns)`.
        example (`dict`): the dataset row (its columns are passed through, repeated per completion).
        completions (`list[str]`): the completion texts.
        threshold (`float`): a reward `>= threshold` counts as correct (`None` counts as wrong).

    Returns:
        `list[bool]`: per-completion correctness.
    """
    n = len(completions)
    prompt = example["prompt"]
    conversational = isinstance(prompt, list)
    formatted = [[{"role": "assistant", "content": text}] for text in completions] if conversational else completions
    columns = {key: [value] * n for key, value in example.items() if key not in ("prompt", "completion")}
    rewards = reward_fn(prompts=[prompt] * n, completions=formatted, **columns)
    return [reward is not None and float(reward) >= threshold for reward in rewards]


# --------------------------------------------------------------------------------------------------------------------
# Generation


@dataclass
class Sampling:
    """How to sample (mirrors `hf_es.generation.SamplingConfig`)."""

    num_generations: int
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 1024


class TransformersGenerator:
    """Generation with `hf_es.generation.TransformersGenerationBackend` (transformers `generate`)."""

    name = "transformers"

    def __init__(self, model_name: str, args: argparse.Namespace):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from hf_es.generation import TransformersGenerationBackend

        device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = args.dtype
        if dtype == "auto":
            dtype = torch.bfloat16 if device == "cuda" else torch.float32
        else:
            dtype = getattr(torch, dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(model_name, revision=args.revision)
        self.model = AutoModelForCausalLM.from_pretrained(model_name, revision=args.revision, dtype=dtype).to(device)
        self.model.eval()
        self.backend = TransformersGenerationBackend(self.model, self.tokenizer, batch_size=args.batch_size)

    @property
    def commit_hash(self) -> str | None:
        return getattr(self.model.config, "_commit_hash", None)

    def generate(self, prompts: list[str], sampling: Sampling, seeds: list[int]) -> list[list[str]]:
        from hf_es.generation import SamplingConfig

        config = SamplingConfig(
            max_completion_length=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            num_generations=sampling.num_generations,
        )
        # One call per problem, seeded by the problem, so results do not depend on batching or on resuming.
        outputs = []
        for prompt, seed in zip(prompts, seeds):
            result = self.backend.generate([prompt], config, seed=seed)
            outputs.append(result.completions)
        return outputs


class VLLMGenerator:
    """Generation with a vLLM engine, one seeded request per problem."""

    name = "vllm"

    def __init__(self, model_name: str, args: argparse.Namespace):
        from vllm import LLM

        self.llm = LLM(
            model=model_name,
            revision=args.revision,
            dtype=args.dtype,
            seed=args.seed,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.commit_hash = None

    def generate(self, prompts: list[str], sampling: Sampling, seeds: list[int]) -> list[list[str]]:
        from vllm import SamplingParams

        params = [
            SamplingParams(
                n=sampling.num_generations,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k if sampling.top_k > 0 else -1,
                max_tokens=sampling.max_new_tokens,
                seed=seed,
            )
            for seed in seeds
        ]
        # The chat template already holds the special tokens: do not let the tokenizer add a second BOS.
        token_prompts = [
            {"prompt_token_ids": self.tokenizer(prompt, add_special_tokens=False)["input_ids"]} for prompt in prompts
        ]
        outputs = self.llm.generate(token_prompts, params, use_tqdm=False)
        return [[completion.text for completion in output.outputs] for output in outputs]


def _vllm_usable() -> bool:
    try:
        import torch

        importlib.import_module("vllm")
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - any import problem means "not usable"
        return False


def build_generator(model_name: str, args: argparse.Namespace):
    """
    Load a checkpoint into a generator: vLLM when requested or (auto) installed with a GPU, transformers otherwise.

    Args:
        model_name (`str`): local folder or Hub id.
        args (`argparse.Namespace`): the script arguments.

    Returns:
        An object with `name`, `tokenizer`, `commit_hash` and `generate(prompts, sampling, seeds) -> list[list[str]]`.
    """
    backend = args.backend
    if backend == "auto":
        backend = "vllm" if _vllm_usable() else "transformers"
    if backend == "vllm":
        return VLLMGenerator(model_name, args)
    return TransformersGenerator(model_name, args)


def render_prompt(tokenizer, prompt: str | list[dict[str, str]], args: argparse.Namespace) -> str:
    """Apply the chat template (text prompts become a user message unless `--no_chat_template`)."""
    if isinstance(prompt, str) and (args.no_chat_template or tokenizer.chat_template is None):
        return prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if args.system_prompt and not any(message["role"] == "system" for message in messages):
        messages = [{"role": "system", "content": args.system_prompt}] + messages
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def problem_seed(seed: int, index: int) -> int:
    """A 31-bit sampling seed that depends only on the run seed and the problem's row index."""
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


# --------------------------------------------------------------------------------------------------------------------
# Results file


def model_revision(model_name: str, commit_hash: str | None = None, revision: str | None = None) -> dict[str, Any]:
    """
    Identify the weights that were evaluated.

    A local folder is fingerprinted from its weight files (name, size, and a hash of their first and last MiB); a Hub
    checkpoint records the requested revision and the resolved commit.

    Args:
        model_name (`str`): local folder or Hub id.
        commit_hash (`str`, *optional*): the commit transformers resolved (`config._commit_hash`).
        revision (`str`, *optional*): the requested Hub revision.

    Returns:
        `dict`: `{"source": "local", "path", "fingerprint"}` or `{"source": "hub", "revision", "commit"}`.
    """
    path = Path(model_name)
    if path.is_dir():
        digest = hashlib.sha256()
        for file in sorted(path.iterdir()):
            if file.suffix in (".safetensors", ".bin", ".gguf", ".pt") or file.name == "config.json":
                size = file.stat().st_size
                digest.update(f"{file.name}:{size}".encode())
                with open(file, "rb") as handle:
                    digest.update(handle.read(1 << 20))
                    if size > 2 << 20:
                        handle.seek(-(1 << 20), os.SEEK_END)
                        digest.update(handle.read())
        return {"source": "local", "path": str(path.resolve()), "fingerprint": digest.hexdigest()[:16]}
    return {"source": "hub", "revision": revision or "main", "commit": commit_hash}


def load_results(path: Path) -> dict[str, Any]:
    """Read the results JSON, or return an empty skeleton."""
    if path.exists():
        with open(path) as handle:
            results = json.load(handle)
        if results.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path} has format_version {results.get('format_version')}, expected {FORMAT_VERSION}.")
        return results
    return {"format_version": FORMAT_VERSION, "checkpoints": {}}


def save_results(results: dict[str, Any], path: Path) -> None:
    """Write the JSON atomically (a crash never leaves a truncated file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w") as handle:
        json.dump(results, handle, indent=1)
    os.replace(tmp, path)


def summarize(problems: dict[str, dict[str, Any]], num_samples: int) -> dict[str, Any]:
    """
    Aggregate per-problem records into Pass@K (K = 1..M), Maj@K and greedy accuracy.

    Args:
        problems (`dict`): per problem id, a record with `num_samples`, `num_correct`, optionally `maj_correct` (list
            over K = 1..M) and `greedy_correct`.
        num_samples (`int`): M.

    Returns:
        `dict`: `num_problems`, `mean_sample_accuracy`, `pass@k` and `maj@k` (dicts keyed by K as a string), and
        `greedy_accuracy` (or `None`).
    """
    records = list(problems.values())
    if not records:
        return {"num_problems": 0}
    ks = range(1, num_samples + 1)
    pass_at = {
        str(k): sum(estimate_pass_at_k(r["num_samples"], r["num_correct"], k) for r in records) / len(records)
        for k in ks
    }
    summary: dict[str, Any] = {
        "num_problems": len(records),
        "mean_sample_accuracy": sum(r["num_correct"] / r["num_samples"] for r in records) / len(records),
        "pass@k": pass_at,
    }
    if all(r.get("maj_correct") is not None for r in records):
        summary["maj@k"] = {str(k): sum(r["maj_correct"][k - 1] for r in records) / len(records) for k in ks}
    else:
        summary["maj@k"] = None
    greedy = [r["greedy_correct"] for r in records if r.get("greedy_correct") is not None]
    summary["greedy_accuracy"] = sum(greedy) / len(greedy) if greedy and len(greedy) == len(records) else None
    return summary


# --------------------------------------------------------------------------------------------------------------------
# Plots


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """
    Which points are non-dominated (no other point is at least as good on both axes and better on one).

    Args:
        points (`Sequence[tuple[float, float]]`): (x, y) pairs, larger is better on both axes.

    Returns:
        `list[bool]`: `True` for Pareto-optimal points.
    """
    flags = []
    for i, (x, y) in enumerate(points):
        dominated = any((ox >= x and oy >= y) and (ox > x or oy > y) for j, (ox, oy) in enumerate(points) if j != i)
        flags.append(not dominated)
    return flags


def _label(name: str) -> str:
    path = Path(name)
    if path.exists():
        parts = path.resolve().parts
        return "/".join(parts[-2:]) if path.name.startswith("checkpoint") else path.name
    return name


def plot_results(results: dict[str, Any], output_dir: Path) -> list[Path]:
    """
    Draw `pass_at_k.png` (Pass@K profiles, log2 K axis) and `pareto.png` (Pass@1 vs Pass@16/Pass@32).

    Args:
        results (`dict`): the results JSON.
        output_dir (`Path`): where to write the PNGs.

    Returns:
        `list[Path]`: the written files.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    checkpoints = {
        name: entry
        for name, entry in results["checkpoints"].items()
        if entry.get("summary", {}).get("num_problems", 0) > 0
    }
    if not checkpoints:
        return []
    written = []
    dataset = results.get("settings", {}).get("dataset", "")

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    max_k = 1
    for name, entry in checkpoints.items():
        curve = entry["summary"]["pass@k"]
        ks = sorted(int(k) for k in curve)
        max_k = max(max_k, ks[-1])
        ax.plot(ks, [100 * curve[str(k)] for k in ks], marker="o", markersize=3, label=_label(name))
    ax.set_xscale("log", base=2)
    ticks = [2**i for i in range(int(math.log2(max_k)) + 1)]
    if ticks[-1] != max_k:
        ticks.append(max_k)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel("K (samples)")
    ax.set_ylabel("Pass@K (%)")
    ax.set_title(f"Pass@K profile{' - ' + dataset if dataset else ''}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = output_dir / "pass_at_k.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    common_max = min(int(max(entry["summary"]["pass@k"], key=int)) for entry in checkpoints.values())
    targets = sorted({k for k in (16, 32) if k <= common_max} or {common_max})
    fig, axes = plt.subplots(1, len(targets), figsize=(5.2 * len(targets), 4.4), squeeze=False)
    for ax, k in zip(axes[0], targets):
        names = list(checkpoints)
        points = [
            (100 * checkpoints[n]["summary"]["pass@k"]["1"], 100 * checkpoints[n]["summary"]["pass@k"][str(k)])
            for n in names
        ]
        front = pareto_front(points)
        for (x, y), name, optimal in zip(points, names, front):
            ax.scatter([x], [y], s=80 if optimal else 40, marker="*" if optimal else "o", zorder=3, label=_label(name))
            ax.annotate(_label(name), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        frontier = sorted(p for p, optimal in zip(points, front) if optimal)
        if len(frontier) > 1:
            ax.plot([p[0] for p in frontier], [p[1] for p in frontier], "k--", linewidth=1, alpha=0.6)
        ax.margins(x=0.3, y=0.15)  # room for the labels
        ax.set_xlabel("Pass@1 (%)")
        ax.set_ylabel(f"Pass@{k} (%)")
        ax.set_title(f"Pass@1 vs Pass@{k} (stars: Pareto-optimal)")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = output_dir / "pareto.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written


# --------------------------------------------------------------------------------------------------------------------
# Main loop


def _check_resume(entry: dict[str, Any], settings: dict[str, Any], name: str, overwrite: bool) -> dict[str, Any]:
    stored = entry.get("settings", {})
    mismatched = [key for key in RESUME_KEYS if key in stored and stored[key] != settings[key]]
    if mismatched and not overwrite:
        details = ", ".join(f"{key}: stored {stored[key]!r} vs now {settings[key]!r}" for key in mismatched)
        raise ValueError(
            f"Stored results for {name} were produced with different settings ({details}). Use another --output_dir "
            "or pass --overwrite to discard them."
        )
    if mismatched:
        logger.warning("Discarding stored results for %s (settings changed: %s).", name, mismatched)
        return {}
    return entry


def evaluate_checkpoint(
    name: str,
    data,
    args: argparse.Namespace,
    results: dict[str, Any],
    results_path: Path,
) -> dict[str, Any]:
    """
    Evaluate one checkpoint, resuming from `results`, saving after every generation call.

    A stored problem is reused when its M, its prompt (hash) and the settings match; only what is missing is
    generated (e.g. adding `--greedy` later only runs the greedy pass). The model is loaded only if something must be
    generated.

    Args:
        name (`str`): local folder or Hub id.
        data (`datasets.Dataset`): the problems.
        args (`argparse.Namespace`): the script arguments.
        results (`dict`): the results JSON (updated in place).
        results_path (`Path`): where to save it.

    Returns:
        `dict`: the checkpoint's entry.
    """
    from tqdm.auto import tqdm

    settings = run_settings(args)
    entry = _check_resume(results["checkpoints"].get(name, {}), settings, name, args.overwrite)
    revision = model_revision(name, revision=args.revision)
    if revision["source"] == "local" and entry.get("revision", {}).get("fingerprint") not in (
        None,
        revision["fingerprint"],
    ):
        if not args.overwrite:
            raise ValueError(
                f"The weights in {name} changed since the stored results were computed (fingerprint "
                f"{entry['revision']['fingerprint']} vs {revision['fingerprint']}). Pass --overwrite to re-evaluate."
            )
        entry = {}
    problems: dict[str, dict[str, Any]] = entry.get("problems", {})
    entry = {**entry, "model": name, "revision": entry.get("revision", revision), "settings": settings}
    entry["problems"] = problems
    results["checkpoints"][name] = entry

    use_maj = args.maj == "on" or (args.maj == "auto" and settings["reward"] != "countdown")
    reward_fn = load_reward(settings["reward"])
    ids = [problem_id(data[i], i) for i in range(len(data))]
    if len(set(ids)) != len(ids):
        ids = [str(i) for i in range(len(data))]
    prompt_hashes = [_prompt_hash(data[i]["prompt"]) for i in range(len(data))]

    def has_samples(index: int) -> bool:
        record = problems.get(ids[index])
        return (
            record is not None
            and record.get("num_samples") == args.num_samples
            and record.get("prompt_sha") == prompt_hashes[index]
        )

    def is_done(index: int) -> bool:
        if not has_samples(index):
            return False
        record = problems[ids[index]]
        if use_maj and record.get("maj_correct") is None:
            return False
        return not args.greedy or record.get("greedy_correct") is not None

    todo = [i for i in range(len(ids)) if not is_done(i)]
    reused = len(ids) - len(todo)
    logger.info("%s: %d problems, %d reused from %s, %d to generate.", name, len(ids), reused, results_path, len(todo))
    entry["num_reused_last_run"] = reused

    def finish(entry: dict[str, Any]) -> None:
        # Dataset order first; problems stored by earlier runs over a larger selection are kept, not summarised.
        ordered = {pid: problems[pid] for pid in ids if pid in problems}
        ordered.update({pid: record for pid, record in problems.items() if pid not in ordered})
        entry["problems"] = ordered
        entry["summary"] = summarize({pid: ordered[pid] for pid in ids if pid in ordered}, args.num_samples)
        save_results(results, results_path)

    generator = None
    if any(not has_samples(i) or (args.greedy and problems[ids[i]].get("greedy_correct") is None) for i in todo):
        generator = build_generator(name, args)
        entry["revision"] = model_revision(name, commit_hash=generator.commit_hash, revision=args.revision)
        entry["backend"] = generator.name
    sampling = Sampling(args.num_samples, args.temperature, args.top_p, args.top_k, args.max_new_tokens)
    greedy = Sampling(1, 0.0, 1.0, 0, args.max_new_tokens)
    per_call = args.problems_per_call or (64 if generator is not None and generator.name == "vllm" else 1)
    start_time = time.time()
    progress = tqdm(total=len(ids), initial=reused, desc=_label(name), disable=args.no_progress, unit="problem")
    for start in range(0, len(todo), per_call):
        chunk = todo[start : start + per_call]
        examples = {i: data[i] for i in chunk}
        prompts = (
            {i: render_prompt(generator.tokenizer, examples[i]["prompt"], args) for i in chunk} if generator else {}
        )
        need_samples = [i for i in chunk if not has_samples(i)]
        if need_samples:
            outputs = generator.generate(
                [prompts[i] for i in need_samples], sampling, [problem_seed(args.seed, i) for i in need_samples]
            )
            for index, completions in zip(need_samples, outputs):
                correct = score_completions(reward_fn, examples[index], completions, args.correct_threshold)
                record: dict[str, Any] = {
                    "index": index,
                    "prompt_sha": prompt_hashes[index],
                    "num_samples": len(completions),
                    "num_correct": sum(correct),
                    "correct": correct,
                    "answers": [extract_final_answer(text) for text in completions],
                    "seed": problem_seed(args.seed, index),
                }
                if args.save_completions:
                    record["completions"] = completions
                problems[ids[index]] = record
        need_greedy = [i for i in chunk if args.greedy and problems[ids[i]].get("greedy_correct") is None]
        if need_greedy:
            outputs = generator.generate([prompts[i] for i in need_greedy], greedy, [0] * len(need_greedy))
            for index, completions in zip(need_greedy, outputs):
                record = problems[ids[index]]
                record["greedy_correct"] = score_completions(
                    reward_fn, examples[index], completions, args.correct_threshold
                )[0]
                if args.save_completions:
                    record["greedy_completion"] = completions[0]
        for index in chunk:
            record = problems[ids[index]]
            if use_maj and record.get("maj_correct") is None:
                example = examples[index]
                gold = extract_gold_answer(example.get("solution", example.get("answer")))
                if gold is None:
                    raise ValueError("Maj@K needs the gold answer in a `solution` column; pass --maj off.")
                ks = range(1, record["num_samples"] + 1)
                maj = estimate_maj_at_k([record["answers"]], [gold], ks, problem_ids=[ids[index]])
                record["maj_correct"] = [maj[k]["correct"][0] for k in ks]
        finish(entry)
        progress.update(len(chunk))
    progress.close()
    if generator is not None:
        entry["generation_seconds_last_run"] = round(time.time() - start_time, 2)
        del generator
    finish(entry)
    return entry


def _prompt_hash(prompt: Any) -> str:
    return hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()[:12]


def extract_final_answer(completion: str) -> str | None:
    """
    The final answer of a completion, extracted the way the verifier does (`hf_es.rewards.extract_answer`: boxed,
    `####`, "the answer is", last number), or `None` when there is none (the sample then abstains from Maj@K).
    """
    from hf_es.rewards import extract_answer

    answer = extract_answer(completion)
    return None if answer is None else str(answer)


def extract_gold_answer(solution: Any) -> str | None:
    """The gold final answer of a `solution` value (GSM8K `#### 18`, MATH `\\boxed{}`, or a bare answer)."""
    from hf_es.rewards import extract_gold

    gold = extract_gold(solution)
    return None if gold is None else str(gold)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """
    Run the evaluation and draw the plots.

    Args:
        argv (`Sequence[str]`, *optional*): command-line arguments.

    Returns:
        `dict`: the results JSON.
    """
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    results_path = output_dir / "results.json"
    results = load_results(results_path)
    if not args.plot_only:
        results["settings"] = run_settings(args)
        data = load_problems(args.dataset, args.split, args.max_problems)
        for name in args.model:
            evaluate_checkpoint(name, data, args, results, results_path)
            summary = results["checkpoints"][name]["summary"]
            line = ", ".join(
                f"pass@{k}={100 * summary['pass@k'][str(k)]:.1f}"
                for k in sorted({1, min(16, args.num_samples), args.num_samples})
            )
            if summary.get("maj@k"):
                line += f", maj@{args.num_samples}={100 * summary['maj@k'][str(args.num_samples)]:.1f}"
            if summary.get("greedy_accuracy") is not None:
                line += f", greedy={100 * summary['greedy_accuracy']:.1f}"
            logger.info("%s (%d problems): %s", name, summary["num_problems"], line)
    save_results(results, results_path)
    for path in plot_results(results, output_dir):
        logger.info("Wrote %s", path)
    return results


if __name__ == "__main__":
    main()

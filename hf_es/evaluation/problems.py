"""Evaluation problems and their verifiers: registered tasks ([`hf_es.tasks.TASKS`]) or local JSONL files."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from datasets import Dataset

from ..rewards import extract_answer, extract_gold, get_reward
from ..scoring import reward_inputs
from ..tasks import get_task, is_registered

__all__ = [
    "default_reward_name",
    "extract_final_answer",
    "extract_gold_answer",
    "is_local_file",
    "load_problems",
    "load_reward",
    "problem_id",
    "score_completions",
    "uses_majority_vote",
]


def is_local_file(name: str) -> bool:
    """Whether `name` names a local `.jsonl` / `.json` file rather than a registered task."""
    return name.endswith((".jsonl", ".json")) or os.path.isfile(name)


def default_reward_name(dataset: str) -> str:
    """The task's first default reward ([`hf_es.tasks.Task.rewards`]); `accuracy` for local files."""
    return "accuracy" if is_local_file(dataset) else get_task(dataset).rewards[0]


def uses_majority_vote(dataset: str) -> bool:
    """Whether Maj@K is meaningful for the task (`False` for Countdown, whose answers are equations)."""
    return True if is_local_file(dataset) else get_task(dataset).majority_vote


def load_problems(
    dataset: str,
    split: str = "test",
    max_problems: int | None = None,
    *,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
) -> Dataset:
    """Loads the evaluation problems as a Dataset with a `prompt` column (text or chat messages).

    Args:
        dataset: A registered task name or a local `.jsonl` / `.json` file.
        split: The split of a registered task (ignored for local files).
        max_problems: Keep at most this many problems (generated tasks generate exactly this many).
        seed: Data seed of the task (subsampling; the problems themselves for generated tasks), as `seed` in training.
        options: Loader parameters of the task, e.g. `{"operation": "add"}` for `arithmetic`.
        system_prompt: Overrides the task's system prompt (`""` removes it); local chat prompts get it prepended.

    Returns:
        The problems.
    """
    if is_local_file(dataset):
        import datasets

        data = datasets.load_dataset("json", data_files=dataset, split="train")
        if system_prompt:
            data = data.map(lambda row: {"prompt": _with_system_prompt(row["prompt"], system_prompt)})
    elif is_registered(dataset):
        overrides = {} if system_prompt is None else {"system_prompt": system_prompt or None}
        data = get_task(dataset).load(split, max_problems, seed, **dict(options or {}), **overrides)
    else:
        get_task(dataset)  # raises the registry's "Unknown task" message
    if "prompt" not in data.column_names:
        raise ValueError(f"The dataset needs a `prompt` column; it has {data.column_names}.")
    if max_problems is not None:
        data = data.select(range(min(max_problems, len(data))))
    return data


def _with_system_prompt(prompt: Any, system_prompt: str) -> Any:
    if isinstance(prompt, list) and not any(message["role"] == "system" for message in prompt):
        return [{"role": "system", "content": system_prompt}, *prompt]
    return prompt


def load_reward(name: str) -> Callable[..., list[float | None]]:
    """A verifier by name: a registered reward ([`hf_es.rewards.registered_rewards`]) or `package.module:function`.

    Returns:
        A TRL-style reward function `f(prompts, completions, **columns) -> list[float | None]`.
    """
    if ":" in name:
        module_name, function_name = name.split(":", 1)
        return getattr(importlib.import_module(module_name), function_name)
    return get_reward(name)


def problem_id(example: Mapping[str, Any], index: int) -> str:
    """The `id` / `unique_id` / `problem_id` column when present, else the row index."""
    for key in ("id", "unique_id", "problem_id"):
        if example.get(key) is not None:
            return str(example[key])
    return str(index)


def score_completions(
    reward_fn: Callable[..., list[float | None]],
    example: Mapping[str, Any],
    completions: list[str],
    threshold: float,
) -> list[bool]:
    """Per-completion correctness of one problem's completions under a TRL-style reward function.

    Args:
        reward_fn: `f(prompts, completions, **columns)`.
        example: The dataset row (its columns are passed through, repeated per completion).
        completions: The completion texts.
        threshold: A reward `>= threshold` counts as correct (`None` counts as wrong).

    Returns:
        One bool per completion.
    """
    prompts, formatted, columns = reward_inputs([example], completions, len(completions))
    rewards = reward_fn(prompts=prompts, completions=formatted, **columns)
    return [reward is not None and float(reward) >= threshold for reward in rewards]


def extract_final_answer(completion: str) -> str | None:
    """The final answer of a completion as the verifier extracts it (`None`: the sample abstains from Maj@K)."""
    answer = extract_answer(completion)
    return None if answer is None else str(answer)


def extract_gold_answer(solution: Any) -> str | None:
    """The gold final answer of a `solution` value (GSM8K `#### 18`, MATH `\\boxed{}`, or a bare answer)."""
    gold = extract_gold(solution)
    return None if gold is None else str(gold)

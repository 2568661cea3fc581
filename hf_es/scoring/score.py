"""Scoring completions with TRL-style reward functions, and the failure policy, for ES, the GRPO baseline and
evaluation.

[`score_completions`] calls every reward function once on a batch (TRL's signature: `prompts`, `completions`,
`completion_ids`, `trainer_state` and every dataset column but `prompt`, one value per completion) and applies two
rules, as in TRL 1.16's GRPOTrainer:

- `None` means "not applicable". A completion for which *every* function returns `None` is unscorable: a warning names
  its prompt and completion, and its total is NaN so that it is left out of the means (`nanmean`).
- A *faulty* function (it raises, runs past `timeout`, returns the wrong number of values or a NaN/inf) is handled by
  `policy`: `"error"` raises [`RewardFunctionError`], `"skip_member"` returns `None` (leave the whole batch out),
  `"zero"` scores the failing values 0.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .calls import RewardTimeout, call_with_timeout, missing_column
from .checks import RewardFunc, missing_column_message, reward_func_name

logger = logging.getLogger(__name__)

__all__ = ["FAILURE_POLICIES", "RewardFunctionError", "Scores", "reward_inputs", "score_completions"]

FAILURE_POLICIES = ("error", "skip_member", "zero")


class RewardFunctionError(RuntimeError):
    """A reward function raised, hung, returned the wrong number of values, or a non-finite value."""


@dataclass
class Scores:
    """Rewards of one batch of completions.

    Attributes:
        per_function (`torch.Tensor`): `(completions, functions)` float64, NaN where a function returned `None`.
        total (`torch.Tensor`): `(completions,)` weighted sum over the functions; NaN for an unscorable completion.
        failures (`int`): Faulty values replaced under `policy="zero"` (0 under the other policies).
    """

    per_function: torch.Tensor
    total: torch.Tensor
    failures: int = 0

    @property
    def scorable(self) -> torch.Tensor:
        """`(completions,)` bool: at least one function gave a value."""
        return ~torch.isnan(self.total)

    def mean(self) -> float:
        """Mean total over the scorable completions; NaN when none is scorable."""
        valid = self.total[self.scorable]
        return float(valid.mean()) if valid.numel() else float("nan")


def reward_inputs(
    inputs: Sequence[Mapping[str, Any]], completions: list[str], repeat: int = 1
) -> tuple[list[Any], list[Any], dict[str, list[Any]]]:
    """The data half of TRL's reward-function arguments, one entry per completion.

    Args:
        inputs: Dataset rows (each with `prompt`), in order; each produced `repeat` completions.
        completions: Completion texts, `repeat` per row, grouped by row.
        repeat: Completions per row.

    Returns:
        `(prompts, completions, columns)`: each row's prompt repeated `repeat` times; the completions, as assistant
        messages when the prompts are conversational; every other column (but `completion`) repeated likewise.
    """
    from ..prompts import is_conversational_prompt

    prompts = [example["prompt"] for example in inputs for _ in range(repeat)]
    if is_conversational_prompt(inputs[0]["prompt"]):
        completions = [[{"role": "assistant", "content": text}] for text in completions]
    columns = {
        key: [example[key] for example in inputs for _ in range(repeat)]
        for key in inputs[0]
        if key not in ("prompt", "completion")
    }
    return prompts, completions, columns


def _reward_kwargs(
    inputs: list[dict[str, Any]], completions: list[str], completion_ids, repeat: int, trainer_state, callbacks
):
    """TRL's reward-function arguments for `inputs` each repeated `repeat` times (one entry per completion)."""
    prompts, completions, columns = reward_inputs(inputs, completions, repeat)
    return dict(
        prompts=prompts,
        completions=completions,
        completion_ids=completion_ids,
        trainer_state=trainer_state,
        **dict(callbacks or {}),
        **columns,
    )


class _Skip(Exception):
    """Raised inside scoring when `policy="skip_member"` meets a faulty value."""


class _Fault(Exception):
    """A faulty reward-function call (raised, hung) that the failure policy handles."""


def _call_one(func, kwargs: dict[str, Any], timeout: float | None, columns: list[str], where: str) -> list[Any]:
    """Calls one reward function; a missing dataset column is a configuration error whatever the policy."""
    name = reward_func_name(func)
    try:
        values = call_with_timeout(func, timeout, kwargs)
    except RewardFunctionError:
        raise
    except RewardTimeout as error:
        first = kwargs["completions"][0]
        first = first[0]["content"] if isinstance(first, list) else first
        raise _Fault(
            f"Reward function {name!r} {error} on {len(kwargs['completion_ids'])} completions (completion 0 starts "
            f"{first[:80]!r})"
        ) from None
    except Exception as error:
        missing = missing_column(error, func, columns)
        if missing is not None:
            raise RewardFunctionError(
                f"Reward function {name!r} raised {type(error).__name__}: {error} ({where}). It "
                + missing_column_message(missing, columns, "dataset")
            ) from error
        raise _Fault(f"Reward function {name!r} raised {type(error).__name__}: {error}") from error
    return list(values) if values is not None else []


def score_completions(
    reward_funcs: Sequence[RewardFunc],
    reward_weights: torch.Tensor,
    inputs: list[dict[str, Any]],
    completions: list[str],
    completion_ids: list[list[int]],
    *,
    num_generations: int = 1,
    policy: str = "error",
    timeout: float | None = None,
    trainer_state: Any = None,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    where: str = "",
) -> Scores | None:
    """Scores completions with every reward function (TRL's convention) and applies the failure policy.

    Args:
        reward_funcs: The reward functions.
        reward_weights: `(functions,)` weights of the total.
        inputs: The dataset rows (each with `prompt`), in order; each produced `num_generations` completions.
        completions: Completion texts, `num_generations` per row, grouped by row.
        completion_ids: Their token ids.
        num_generations: Completions per row.
        policy: `"error"`, `"skip_member"` or `"zero"` (see the module docstring).
        timeout: Seconds one call of one function may take (`None`/0: no deadline).
        trainer_state: Passed to the functions as `trainer_state` (TRL's convention).
        callbacks: Further keyword arguments for the functions, e.g. TRL's `log_metric(name, value)` and
            `log_extra(column, values)`.
        where: Named in warnings and errors (e.g. `"step 3, member 5"`).

    Returns:
        [`Scores`], or `None` when `policy="skip_member"` met a faulty function.
    """
    kwargs = _reward_kwargs(inputs, completions, completion_ids, num_generations, trainer_state, callbacks)
    num, columns = len(completions), list(inputs[0])
    per_function = torch.full((num, len(reward_funcs)), float("nan"), dtype=torch.float64)
    failures = 0

    def fault(message: str) -> None:
        nonlocal failures
        failures += 1
        if policy == "error":
            raise RewardFunctionError(
                f"{message} ({where}). Fix the reward function, or set reward_failure='skip_member' to leave "
                "such members out of the update, or 'zero' to score failing samples 0."
            )
        logger.warning(f"{message} ({where}); reward_failure={policy!r}.")
        if policy == "skip_member":
            raise _Skip

    try:
        for j, func in enumerate(reward_funcs):
            name = reward_func_name(func)
            try:
                values = _call_one(func, kwargs, timeout, columns, where)
            except _Fault as error:
                fault(str(error))
                per_function[:, j] = 0.0
                continue
            if len(values) != num:
                fault(f"Reward function {name!r} returned {len(values)} values for {num} completions")
                per_function[:, j] = 0.0
                continue
            for i, value in enumerate(values):
                if value is None:  # "not applicable": TRL's convention, not a fault
                    continue
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    number = float("nan")
                if not math.isfinite(number):
                    fault(
                        f"Reward function {name!r} returned {value!r} for completion {i} "
                        f"(completion starts {completions[i][:80]!r})"
                    )
                    number = 0.0
                per_function[i, j] = number
    except _Skip:
        return None
    total = torch.nansum(per_function * reward_weights.to(per_function), dim=1)
    unscorable = torch.isnan(per_function).all(dim=1)
    total[unscorable] = float("nan")
    if bool(unscorable.any()):
        index = int(unscorable.nonzero()[0])
        logger.warning(
            f"Every reward function returned None for {int(unscorable.sum())} of {num} completions ({where}); they "
            f"are left out of the mean. First: prompt {kwargs['prompts'][index]!r}, completion "
            f"{completions[index][:200]!r}."
        )
    return Scores(per_function, total, failures)

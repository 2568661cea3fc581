"""Generated arithmetic problems: the CPU demo task, easy enough for a 135M model to be partly right."""

from __future__ import annotations

import operator
import random

from datasets import Dataset

from ._common import build_messages

__all__ = ["load_arithmetic"]

_OPERATIONS = {"add": ("+", operator.add), "sub": ("-", operator.sub), "mul": ("*", operator.mul)}


def load_arithmetic(
    num_samples: int = 256,
    operation: str = "mul",
    min_value: int = 2,
    max_value: int = 9,
    seed: int = 0,
    instruction: str | None = "Answer with just the number.",
    system_prompt: str | None = None,
    conversational: bool = True,
) -> Dataset:
    """Random problems `a <op> b = ?` with integer operands in `[min_value, max_value]`.

    Args:
        num_samples: Number of problems (operand pairs may repeat when the range is small).
        operation: `"add"`, `"sub"` or `"mul"`.
        min_value: Smallest operand.
        max_value: Largest operand.
        seed: Seed of the generator; use different seeds for train and evaluation sets.
        instruction: Format instruction appended to the question.
        system_prompt: Optional system message.
        conversational: `prompt` as chat messages (True) or plain text.

    Returns:
        A Dataset with `prompt` and `solution` (the exact answer, as a string).
    """
    if operation not in _OPERATIONS:
        raise ValueError(f"Unknown operation {operation!r}; use one of {sorted(_OPERATIONS)}.")
    if min_value > max_value:
        raise ValueError(f"min_value ({min_value}) must not exceed max_value ({max_value}).")
    symbol, apply = _OPERATIONS[operation]
    rng = random.Random(seed)
    prompts, solutions = [], []
    for _ in range(num_samples):
        a, b = rng.randint(min_value, max_value), rng.randint(min_value, max_value)
        messages = build_messages(f"What is {a} {symbol} {b}?", system_prompt, instruction)
        prompts.append(messages if conversational else "\n\n".join(m["content"] for m in messages))
        solutions.append(str(apply(a, b)))
    return Dataset.from_dict({"prompt": prompts, "solution": solutions})

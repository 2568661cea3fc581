"""Generated arithmetic problems: the CPU demo task, easy enough for a 135M model to be partly right."""

from __future__ import annotations

import operator
import random

from datasets import Dataset

from ._common import build_messages, hashed_split

__all__ = ["arithmetic_split_of", "load_arithmetic"]

_OPERATIONS = {"add": ("+", operator.add), "sub": ("-", operator.sub), "mul": ("*", operator.mul)}
_COMMUTATIVE = {"add", "mul"}


def arithmetic_split_of(a: int, b: int, operation: str, held_out_fraction: float) -> str:
    """The split (`"train"` or `"test"`) the problem `a <op> b` belongs to under a `held_out_fraction` partition.

    The split is a stable hash of the operation and the operands, unsalted by any seed, so every training seed's
    problems avoid every evaluation seed's; `a * b` and `b * a` (and `+`) fall in the same split, since they are the
    same fact.
    """
    first, second = sorted((a, b)) if operation in _COMMUTATIVE else (a, b)
    return hashed_split(f"{operation}|{first}|{second}", held_out_fraction)


def load_arithmetic(
    num_samples: int = 256,
    operation: str = "mul",
    min_value: int = 2,
    max_value: int = 9,
    seed: int = 0,
    instruction: str | None = "Answer with just the number.",
    system_prompt: str | None = None,
    conversational: bool = True,
    split: str | None = None,
    held_out_fraction: float = 0.0,
) -> Dataset:
    """Random problems `a <op> b = ?` with integer operands in `[min_value, max_value]`.

    Args:
        num_samples: Number of problems.
        operation: `"add"`, `"sub"` or `"mul"`.
        min_value: Smallest operand.
        max_value: Largest operand.
        seed: Seed of the generator; use different seeds for train and evaluation sets.
        instruction: Format instruction appended to the question.
        system_prompt: Optional system message.
        conversational: `prompt` as chat messages (True) or plain text.
        split: `"train"` or any evaluation split name; only read when `held_out_fraction > 0`.
        held_out_fraction: `0` draws operand pairs independently from the whole range (pairs repeat, and two seeds'
            draws overlap when the range is small). Above 0, the operand pairs are partitioned once and for all
            ([`arithmetic_split_of`]): `"train"` draws only from the `1 - held_out_fraction` share and every other
            split only from the rest, so training never sees an evaluation problem; pairs are drawn without
            repetition until the split's pairs run out, then in a fresh order again.

    Returns:
        A Dataset with `prompt` and `solution` (the exact answer, as a string).
    """
    if operation not in _OPERATIONS:
        raise ValueError(f"Unknown operation {operation!r}; use one of {sorted(_OPERATIONS)}.")
    if min_value > max_value:
        raise ValueError(f"min_value ({min_value}) must not exceed max_value ({max_value}).")
    if not 0.0 <= held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction must be in [0, 1), got {held_out_fraction}.")
    symbol, apply = _OPERATIONS[operation]
    rng = random.Random(seed)
    if held_out_fraction > 0:
        pairs = _split_pairs(operation, min_value, max_value, split or "train", held_out_fraction)
        operands = []
        while len(operands) < num_samples:  # every pair once per round, each round in a fresh order
            operands += rng.sample(pairs, len(pairs))
    else:
        values = (min_value, max_value)
        operands = [(rng.randint(*values), rng.randint(*values)) for _ in range(num_samples)]
    prompts, solutions = [], []
    for a, b in operands[:num_samples]:
        messages = build_messages(f"What is {a} {symbol} {b}?", system_prompt, instruction)
        prompts.append(messages if conversational else "\n\n".join(m["content"] for m in messages))
        solutions.append(str(apply(a, b)))
    return Dataset.from_dict({"prompt": prompts, "solution": solutions})


def _split_pairs(operation: str, min_value: int, max_value: int, split: str, fraction: float) -> list[tuple[int, int]]:
    wanted = "train" if split == "train" else "test"
    values = range(min_value, max_value + 1)
    pairs = [(a, b) for a in values for b in values if arithmetic_split_of(a, b, operation, fraction) == wanted]
    if not pairs:
        raise ValueError(
            f"No {operation} problems with operands in [{min_value}, {max_value}] fall in the {wanted!r} share of "
            f"held_out_fraction={fraction}; widen the operand range or change held_out_fraction."
        )
    return pairs

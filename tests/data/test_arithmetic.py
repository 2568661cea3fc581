"""Generated arithmetic: operands, answers, and the held-out partition that keeps evaluation problems out of training."""

from __future__ import annotations

import re

import pytest

from hf_es.data import load_arithmetic
from hf_es.data.arithmetic import arithmetic_split_of
from hf_es.tasks import TaskArguments, get_task, load_task

QUESTION = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")


def operand_pairs(dataset) -> list[tuple[int, str, int]]:
    pairs = []
    for prompt, solution in zip(dataset["prompt"], dataset["solution"]):
        a, symbol, b = QUESTION.search(prompt[-1]["content"]).groups()
        assert int(solution) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[symbol]
        pairs.append((int(a), symbol, int(b)))
    return pairs


def test_without_partition_the_split_is_ignored_and_operands_stay_in_range():
    train = load_arithmetic(64, "sub", 3, 7, seed=5, split="train")
    test = load_arithmetic(64, "sub", 3, 7, seed=5, split="test")
    assert train["prompt"] == test["prompt"]  # held_out_fraction=0: only the seed tells draws apart
    assert all(3 <= a <= 7 and 3 <= b <= 7 for a, _, b in operand_pairs(train))


@pytest.mark.parametrize("operation", ["add", "sub", "mul"])
def test_partitioned_splits_never_share_a_problem_whatever_the_seeds(operation):
    options = {"operation": operation, "min_value": 2, "max_value": 19, "held_out_fraction": 0.25}
    train = {
        pair for seed in range(3) for pair in operand_pairs(load_arithmetic(400, seed=seed, split="train", **options))
    }
    test = {
        pair for seed in range(3) for pair in operand_pairs(load_arithmetic(40, seed=seed, split="test", **options))
    }
    assert train and test and not train & test
    # a commutative fact is one problem: its two orders land in the same split
    if operation in ("add", "mul"):
        symbol = "+" if operation == "add" else "*"
        assert not {(b, symbol, a) for a, _, b in test} & train
    # the share of pairs kept for evaluation is close to the fraction asked for (324 pairs)
    held_out = sum(arithmetic_split_of(a, b, operation, 0.25) == "test" for a in range(2, 20) for b in range(2, 20))
    assert 0.15 < held_out / 324 < 0.35


def test_partitioned_draws_exhaust_the_split_before_repeating():
    options = {"operation": "mul", "min_value": 2, "max_value": 19, "held_out_fraction": 0.25}
    held_out = sum(arithmetic_split_of(a, b, "mul", 0.25) == "test" for a in range(2, 20) for b in range(2, 20))
    pairs = operand_pairs(load_arithmetic(held_out + 5, seed=1, split="test", **options))
    assert len(set(pairs[:held_out])) == held_out  # every held-out pair once ...
    assert len(set(pairs)) == held_out  # ... then again in a fresh order


def test_partition_errors_name_the_fix():
    with pytest.raises(ValueError, match=r"held_out_fraction must be in \[0, 1\)"):
        load_arithmetic(4, held_out_fraction=1.0)
    with pytest.raises(ValueError, match="widen the operand range"):
        load_arithmetic(4, min_value=3, max_value=3, split="test", held_out_fraction=1e-9)


def test_task_arguments_reach_training_and_evaluation_loaders():
    args = TaskArguments(
        arithmetic_operation="mul",
        arithmetic_min_value=2,
        arithmetic_max_value=19,
        arithmetic_held_out_fraction=0.25,
        num_train_samples=300,
        num_eval_samples=30,
    )
    train, evaluation = load_task(args, seed=0)
    evaluated = get_task("arithmetic").load("test", 30, 7, operation="mul", min_value=2, max_value=19,
                                            held_out_fraction=0.25)  # fmt: skip
    assert not set(operand_pairs(train)) & (set(operand_pairs(evaluation)) | set(operand_pairs(evaluated)))

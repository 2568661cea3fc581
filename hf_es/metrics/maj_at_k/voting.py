# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""Majority voting over sampled final answers with math-verify equivalence (no dependency on `evaluate`).

This file lives next to `maj_at_k.py` so that the metric folder is self-contained: `evaluate` copies both files into
its module cache (relative import), and the folder can be pushed as-is to a Hub Space.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig, parse, verify

__all__ = [
    "AnswerClusters",
    "cluster_answers",
    "estimate_maj_at_k",
    "majority_vote",
    "parse_answer",
]


# A final answer written without delimiters (`\frac12`, `x`, `\text{(C)}`) is read as LaTeX by boxing it first;
# math-verify's LaTeX extraction only looks inside delimiters or boxes.
_BOXED_CONFIG = [LatexExtractionConfig(boxed_match_priority=0)]
# Text with delimiters, or prose: math-verify's own extraction (last boxed / delimited LaTeX, else a plain expression).
_TEXT_CONFIG = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
# Multiple-choice letters stated in prose ("the answer is C"), anchored so that a stray "A" in a sentence is not one.
_LETTER_CONFIG = [StringExtractionConfig(strings=("A", "B", "C", "D", "E"), try_extract_without_anchor=False)]
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_DELIMITER = re.compile(r"(?<!\\)\$|\\\(|\\\[|\\boxed|\\fbox")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")
_PARENTHESISED_LETTER = re.compile(r"\(([A-E])\)")


def _is_bare_answer(text: str) -> bool:
    """A lone final answer (LaTeX without delimiters, a letter, a number) rather than a sentence or a completion.

    Prose has two words, or a word next to a number ("18 dollars"); LaTeX command names (`\\frac`, `\\text`) are
    not words.
    """
    if "\n" in text or _DELIMITER.search(text):
        return False
    words = _WORD.findall(_COMMAND.sub(" ", text))
    return len(words) == 0 or (len(words) == 1 and not any(char.isdigit() for char in text))


def parse_answer(answer: str | None) -> list[Any] | None:
    """
    Parse one final answer, or a whole completion, with math-verify.

    - A lone answer is read as LaTeX even without delimiters: `\\frac12`, `\\dfrac{1}{2}`, `0.5`, `x^2+1`, `(1, 2)`,
      and symbols or choice letters (`x`, `C`, `(B)`, `\\text{(C)}`, `\\textbf{C}`), which therefore vote and are
      scored (a letter is a symbol: `C`, `(C)` and `\\text{C}` are the same answer; `B` and `2` are not).
    - Text with delimiters or prose: the last boxed or delimited LaTeX, else the last plain expression, else a choice
      letter stated as the answer ("the answer is C").

    Args:
        answer (`str` or `None`): the sampled answer.

    Returns:
        `list` or `None`: math-verify's parse (a non-empty list) when it finds a mathematical answer, `None` otherwise
        (an empty answer, or text without any answer math-verify can extract): such samples abstain from the vote.
    """
    if answer is None:
        return None
    text = str(answer).strip()
    if not text:
        return None
    if _PLAIN_NUMBER.fullmatch(text):
        parsed = parse(text, _TEXT_CONFIG)  # keeps the number as written ("0.3", not "\\frac{3}{10}")
    elif _is_bare_answer(text):
        parsed = parse("\\boxed{" + text + "}", _BOXED_CONFIG)
    else:
        parsed = parse(text, _TEXT_CONFIG)
        if not parsed:
            letter = parse(_PARENTHESISED_LETTER.sub(r"\1", text), _LETTER_CONFIG)  # "is (B)" -> "is B"
            # Re-read the letter as LaTeX, so that it votes with `C` / `\\text{(C)}` written as lone answers.
            parsed = parse("\\boxed{" + letter[-1] + "}", _BOXED_CONFIG) if letter else []
    return parsed if parsed else None


def _equivalent(a: list[Any], b: list[Any]) -> bool:
    # Cheap exact checks first: identical canonical strings (math-verify's second element) are the same answer.
    if a[-1] == b[-1] and isinstance(a[-1], str):
        return True
    return bool(verify(a, b)) or bool(verify(b, a))


def _matches_gold(gold: list[Any], answer: list[Any]) -> bool:
    # Same direction as math-verify based accuracy rewards: verify(gold, prediction).
    if gold[-1] == answer[-1] and isinstance(gold[-1], str):
        return True
    return bool(verify(gold, answer))


def _canonical(parsed: list[Any]) -> str:
    return parsed[-1] if isinstance(parsed[-1], str) else str(parsed[0])


@dataclass
class AnswerClusters:
    """
    Samples grouped into equivalence classes of their final answers.

    Attributes:
        cluster_ids (`list[int | None]`): for every sample, the index of its class (classes are numbered by first
            occurrence), or `None` for a sample without an answer (it does not vote).
        representatives (`list[int]`): for every class, the index of its first sample.
        parsed (`list`): the parsed answer of every sample (`None` for abstentions).
    """

    cluster_ids: list[int | None]
    representatives: list[int]
    parsed: list[Any] = field(repr=False)


def cluster_answers(answers: Sequence[str | None]) -> AnswerClusters:
    """
    Group sampled answers that math-verify considers equivalent (`0.5`, `1/2` and `\\frac{1}{2}` form one class).

    Each answer joins the earliest existing class whose representative (its first member) it is equivalent to,
    otherwise it opens a new class. Classes are therefore numbered by first occurrence, which the tie-break uses.

    Args:
        answers (`Sequence[str | None]`): the sampled final answers (or completions) of one problem, in sampling order.

    Returns:
        [`AnswerClusters`].
    """
    parsed = [parse_answer(answer) for answer in answers]
    cluster_ids: list[int | None] = []
    representatives: list[int] = []
    for index, current in enumerate(parsed):
        if current is None:
            cluster_ids.append(None)
            continue
        for cluster, rep in enumerate(representatives):
            if _equivalent(parsed[rep], current):
                cluster_ids.append(cluster)
                break
        else:
            cluster_ids.append(len(representatives))
            representatives.append(index)
    return AnswerClusters(cluster_ids=cluster_ids, representatives=representatives, parsed=parsed)


def majority_vote(cluster_ids: Sequence[int | None], k: int) -> int | None:
    """
    Winning class among the first `k` samples.

    Ties go to the class whose first occurrence is earliest (classes are numbered by first occurrence, so this is the
    smallest class id). Abstentions (`None`) do not vote.

    Args:
        cluster_ids (`Sequence[int | None]`): class of every sample (see [`cluster_answers`]).
        k (`int`): number of leading samples that vote.

    Returns:
        `int` or `None`: the winning class, or `None` when none of the first `k` samples has an answer.
    """
    counts: dict[int, int] = {}
    for cluster in cluster_ids[:k]:
        if cluster is not None:
            counts[cluster] = counts.get(cluster, 0) + 1
    if not counts:
        return None
    # Classes are numbered by first occurrence, so the smallest id among the most voted is the earliest one.
    best = max(counts.values())
    return min(cluster for cluster, count in counts.items() if count == best)


def _problem_name(index: int, problem_ids: Sequence[Hashable] | None) -> str:
    if problem_ids is None:
        return f"problem {index}"
    return f"problem {problem_ids[index]!r} (index {index})"


def estimate_maj_at_k(
    predictions: Sequence[Sequence[str | None]],
    references: Sequence[str],
    k: int | Iterable[int],
    problem_ids: Sequence[Hashable] | None = None,
) -> dict[int, dict[str, list]]:
    """
    Maj@K of every problem: majority vote over the first K sampled answers, winner scored against the gold answer.

    Answers are compared with math-verify (so `0.5`, `1/2` and `\\frac{1}{2}` vote together); ties go to the answer
    that appeared first; answers in which math-verify finds nothing to parse (or empty ones) abstain. A problem whose
    first K samples all abstain scores 0.

    Args:
        predictions (`Sequence[Sequence[str | None]]`): per problem, the sampled final answers (or completions) in
            sampling order.
        references (`Sequence[str]`): per problem, the gold answer.
        k (`int` or iterable of `int`): the K values; every problem needs at least `max(k)` samples.
        problem_ids (`Sequence`, *optional*): problem names for error messages.

    Returns:
        `dict[int, dict[str, list]]`: for every K, `{"correct": [0/1 per problem], "answer": [winning answer (math-verify's
        canonical string) or None per problem]}`.

    Raises:
        `ValueError`: if some problem has fewer than `max(k)` samples (the message names it).
    """
    ks = [k] if isinstance(k, int) else sorted(set(k))
    if not ks or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in ks):
        raise ValueError(f"k must be a positive integer or a non-empty list of positive integers, got {k!r}.")
    if len(predictions) != len(references):
        raise ValueError(f"Got {len(predictions)} problems in predictions but {len(references)} references.")
    if problem_ids is not None and len(problem_ids) != len(predictions):
        raise ValueError(f"problem_ids has {len(problem_ids)} entries for {len(predictions)} problems.")
    if len(predictions) == 0:
        raise ValueError("Maj@K needs at least one problem, got none.")
    for index, samples in enumerate(predictions):
        if isinstance(samples, (str, bytes)):
            raise ValueError(f"predictions[{index}] must be a list of sampled answers, got a single string.")
        if len(samples) < ks[-1]:
            raise ValueError(
                f"k={ks[-1]} is larger than the number of samples n={len(samples)} for "
                f"{_problem_name(index, problem_ids)}: Maj@{ks[-1]} needs at least {ks[-1]} sampled answers."
            )

    results = {kk: {"correct": [], "answer": []} for kk in ks}
    for samples, gold in zip(predictions, references):
        samples = list(samples)[: ks[-1]]
        clusters = cluster_answers(samples)
        gold_parsed = parse_answer(gold)
        graded: dict[int, bool] = {}
        for kk in ks:
            winner = majority_vote(clusters.cluster_ids, kk)
            if winner is None:
                results[kk]["correct"].append(0)
                results[kk]["answer"].append(None)
                continue
            if winner not in graded:
                winner_parsed = clusters.parsed[clusters.representatives[winner]]
                graded[winner] = gold_parsed is not None and _matches_gold(gold_parsed, winner_parsed)
            results[kk]["correct"].append(int(graded[winner]))
            results[kk]["answer"].append(_canonical(clusters.parsed[clusters.representatives[winner]]))
    return results

# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""Maj@K metric: majority vote over the first K sampled answers (math-verify equivalence), scored against the gold."""

import datasets
import evaluate
import math_verify  # noqa: F401  (declared so that `evaluate.load` reports it as a requirement)

from .voting import estimate_maj_at_k

_CITATION = """\
@inproceedings{wang2023selfconsistency,
  title={Self-Consistency Improves Chain of Thought Reasoning in Language Models},
  author={Xuezhi Wang and Jason Wei and Dale Schuurmans and Quoc Le and Ed Chi and Sharan Narang and Aakanksha Chowdhery and Denny Zhou},
  booktitle={ICLR},
  year={2023}
}
"""

_DESCRIPTION = """\
Maj@K (majority voting, self-consistency): for each problem, the final answers of the first K sampled completions vote;
answers are grouped by math-verify equivalence (so 0.5, 1/2 and \\frac{1}{2} vote together), ties go to the answer that
appeared first, answers in which math-verify finds nothing to parse abstain, and the winning answer is scored against
the gold answer with math-verify. A lone answer without delimiters is read as LaTeX (\\frac12, \\text{(C)}, x), so
symbolic and multiple-choice answers vote and are scored: C, (C) and \\textbf{C} are one answer, B and 2 are two.
The score is the fraction of problems whose winner is correct.
"""

_KWARGS_DESCRIPTION = """
Computes Maj@K averaged over problems.

Args:
    predictions (`list[list[str]]`): per problem, the sampled final answers (or full completions: math-verify
        extracts the last boxed / final expression) in sampling order. Every problem needs at least max(k) samples.
    references (`list[str]`): per problem, the gold answer.
    k (`int` or `list[int]`, defaults to 1): the K values.
    problem_ids (`list`, *optional*): names of the problems, used in error messages.

Returns:
    `dict`: `maj@<k>` (float, mean over problems) for each K, `per_problem` mapping `maj@<k>` to the per-problem 0/1
    scores and `answer@<k>` to the winning answers, and `num_problems`.

Examples:

    >>> import evaluate
    >>> maj_at_k = evaluate.load("maj_at_k")  # after `import hf_es`; from a Hub Space: "<namespace>/maj_at_k"
    >>> results = maj_at_k.compute(predictions=[["1/2", "0.3", "\\\\frac{1}{2}"]], references=["0.5"], k=3)
    >>> print(results["maj@3"])
    1.0
"""


def _as_text(value):
    return "" if value is None else str(value)


# The `_info` boilerplate repeats the sibling metric's on purpose: `evaluate` copies each metric folder alone.
@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MajAtK(evaluate.Metric):
    """Maj@K with math-verify answer equivalence and earliest-first-occurrence tie-break."""

    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Value("string"),
                }
            ),
            reference_urls=["https://arxiv.org/abs/2203.11171", "https://github.com/huggingface/Math-Verify"],
        )

    @staticmethod
    def _stringify(predictions, references):
        # Numbers (e.g. gold answers stored as ints) and `None` (no answer) are accepted and turned into text.
        if predictions is not None:
            predictions = [
                samples if isinstance(samples, str) else [_as_text(answer) for answer in samples]
                for samples in predictions
            ]
        if references is not None:
            references = [_as_text(reference) for reference in references]
        return predictions, references

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Compute Maj@K (see the module description); numbers and `None` answers are turned into text first."""
        predictions, references = self._stringify(predictions, references)
        if predictions is not None and any(isinstance(samples, str) for samples in predictions):
            raise ValueError("maj_at_k expects one list of sampled answers per problem, got a string.")
        return super().compute(predictions=predictions, references=references, **kwargs)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add problems (one list of sampled answers and one gold answer each)."""
        predictions, references = self._stringify(predictions, references)
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def _compute(self, predictions, references, k=1, problem_ids=None):
        per_problem = estimate_maj_at_k(predictions, references, k, problem_ids=problem_ids)
        results = {f"maj@{kk}": sum(v["correct"]) / len(v["correct"]) for kk, v in per_problem.items()}
        results["per_problem"] = {}
        for kk, values in per_problem.items():
            results["per_problem"][f"maj@{kk}"] = values["correct"]
            results["per_problem"][f"answer@{kk}"] = values["answer"]
        results["num_problems"] = len(predictions)
        return results

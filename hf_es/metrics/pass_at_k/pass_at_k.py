# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""Pass@K metric: the unbiased estimator of Chen et al. (2021) over n >= k sampled completions per problem."""

import datasets
import evaluate

from .estimator import counts_from_correctness, estimate_pass_at_k_per_problem

_CITATION = """\
@article{chen2021codex,
  title={Evaluating Large Language Models Trained on Code},
  author={Mark Chen and Jerry Tworek and Heewoo Jun and Qiming Yuan and Henrique Ponde de Oliveira Pinto and others},
  journal={arXiv preprint arXiv:2107.03374},
  year={2021}
}
"""

_DESCRIPTION = """\
Pass@K: the probability that at least one of K completions sampled for a problem is correct, estimated without bias
from n >= K samples of which c are correct as 1 - C(n - c, K) / C(n, K), and averaged over problems. It is computed in
a product form that cannot overflow (n = 1,024 is fine). Pass@1 equals the mean per-sample accuracy. A problem with
fewer than K samples is an error (it is never silently skipped).
"""

_KWARGS_DESCRIPTION = """
Computes Pass@K averaged over problems.

Args:
    num_samples (`list[int]`): number of sampled completions n for each problem.
    num_correct (`list[int]`): number of correct completions c for each problem.
    predictions (`list[list[bool]]`, *optional*): instead of the two counts, one list per problem with the
        correctness of every sampled completion (booleans, or 0/1 rewards).
    k (`int` or `list[int]`, defaults to 1): the K values; every problem needs at least max(k) samples.
    problem_ids (`list`, *optional*): names of the problems, used in error messages.

Returns:
    `dict`: `pass@<k>` (float, mean over problems) for each K, `per_problem` mapping `pass@<k>` to the list of
    per-problem estimates, and `num_problems`.

Examples:

    >>> import evaluate
    >>> pass_at_k = evaluate.load("pass_at_k")  # after `import hf_es`; from a Hub Space: "<namespace>/pass_at_k"
    >>> results = pass_at_k.compute(num_samples=[4, 4], num_correct=[1, 0], k=[1, 2])
    >>> print(results["pass@1"], results["pass@2"])
    0.125 0.25
    >>> results = pass_at_k.compute(predictions=[[True, False], [False, False]], k=1)
    >>> print(results["pass@1"])
    0.25
"""


# The `_info` boilerplate repeats the sibling metric's on purpose: `evaluate` copies each metric folder alone.
@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PassAtK(evaluate.Metric):
    """Pass@K with the unbiased, overflow-free estimator; inputs are per-problem sample counts."""

    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"num_samples": datasets.Value("int64"), "num_correct": datasets.Value("int64")}
            ),
            reference_urls=["https://arxiv.org/abs/2107.03374"],
        )

    @staticmethod
    def _translate(predictions, references, kwargs):
        if references is not None:
            raise ValueError(
                "pass_at_k takes no references: score every sample first and pass `predictions` as per-sample "
                "correctness, or pass `num_samples` and `num_correct`."
            )
        if predictions is not None:
            if kwargs.get("num_samples") is not None or kwargs.get("num_correct") is not None:
                raise ValueError("Pass either `predictions` or `num_samples` and `num_correct`, not both.")
            num_samples, num_correct = counts_from_correctness(predictions)
            kwargs = {**kwargs, "num_samples": num_samples, "num_correct": num_correct}
        return kwargs

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Compute Pass@K; accepts `predictions` (per-sample correctness) or `num_samples` + `num_correct`."""
        kwargs = self._translate(predictions, references, kwargs)
        if kwargs.get("num_samples") is None and kwargs.get("num_correct") is None and self.writer is None:
            raise ValueError("pass_at_k needs `num_samples` and `num_correct` (or `predictions`); got neither.")
        return super().compute(**kwargs)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add problems; accepts `predictions` (per-sample correctness) or `num_samples` + `num_correct`."""
        return super().add_batch(**self._translate(predictions, references, kwargs))

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one problem: `prediction` (its per-sample correctness) or `num_samples` + `num_correct`."""
        if prediction is not None:
            kwargs = self._translate([prediction], reference, kwargs)
            kwargs = {name: values[0] for name, values in kwargs.items() if name in ("num_samples", "num_correct")}
        elif reference is not None:
            self._translate(None, reference, kwargs)
        return super().add(**kwargs)

    def _compute(self, num_samples, num_correct, k=1, problem_ids=None):
        per_problem = estimate_pass_at_k_per_problem(
            [int(n) for n in num_samples], [int(c) for c in num_correct], k, problem_ids=problem_ids
        )
        results = {f"pass@{kk}": sum(values) / len(values) for kk, values in per_problem.items()}
        results["per_problem"] = {f"pass@{kk}": values for kk, values in per_problem.items()}
        results["num_problems"] = len(num_samples)
        return results

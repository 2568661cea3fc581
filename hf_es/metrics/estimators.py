# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""
Pure estimators behind the `pass_at_k` and `maj_at_k` metrics, importable without `evaluate`.

The implementations live inside the metric folders (`pass_at_k/estimator.py`, `maj_at_k/voting.py`) so that each
folder is a self-contained `evaluate` module (loadable by path offline, pushable as a Hub Space); this module is the
stable import point for library code and scripts.
"""

from .maj_at_k.voting import AnswerClusters, cluster_answers, estimate_maj_at_k, majority_vote, parse_answer
from .pass_at_k.estimator import (
    counts_from_correctness,
    estimate_pass_at_k,
    estimate_pass_at_k_exact,
    estimate_pass_at_k_per_problem,
    normalize_ks,
    validate_counts,
)

__all__ = [
    "AnswerClusters",
    "cluster_answers",
    "counts_from_correctness",
    "estimate_maj_at_k",
    "estimate_pass_at_k",
    "estimate_pass_at_k_exact",
    "estimate_pass_at_k_per_problem",
    "majority_vote",
    "normalize_ks",
    "parse_answer",
    "validate_counts",
]

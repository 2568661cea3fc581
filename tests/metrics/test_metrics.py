"""Tests of the Pass@K / Maj@K estimators and of their `evaluate` metric modules."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import subprocess
import sys
from fractions import Fraction

import pytest

from hf_es.metrics import AVAILABLE_METRICS, metric_path
from hf_es.metrics.estimators import (
    cluster_answers,
    counts_from_correctness,
    estimate_maj_at_k,
    estimate_pass_at_k,
    estimate_pass_at_k_exact,
    estimate_pass_at_k_per_problem,
    majority_vote,
    parse_answer,
)

# --------------------------------------------------------------------------------------------------------------------
# Pass@K estimator


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Fraction of all k-subsets of n samples (c of them correct) that contain at least one correct sample."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(any(samples[i] for i in subset) for subset in subsets)
    return Fraction(hits, len(subsets))


def code_eval_estimator(n: int, c: int, k: int) -> float:
    """The estimator of `evaluate`'s `code_eval` metric (and of the Codex paper), copied verbatim in numpy form."""
    import numpy as np

    if n - c < k:
        return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))


def test_pass_at_k_matches_brute_force_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = brute_force_pass_at_k(n, c, k)
                assert estimate_pass_at_k_exact(n, c, k) == expected
                assert estimate_pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12), (n, c, k)


def test_pass_at_k_matches_code_eval_formula_on_random_inputs():
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(1, 300)
        c = rng.randint(0, n)
        k = rng.randint(1, n)
        assert estimate_pass_at_k(n, c, k) == pytest.approx(code_eval_estimator(n, c, k), rel=1e-12, abs=1e-15)


def test_pass_at_k_edge_cases():
    for n in (1, 2, 7, 32, 1024):
        for k in sorted({1, n // 2 or 1, n}):
            assert estimate_pass_at_k(n, 0, k) == 0.0
            assert estimate_pass_at_k(n, n, k) == 1.0
        # k = n: any correct sample makes it a pass.
        assert estimate_pass_at_k(n, 1, n) == 1.0
    # Pass@1 is the per-sample accuracy.
    assert estimate_pass_at_k(32, 5, 1) == pytest.approx(5 / 32, abs=1e-15)


def test_pass_at_k_is_stable_for_1024_samples():
    n = 1024
    assert math.comb(n, 512) > 1e300  # the naive ratio of binomials would overflow a float
    for c in (0, 1, 2, 3, 10, 100, 511, 512, 900, 1000, 1023, 1024):
        for k in (1, 2, 16, 32, 100, 512, 1000, 1024):
            value = estimate_pass_at_k(n, c, k)
            assert math.isfinite(value) and 0.0 <= value <= 1.0
            exact = estimate_pass_at_k_exact(n, c, k)
            assert abs(Fraction(value) - exact) < Fraction(1, 10**12), (c, k, value, float(exact))


def test_pass_at_k_k_larger_than_n_names_the_problem():
    with pytest.raises(ValueError, match=r"k=16 .* n=8 for problem 1\b"):
        estimate_pass_at_k_per_problem([32, 8, 32], [1, 2, 3], k=[1, 16])
    with pytest.raises(ValueError, match=r"problem 'gsm8k-17' \(index 1\)"):
        estimate_pass_at_k_per_problem([32, 8], [1, 2], k=16, problem_ids=["gsm8k-0", "gsm8k-17"])
    with pytest.raises(ValueError, match="larger than the number of samples"):
        estimate_pass_at_k(4, 1, 5)


def test_pass_at_k_rejects_invalid_counts():
    with pytest.raises(ValueError, match="num_correct"):
        estimate_pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="num_samples"):
        estimate_pass_at_k(0, 0, 1)
    with pytest.raises(ValueError, match="k must be"):
        estimate_pass_at_k(4, 1, 0)
    with pytest.raises(ValueError, match="one entry per problem"):
        estimate_pass_at_k_per_problem([4, 4], [1], k=1)
    with pytest.raises(ValueError, match="at least one problem"):
        estimate_pass_at_k_per_problem([], [], k=1)


def test_per_problem_and_counts_from_correctness():
    per_problem = estimate_pass_at_k_per_problem([4, 4, 2], [1, 0, 2], k=[2, 1, 2])
    assert list(per_problem) == [1, 2]
    assert per_problem[1] == [0.25, 0.0, 1.0]
    assert per_problem[2] == [0.5, 0.0, 1.0]
    assert counts_from_correctness([[True, False, 1], [0.0, 1.0], []]) == ([3, 2, 0], [2, 1, 0])
    with pytest.raises(ValueError, match=r"predictions\[0\] contains 0.5"):
        counts_from_correctness([[0.5]])
    with pytest.raises(ValueError, match=r"predictions\[1\] contains None"):
        counts_from_correctness([[True], [None]])


# --------------------------------------------------------------------------------------------------------------------
# Maj@K voting


def test_equivalent_answers_vote_together():
    clusters = cluster_answers(["0.5", "1/2", "\\frac{1}{2}", "$\\frac{1}{2}$", "\\boxed{0.5}", "3"])
    assert clusters.cluster_ids == [0, 0, 0, 0, 0, 1]
    assert clusters.representatives == [0, 5]
    # Three different spellings of 1/2 outvote two identical "0.3".
    result = estimate_maj_at_k([["0.3", "1/2", "0.3", "0.5", "\\frac{1}{2}"]], ["\\frac{1}{2}"], k=5)
    assert result[5]["correct"] == [1]


def test_majority_tie_break_is_earliest_first_occurrence():
    assert majority_vote([1, 0, 0, 1], 4) == 0  # ids are numbered by first occurrence: smallest id wins ties
    clusters = cluster_answers(["7", "3", "3", "7"])
    assert majority_vote(clusters.cluster_ids, 4) == clusters.cluster_ids[0]
    result = estimate_maj_at_k([["7", "3", "3", "7"], ["3", "7", "7", "3"]], ["7", "7"], k=[1, 2, 3, 4])
    assert result[4]["correct"] == [1, 0]  # tie 2-2: the answer seen first wins
    assert result[4]["answer"] == ["7", "3"]
    assert result[1]["correct"] == [1, 0]
    assert result[3]["correct"] == [0, 1]  # 3 leads 2-1 in the first problem, 7 leads in the second


def test_abstentions_do_not_vote():
    assert parse_answer("") is None and parse_answer(None) is None and parse_answer("no answer here") is None
    result = estimate_maj_at_k([["", None, "I do not know", "4"], ["", "", "", ""]], ["4", "4"], k=[1, 4])
    assert result[1]["correct"] == [0, 0] and result[1]["answer"] == [None, None]
    assert result[4]["correct"] == [1, 0]


def test_maj_at_k_reads_final_answer_of_full_completions():
    completions = ["Adding gives 3 + 4 = 7. The answer is \\boxed{7}.", "So the result is 8.", "The answer is 7."]
    assert estimate_maj_at_k([completions], ["7"], k=3)[3]["correct"] == [1]


def test_maj_at_k_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"k=3 .* n=2 for problem 'b' \(index 1\)"):
        estimate_maj_at_k([["1", "2", "3"], ["1", "2"]], ["1", "2"], k=3, problem_ids=["a", "b"])
    with pytest.raises(ValueError, match="references"):
        estimate_maj_at_k([["1"]], ["1", "2"], k=1)


# --------------------------------------------------------------------------------------------------------------------
# `evaluate` modules


@pytest.fixture(scope="module")
def metrics():
    import hf_es.metrics

    return {name: hf_es.metrics.load(name) for name in AVAILABLE_METRICS}


def test_metric_folders_are_self_contained():
    for name in AVAILABLE_METRICS:
        folder = metric_path(name)
        assert os.path.isfile(os.path.join(folder, f"{name}.py"))
        card = open(os.path.join(folder, "README.md")).read()
        assert card.startswith("---\n") and "title:" in card and "sdk: gradio" in card
        for file in os.listdir(folder):
            if file.endswith(".py"):
                source = open(os.path.join(folder, file)).read()
                assert not re.search(r"^\s*(from|import)\s+hf_es", source, flags=re.MULTILINE), file
    assert metric_path("pass@k") == metric_path("pass_at_k")
    with pytest.raises(ValueError, match="Unknown hf_es metric"):
        metric_path("bleu")


def test_pass_at_k_metric(metrics):
    metric = metrics["pass_at_k"]
    results = metric.compute(num_samples=[4, 4], num_correct=[1, 0], k=[1, 2])
    assert results["pass@1"] == 0.125 and results["pass@2"] == 0.25
    assert results["per_problem"] == {"pass@1": [0.25, 0.0], "pass@2": [0.5, 0.0]}
    assert results["num_problems"] == 2
    results = metric.compute(predictions=[[True, False, False, False], [False] * 4], k=2)
    assert results["pass@2"] == 0.25
    for batch in ([[True, True]], [[False, False], [True, False]]):
        metric.add_batch(predictions=batch)
    assert metric.compute(k=1)["pass@1"] == pytest.approx(0.5)
    metric.add(prediction=[True, False])
    metric.add(num_samples=2, num_correct=0)
    assert metric.compute(k=1)["pass@1"] == 0.25
    with pytest.raises(ValueError, match=r"k=16 .* n=8 for problem 1"):
        metric.compute(num_samples=[16, 8], num_correct=[1, 1], k=16)
    with pytest.raises(ValueError, match="takes no references"):
        metric.compute(predictions=[[True]], references=[1])


def test_maj_at_k_metric(metrics):
    metric = metrics["maj_at_k"]
    results = metric.compute(
        predictions=[["0.3", "1/2", "0.3", "0.5", "\\frac{1}{2}"], ["4", "5", "5", "4"]],
        references=["0.5", 4],
        k=[1, 4],
    )
    assert results["maj@1"] == 0.5  # problem 1's first sample is wrong, problem 2's is right
    assert results["maj@4"] == 0.5  # problem 1: 1/2 (2 votes) vs 0.3 (2 votes), 0.3 first; problem 2: tie, 4 first
    assert results["per_problem"]["maj@4"] == [0, 1]
    assert results["per_problem"]["answer@4"] == ["0.3", "4"]
    with pytest.raises(ValueError, match=r"k=5 .* n=4 for problem 1"):
        metric.compute(predictions=[["1"] * 5, ["1"] * 4], references=["1", "1"], k=5)


def test_evaluate_load_by_path_offline(tmp_path):
    """`evaluate.load(<folder>)` works with the Hub unreachable, and the metric's cached copy does not import hf_es."""
    code = f"""
import json, sys, evaluate
p = evaluate.load({metric_path("pass_at_k")!r})
m = evaluate.load({metric_path("maj_at_k")!r} + "/maj_at_k.py")
out = {{
    "module": type(p).__module__,
    "hf_es_imported": "hf_es" in sys.modules,
    "pass": p.compute(num_samples=[4, 4], num_correct=[1, 0], k=[1, 2])["pass@2"],
    "maj": m.compute(predictions=[["1/2", "0.5", "3"]], references=["\\\\frac{{1}}{{2}}"], k=3)["maj@3"],
}}
print(json.dumps(out))
"""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_ENDPOINT": "http://127.0.0.1:9",  # any network access would fail
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["module"].startswith("evaluate_modules.metrics.pass_at_k.")  # loaded from evaluate's cache copy
    assert out["hf_es_imported"] is False
    assert out["pass"] == 0.25 and out["maj"] == 1.0

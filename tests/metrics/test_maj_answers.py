"""Maj@K answer parsing: bare LaTeX golds, symbolic and multiple-choice answers vote and are scored."""

from __future__ import annotations

import pytest

from hf_es.metrics.estimators import cluster_answers, estimate_maj_at_k, parse_answer


@pytest.mark.parametrize(
    "gold, votes",
    [
        # Bare LaTeX without delimiters, in the spellings of MATH / AIME solutions.
        ("\\frac12", ["0.5", "1/2", "3"]),
        ("\\dfrac{1}{2}", ["\\frac{1}{2}", "0.5", "2"]),
        ("\\tfrac{3}{4}", ["0.75", "$\\frac34$", "4"]),
        ("\\boxed{\\frac{1}{2}}", ["\\frac12", "0.5", "1"]),
        ("\\sqrt{2}", ["\\sqrt2", "2^{1/2}", "2"]),
        ("(1, 2)", ["(1,2)", "(1, 2)", "[1, 2]"]),
        ("x^2+1", ["1 + x^2", "x^2 + 1", "x^2"]),
        # Symbols and letters.
        ("x", ["x", "x", "y"]),
        ("y", ["y", "\\boxed{y}", "x"]),
        ("\\text{(C)}", ["C", "(C)", "B"]),
        ("C", ["\\textbf{C}", "\\text{C}", "A"]),
        ("(B)", ["B", "The answer is (B).", "2"]),
        ("\\text{B}", ["\\mathrm{(B)}", "B", "D"]),
    ],
)
def test_gold_parses_and_the_majority_is_scored(gold, votes):
    assert parse_answer(gold) is not None, gold
    # The first two samples are spellings of the gold, the third is wrong: Maj@3 = 1, and Maj@1 = 1.
    result = estimate_maj_at_k([votes], [gold], k=[1, 3])
    assert result[1]["correct"] == [1] and result[3]["correct"] == [1], result
    clusters = cluster_answers(votes)
    assert clusters.cluster_ids == [0, 0, 1], clusters.cluster_ids
    # The wrong answer, alone, is scored wrong (not abstained): its vote is counted and loses.
    assert estimate_maj_at_k([votes[2:]], [gold], k=1)[1] == {"correct": [0], "answer": [parse_answer(votes[2])[-1]]}


def test_choice_letters_and_numbers_are_not_confused():
    clusters = cluster_answers(["B", "2", "(B)", "b", "C", "3"])
    assert clusters.cluster_ids == [0, 1, 0, 0, 2, 3]
    assert estimate_maj_at_k([["2", "2", "B"]], ["B"], k=3)[3]["correct"] == [0]
    assert estimate_maj_at_k([["2", "B", "B"]], ["(B)"], k=3)[3]["correct"] == [1]


def test_letters_stated_in_prose_vote_but_stray_capitals_do_not():
    assert parse_answer("So the final answer is C.") == parse_answer("C")
    assert parse_answer("The answer is (D)") == parse_answer("D")
    assert parse_answer("A train leaves at 5") == parse_answer("5")  # the number, not the article "A"
    assert parse_answer("I do not know") is None and parse_answer("no answer here") is None


def test_numbers_with_words_keep_the_number():
    for text in ("18 dollars", "5\\text{ cm}", "\\$18", "So the result is 18."):
        assert parse_answer(text) is not None and str(parse_answer(text)[0]) in ("18", "5"), text
    assert parse_answer("0.3")[-1] == "0.3"  # a plain number keeps its spelling as the reported answer


@pytest.mark.parametrize(
    "completion, gold, reward",
    [
        ("The answer is (C)", "C", 1.0),
        ("The answer is C", "\\text{(C)}", 1.0),
        ("The answer is \\textbf{C}", "(C)", 1.0),
        ("The answer is x.", "x", 1.0),
        ("\\boxed{\\tfrac{1}{2}}", "\\frac12", 1.0),
        ("The answer is (B)", "2", 0.0),
        ("The answer is B", "\\text{(C)}", 0.0),
    ],
)
def test_accuracy_reward_scores_letters_and_symbols_stated_in_text(completion, gold, reward):
    from hf_es.rewards.accuracy import AccuracyConfig, score_accuracy

    assert score_accuracy(completion, gold, AccuracyConfig()) == (reward, "ok")

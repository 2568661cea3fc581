"""Tests for hf_es.rewards on real data (GSM8K, MATH-500) and adversarial inputs."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from hf_es.data import packaged_path
from hf_es.rewards import (
    accuracy_reward,
    countdown_reward,
    evaluate_countdown_expression,
    extract_all_boxed,
    extract_answer,
    extract_gold,
    format_reward,
    get_reward_stats,
    make_accuracy_reward,
    make_countdown_reward,
    make_format_reward,
)
from hf_es.rewards.accuracy import _verify_cached
from hf_es.scoring import SampleTimeout, ScoringPool, call_with_deadline


def _jsonl(name: str, split: str) -> list[dict]:
    with open(packaged_path(name, split), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def gsm8k_test() -> list[dict]:
    return _jsonl("gsm8k", "test")


@pytest.fixture(scope="module")
def math500() -> list[dict]:
    return _jsonl("math500", "test")


def _change_final_answer(worked: str) -> str:
    head, last = worked.rsplit("####", 1)
    value = int(last.strip().replace(",", ""))
    return f"{head}#### {value + 1}"


# ----------------------------------------------------------------------------------------------------------- GSM8K


def test_every_gsm8k_gold_scores_one_and_a_changed_answer_scores_zero(gsm8k_test):
    golds = [row["answer"] for row in gsm8k_test]
    assert len(golds) == 1319
    scores = accuracy_reward(prompts=None, completions=golds, solution=golds)
    assert scores == [1.0] * len(golds)
    changed = accuracy_reward(completions=[_change_final_answer(g) for g in golds], solution=golds)
    assert changed == [0.0] * len(golds)
    # The scoring rate (>= 2000/s, so scoring does not dominate an ES step) is a target of bench/latency.py.


def test_gsm8k_gold_in_other_answer_formats(gsm8k_test):
    rows = gsm8k_test[:200]
    finals = [row["answer"].rsplit("####", 1)[1].strip() for row in rows]
    for template in ("\\boxed{{{}}}", "The answer is {}.", "So she makes ${} in total.", "#### {}"):
        completions = ["Some reasoning 1 + 2 = 3.\n" + template.format(f) for f in finals]
        assert accuracy_reward(completions=completions, solution=[r["answer"] for r in rows]) == [1.0] * len(rows)
    # commas removed, and the bare final answer as the gold (what load_gsm8k puts in `solution`)
    completions = ["\\boxed{" + f.replace(",", "") + "}" for f in finals]
    assert accuracy_reward(completions=completions, solution=finals) == [1.0] * len(rows)


# -------------------------------------------------------------------------------------------------------- MATH-500


def _score_and_failures(completions, golds):
    scores = accuracy_reward(completions=completions, solution=golds)
    return scores, [i for i, s in enumerate(scores) if s != 1.0]


def test_math500_gold_answers_score_one(math500):
    golds = [row["answer"] for row in math500]
    accuracy_reward.stats.reset()
    boxed, boxed_fail = _score_and_failures(["\\boxed{" + g + "}" for g in golds], golds)
    full, full_fail = _score_and_failures([row["solution"] for row in math500], golds)
    print(f"\nMATH-500 boxed gold: {len(golds) - len(boxed_fail)}/500; failures {boxed_fail}")
    print(f"MATH-500 full solution: {len(golds) - len(full_fail)}/500; failures {full_fail}")
    assert len(boxed_fail) <= 5  # >= 99%
    assert len(full_fail) <= 5
    stats = accuracy_reward.stats.reset()
    assert stats["samples"] == 1000 and stats["timeouts"] == 0 and stats["errors"] == 0
    # The worked solution as the gold (the last box is read) gives the same verdicts.
    again = accuracy_reward(
        completions=["\\boxed{" + g + "}" for g in golds], solution=[r["solution"] for r in math500]
    )
    assert sum(again) >= 495


def test_math500_other_problems_answer_scores_zero(math500):
    golds = [row["answer"] for row in math500]
    others = ["\\boxed{" + golds[(i + 1) % len(golds)] + "}" for i in range(len(golds))]
    scores = accuracy_reward(completions=others, solution=golds)
    matches = [i for i, s in enumerate(scores) if s != 0.0]
    print(f"\nMATH-500 neighbour's answer scored non-zero for {matches}")
    assert len(matches) <= 5  # >= 99% score 0.0; the remaining ones are genuinely equal answers
    for i in matches:  # e.g. '7' followed by '7'
        assert accuracy_reward(completions=[others[i]], solution=[golds[(i + 1) % len(golds)]]) == [1.0]


def test_math500_throughput_with_repeated_answers(math500):
    # An ES population answers the same prompts many times: verdicts are cached.
    golds = [row["answer"] for row in math500]
    completions = [row["solution"] for row in math500]
    first = accuracy_reward(completions=completions, solution=golds)
    before = _verify_cached.cache_info()
    assert accuracy_reward(completions=completions * 4, solution=golds * 4) == first * 4
    after = _verify_cached.cache_info()
    # Every verdict came from the cache (no new verification); the rate (>= 2000/s) is a bench/latency.py target.
    assert after.misses == before.misses and after.hits > before.hits


# --------------------------------------------------------------------------------------------- accuracy behaviour


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        ("\\boxed{\\frac{14}{3}}", "\\frac{14}{3}", 1.0),
        ("\\boxed{14/3}", "\\frac{14}{3}", 1.0),
        ("\\boxed{4.6667}", "\\frac{14}{3}", 0.0),
        ("\\boxed{\\left(3, \\frac{\\pi}{2}\\right)}", "(3, \\frac{\\pi}{2})", 1.0),
        ("\\boxed{(3, \\pi)}", "(3, \\frac{\\pi}{2})", 0.0),
        ("\\boxed{\\$70,000}", "work\n#### 70000", 1.0),
        ("\\boxed{18 \\text{ dollars}}", "18", 1.0),
        ("\\boxed{18 dollars}", "18", 1.0),
        ("\\boxed{50\\%}", "50", 1.0),
        ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),
        ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
        ("\\boxed{18}", "19", 0.0),
        ("The answer is 42.", "42", 1.0),
        ("I think it's 41, no wait, 42", "42", 1.0),
        ("no numbers here", "42", 0.0),
    ],
)
def test_accuracy_cases(completion, gold, expected):
    assert accuracy_reward(completions=[completion], solution=[gold]) == [expected]


def test_last_boxed_answer_counts():
    completion = "First \\boxed{5}, then \\boxed{4}, finally \\boxed{3}."
    assert accuracy_reward(completions=[completion] * 2, solution=["3", "5"]) == [1.0, 0.0]
    assert extract_all_boxed(completion) == ["5", "4", "3"]
    # a later box beats an earlier `####` and "answer is"
    assert accuracy_reward(completions=["#### 7\nThe answer is 7\n\\boxed{8}"], solution=["8"]) == [1.0]


def test_conversational_completions_and_extraction_config():
    conv = [[{"role": "assistant", "content": "So \\boxed{12}"}], [{"role": "assistant", "content": "#### 12"}]]
    assert accuracy_reward(
        prompts=[[{"role": "user", "content": "q"}]] * 2, completions=conv, solution=["12"] * 2
    ) == [
        1.0,
        1.0,
    ]
    boxed_only = make_accuracy_reward("boxed", name="boxed_accuracy")
    assert boxed_only.__name__ == "boxed_accuracy"
    assert boxed_only(completions=["#### 12", "\\boxed{12}"], solution=["12", "12"]) == [0.0, 1.0]
    assert boxed_only.stats.no_answer == 1
    with pytest.raises(ValueError, match="Unknown answer extraction"):
        make_accuracy_reward("magic")
    with pytest.raises(ValueError, match="solution"):
        accuracy_reward(completions=["1"])


def test_extract_helpers():
    assert extract_gold("a\n#### 1,234") == "1,234"
    assert extract_gold("so $\\boxed{\\frac{1}{2}}$.") == "\\frac{1}{2}"
    assert extract_gold("\\frac{14}{3}").kind == "latex"
    assert extract_answer("\\boxed{\\{1, 2\\}}") == "\\{1, 2\\}"
    assert extract_answer("Answer: 12 apples") == "12 apples"
    assert extract_answer("we get -3.5 and 1,000,000") == "1,000,000"
    assert extract_answer("nothing") is None


# -------------------------------------------------------------------------------------------------- adversarial


ADVERSARIAL = {
    "empty": ("", 0.0),
    "100KB_text": ("lorem ipsum 12 " * 7000 + "\\boxed{3}", 1.0),
    "100KB_no_answer": ("x" * 100_000, 0.0),
    "100KB_open_braces": ("\\boxed{" + "{" * 100_000, 0.0),
    "100KB_boxes": ("\\boxed{1}" * 11_000, 0.0),
    "nested_braces_shallow": ("\\boxed{{{3}}}", 1.0),
    # math-verify's LaTeX parser is exponential in brace depth (5 levels: 0.5 s, 20: > 5 s): the deadline stops it
    "nested_braces": ("\\boxed{" + "{" * 300 + "3" + "}" * 300 + "}", 0.0),
    "unicode": ("答案是 ✓ 🎉 \u200b\\boxed{３}\\boxed{3}", 1.0),
    "several_boxes": ("\\boxed{1} \\boxed{2} \\boxed{3}", 1.0),
    "power_tower": ("\\boxed{9^{9^{9^{9}}}}", 0.0),
    "huge_power": ("\\boxed{2^{2^{40}}}", 0.0),
    "huge_factorial": ("\\boxed{1000000000!}", 0.0),
    "huge_symbolic_power": ("\\boxed{(x+1)^{100000000}}", 0.0),
    "nested_fracs": ("\\boxed{" + "\\frac{1}{" * 100 + "2" + "}" * 100 + "}", 0.0),
    "long_digits": ("\\boxed{" + "9" * 5000 + "}", 0.0),
    "bad_latex": ("\\boxed{\\frac{\\sqrt{}{}}}^^_}", 0.0),
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_inputs_return_promptly(name):
    completion, expected = ADVERSARIAL[name]
    fn = make_accuracy_reward(timeout=2.0, name=f"adv_{name}")
    assert fn(completions=[completion], solution=["3"]) == [expected]
    # Promptly: the deadline fired or was not needed (counted below); bench/latency.py times the slowest one.
    if name in ("power_tower", "huge_power", "huge_factorial", "huge_symbolic_power", "nested_braces"):
        assert fn.stats.timeouts == 1  # deadline hit, or refused by the cost guard: counted as a timeout
    else:
        assert fn.stats.timeouts == 0 and fn.stats.errors == 0


def test_timeouts_are_counted_and_scored_on_failure():
    fn = make_accuracy_reward(on_failure=None, timeout=1.0)
    out = fn(completions=["\\boxed{9^{9^{9}}}", "\\boxed{3}"], solution=["3", "3"])
    assert out == [None, 1.0]
    stats = get_reward_stats(fn, reset=True)
    assert stats["rewards/accuracy_reward/timeouts"] == 1
    assert stats["rewards/accuracy_reward/samples"] == 2
    assert fn.stats.samples == 0 and fn.stats.timeouts == 0
    # an unparseable gold is an error, not a wrong answer
    assert fn(completions=["\\boxed{3}"], solution=[""]) == [None]
    assert fn.stats.errors == 1


def test_signal_deadline_interrupts_python_code_and_restores_outer_timer():
    def spin():
        while True:
            pass

    with pytest.raises(SampleTimeout):  # `spin` never returns: the deadline interrupted it
        call_with_deadline(spin, 0.2)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        assert call_with_deadline(lambda: 5, 0.5) == 5
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 99.0 < remaining <= 100.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_process_backend_kills_a_hang_inside_c_code():
    # Without the guard, verify(3, 9^(9^9)) computes a 370-million-digit integer inside one C call: a signal cannot
    # stop it, the process backend kills the worker.
    fn = make_accuracy_reward(guard=False, timeout=1.0, timeout_backend="process", num_workers=1)
    fn(completions=["\\boxed{1}"], solution=["1"])  # start the worker
    out = fn(completions=["\\boxed{3}", "\\boxed{9^{9^{9}}}", "\\boxed{4}"], solution=["3", "3", "3"])
    # The hang was killed (it never finishes on its own): one timeout, scored 0, and the batch completed.
    assert out == [1.0, 0.0, 0.0]
    assert fn.stats.timeouts == 1


def test_scoring_pool_direct():
    pool = ScoringPool(1)
    try:
        out = pool.map(time.sleep, [(0.0,), (30.0,), (0.0,)], timeout=0.5)
        assert [s for s, _ in out] == ["ok", "timeout", "ok"]
        out = pool.map(int, [("7",), ("x",)], timeout=None)
        assert out[0] == ("ok", 7) and out[1][0] == "error" and "ValueError" in out[1][1]
    finally:
        pool.close()


def test_reward_called_from_a_thread_keeps_its_deadline():
    fn = make_accuracy_reward(timeout=1.0)  # auto: process backend outside the main thread
    out: list = []
    worker = threading.Thread(
        target=lambda: out.append(fn(completions=["\\boxed{3}", "\\boxed{9^{9^{9}}}"], solution=["3", "3"]))
    )
    worker.start()
    worker.join(timeout=60)
    assert out == [[1.0, 0.0]]
    assert fn.stats.timeouts == 1 and fn.stats.untimed == 0
    # the signal backend in a thread runs untimed and says so
    sig = make_accuracy_reward(timeout=1.0, timeout_backend="signal")
    worker = threading.Thread(target=lambda: out.append(sig(completions=["\\boxed{3}"], solution=["3"])))
    worker.start()
    worker.join(timeout=60)
    assert out[-1] == [1.0] and sig.stats.untimed == 1


# ------------------------------------------------------------------------------------------------------ format


@pytest.mark.parametrize(
    "fmt, completion, expected",
    [
        ("boxed", "Reasoning... so the answer is $\\boxed{3}$.", 1.0),
        ("boxed", "\\boxed{\\boxed{3}}", 1.0),
        ("boxed", "\\boxed{3}<|im_end|>", 1.0),
        ("boxed", "\\boxed{3} and also \\boxed{4}", 0.0),
        ("boxed", "\\boxed{3} but let me double check", 0.0),
        ("boxed", "\\boxed{}", 0.0),
        ("boxed", "\\boxed{3", 0.0),
        ("boxed", "", 0.0),
        ("hash", "steps\n#### 42\n", 1.0),
        ("hash", "#### 42\nmore text", 0.0),
        ("hash", "#### 41\n#### 42", 0.0),
        ("hash", "####", 0.0),
        ("answer_tag", "think first <answer> 42 </answer>\n", 1.0),
        ("answer_tag", "<answer>42</answer> trailing", 0.0),
        ("answer_tag", "<answer>1</answer><answer>2</answer>", 0.0),
        ("think_answer", "<think>hmm</think>\n<answer>42</answer>", 1.0),
        ("think_answer", "pre <think>hmm</think><answer>42</answer>", 0.0),
        ("think_answer", "<think>a</think><answer>42</answer> junk", 0.0),
    ],
)
def test_format_reward(fmt, completion, expected):
    fn = format_reward if fmt == "boxed" else make_format_reward(fmt)
    assert fn(completions=[completion]) == [expected]


def test_format_reward_names_and_adversarial():
    assert format_reward.__name__ == "format_reward"
    assert make_format_reward("hash").__name__ == "format_reward_hash"
    with pytest.raises(ValueError):
        make_format_reward("xml")
    big = ["<answer>" * 20_000, "\\boxed{" * 20_000, "<think>" * 20_000, "#### 1\n" * 20_000]
    for fmt in ("boxed", "hash", "answer_tag", "think_answer"):
        # No catastrophic backtracking: bench/latency.py holds the slowest format to 2 s.
        assert make_format_reward(fmt)(completions=big) == [0.0] * 4


# --------------------------------------------------------------------------------------------------- countdown


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<answer>(3 + 5) * 7 - 2</answer>", 1.0),
        ("<answer> (3+5)*7-2 = 54 </answer>", 1.0),
        ("<answer>54 = 7 * (5 + 3) - 2</answer>", 1.0),
        ("so \\boxed{\\left(3 + 5\\right) \\times 7 - 2}", 1.0),
        ("final line:\n(3 + 5) × 7 − 2", 1.0),
        ("<answer>(3 + 5) * 7</answer>", 0.0),  # misses a number
        ("<answer>(3 + 5) * 7 - 2 + 2 - 2</answer>", 0.0),  # uses 2 three times
        ("<answer>(3 + 5) * 7 - 1</answer>", 0.0),  # wrong value and a foreign number
        ("<answer>3 * 5 + 7 * 2</answer>", 0.0),  # valid but 29
        ("<answer>__import__('os').system('echo hi')</answer>", 0.0),
        ("<answer>(3 + 5) * 7 - 2 if 1 else 0</answer>", 0.0),
        ("<answer>3 ** 5 - 7 - 2</answer>", 0.0),
        ("<answer>-3 + 5 * 7 + 2</answer>", 0.0),
        ("<answer>3 / (5 - 5) + 7 - 2</answer>", 0.0),
        ("<answer>3.0 * 5 + 7 - 2</answer>", 0.0),
        ("<answer>" + "(" * 500 + "3" + ")" * 500 + "</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_countdown_reward(completion, expected):
    assert countdown_reward(completions=[completion], target=[54], nums=[[3, 5, 7, 2]]) == [expected]


def test_countdown_options_and_exact_arithmetic():
    value, used = evaluate_countdown_expression("(1 + 2) / 3 * 6")
    assert value == 6 and used == [1, 2, 3, 6]
    value, _ = evaluate_countdown_expression("10 / 4 * 2")  # exact: 5, not 5.000000001
    assert value == 5
    subset = make_countdown_reward(use_all_numbers=False, format_score=0.1, name="countdown_subset")
    assert subset(
        completions=["<answer>6 * 9</answer>", "<answer>6 * 8</answer>"], target=[54, 54], nums=[[6, 9, 2]] * 2
    ) == [1.0, 0.1]
    with pytest.raises(ValueError):
        make_countdown_reward(extract="nowhere")

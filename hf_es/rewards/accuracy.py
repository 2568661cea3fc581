"""`accuracy_reward`: final-answer correctness checked with `math-verify`.

The final answer is extracted by [`~hf_es.rewards.extraction.extract_answer`] (configurable: `\\boxed{}`, `####`,
"the answer is", last number; the last occurrence counts), the gold by
[`~hf_es.rewards.extraction.extract_gold`] (GSM8K `#### 18`, MATH `\\boxed{}` solutions, bare answers), and the two are
compared by `math_verify.parse` + `math_verify.verify` (numbers, fractions, LaTeX expressions, sets, intervals,
matrices; units, `\\%`, `\\$` and thousands separators normalised).

Speed: answers that are plain decimal numbers on both sides (all of GSM8K) are compared exactly with `Decimal`, without
sympy; everything else goes through `math-verify`, with parsed answers and verdicts cached (LRU), so repeated
answers across an ES population cost microseconds.

Safety: every sample runs under a per-sample deadline (see [`~hf_es.rewards.base.build_reward`]); on top of that a
cheap guard refuses, before `verify`, expressions whose evaluation would take unbounded time inside C code and so could
not be interrupted by a signal (power towers such as `9^{9^{9}}`, factorials of huge numbers). A refused sample counts
as a timeout.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

import math_verify.grader as _mv_grader
import math_verify.parser as _mv_parser
import sympy
from latex2sympy2_extended.math_normalization import NormalizationConfig
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from ..scoring import SampleTimeout
from .base import OUTCOME_NO_ANSWER, OUTCOME_OK, RewardFunction, TimeoutBackend, build_reward
from .extraction import ExtractedAnswer, _resolve_strategies, extract_answer, extract_gold
from .registry import register_reward

__all__ = ["AccuracyConfig", "accuracy_reward", "answers_match", "make_accuracy_reward", "score_accuracy"]

# Deadlines are enforced by hf_es for the whole sample (parse gold + parse answer + verify); math-verify's own
# per-call `signal.alarm` timers would cancel ours, so they are disabled and their one-time warning is silenced.
_mv_parser.TIMEOUT_WARNING_SHOWN = True
_mv_grader.TIMEOUT_WARNING_SHOWN = True

_LATEX_CONFIG = [
    LatexExtractionConfig(
        boxed_match_priority=0,
        normalization_config=NormalizationConfig(
            basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all", equations=False
        ),
    ),
    ExprExtractionConfig(),
]
_TEXT_CONFIG = [LatexExtractionConfig(), ExprExtractionConfig()]

_PLAIN_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")
# "18 dollars", "\$18 per day", "50\% of them" inside a box: keep the number.
_NUMBER_WITH_WORDS_RE = re.compile(
    r"(\\?\$)?\s*(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)\s*(\\?%)?\s+[A-Za-z][A-Za-z .]*"
)

_MAX_DIGITS = 20_000  # a numeric power/factorial with more digits than this is refused before `verify`
_MAX_SYMBOLIC_EXPONENT = 10_000


@dataclass(frozen=True)
class AccuracyConfig:
    """Configuration of [`score_accuracy`].

    Args:
        extract (`tuple[str, ...]`): answer extraction strategies, tried in order.
        max_answer_chars (`int`): longer extracted answers are treated as no answer.
        guard (`bool`): refuse numerically explosive expressions before `verify` (see module docstring).
        float_rounding (`int`), numeric_precision (`int`), strict (`bool`): passed to `math_verify.verify`.
    """

    extract: tuple[str, ...] = ("boxed", "hash", "answer_is", "last_number")
    max_answer_chars: int = 1000
    guard: bool = True
    float_rounding: int = 6
    numeric_precision: int = 15
    strict: bool = True


def _plain_number(answer: str) -> Decimal | None:
    s = answer.strip().replace("{,}", ",").replace("\u2212", "-")
    if s.startswith("\\$"):
        s = s[2:]
    elif s.startswith("$") and not s.endswith("$"):
        s = s[1:]
    s = s.strip()
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1]
    if not _PLAIN_NUMBER_RE.fullmatch(s):
        return None
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:
        return None


def _prepare_latex(answer: str) -> str:
    m = _NUMBER_WITH_WORDS_RE.fullmatch(answer.strip())
    if m:
        return m.group(2) + (m.group(3) or "")
    return answer


@lru_cache(maxsize=65536)
def _parse_cached(answer: str, kind: str) -> tuple:
    if kind == "latex":
        parsed = parse(
            "\\boxed{" + _prepare_latex(answer) + "}", extraction_config=_LATEX_CONFIG, parsing_timeout=None
        )
        if not parsed:  # not LaTeX after all: read it as text
            parsed = parse(answer, extraction_config=_TEXT_CONFIG, parsing_timeout=None)
    else:
        parsed = parse(answer, extraction_config=_TEXT_CONFIG, parsing_timeout=None)
        if not parsed and len(answer) <= 64:  # a lone answer without delimiters ("C", "(B)", "x"): read it as LaTeX
            parsed = parse(
                "\\boxed{" + answer.rstrip(".") + "}", extraction_config=_LATEX_CONFIG, parsing_timeout=None
            )
    return tuple(parsed)


def _pow10(x: float) -> float:
    return float("inf") if x > 300 else 10.0**x


def _log10_upper(e: Any) -> float:
    """A rough upper bound on log10|e| for a numeric sympy expression (0 for symbols)."""
    if isinstance(e, sympy.Integer):
        return int(abs(e.p)).bit_length() * 0.30103
    if isinstance(e, sympy.Rational):
        return max(int(abs(e.p)).bit_length(), int(e.q).bit_length()) * 0.30103
    if isinstance(e, sympy.Float):
        mpf = e._mpf_
        return max(0.0, (mpf[2] + mpf[3]) * 0.30103) if mpf[1] else 0.0
    if isinstance(e, sympy.Pow):
        base = _log10_upper(e.base)
        exp = _log10_upper(e.exp)
        if base <= 0:
            return 0.0
        return base * _pow10(exp)
    if isinstance(e, sympy.Mul):
        return sum(_log10_upper(a) for a in e.args)
    if isinstance(e, sympy.Add):
        return max((_log10_upper(a) for a in e.args), default=0.0) + 1.0
    if isinstance(e, (sympy.factorial, sympy.factorial2, sympy.subfactorial)):
        n = _pow10(_log10_upper(e.args[0]))
        return n * max(math.log10(n), 1.0) if n < float("inf") else float("inf")
    if isinstance(e, sympy.Basic) and e.args:
        return max(_log10_upper(a) for a in e.args) + 1.0
    return 1.0 if isinstance(e, sympy.Basic) and e.is_number else 0.0


def _is_explosive(parsed: Sequence[Any]) -> bool:
    for item in parsed:
        if isinstance(item, sympy.MatrixBase):
            items = list(item)
        elif isinstance(item, sympy.Basic):
            items = [item]
        else:
            continue
        for expr in items:
            for node in sympy.preorder_traversal(expr):
                if isinstance(node, sympy.Pow) and node.exp.is_number:
                    if node.base.is_number:
                        if _log10_upper(node) > _MAX_DIGITS:
                            return True
                    elif _log10_upper(node.exp) > math.log10(_MAX_SYMBOLIC_EXPONENT):
                        return True
                elif isinstance(node, (sympy.factorial, sympy.factorial2, sympy.subfactorial)):
                    if _log10_upper(node) > _MAX_DIGITS:
                        return True
    return False


@lru_cache(maxsize=65536)
def _verify_cached(gold: str, gold_kind: str, pred: str, pred_kind: str, config: AccuracyConfig) -> bool:
    gold_parsed = _parse_cached(gold, gold_kind)
    if not gold_parsed:
        raise ValueError("math-verify could not parse the gold answer")
    pred_parsed = _parse_cached(pred, pred_kind)
    if not pred_parsed:
        return False
    if config.guard and (_is_explosive(pred_parsed) or _is_explosive(gold_parsed)):
        raise SampleTimeout("expression too expensive to verify")
    return verify(
        list(gold_parsed),
        list(pred_parsed),
        float_rounding=config.float_rounding,
        numeric_precision=config.numeric_precision,
        strict=config.strict,
        timeout_seconds=None,
        raise_on_error=False,
    )


def answers_match(
    gold: ExtractedAnswer | str, pred: ExtractedAnswer | str, config: AccuracyConfig | None = None
) -> bool:
    """Whether an extracted answer matches the gold answer.

    Plain decimal numbers on both sides are compared exactly; anything else goes through `math_verify.parse` and
    `math_verify.verify` (cached). Runs without a deadline: call it through a reward function, or under
    [`~hf_es.scoring.call_with_deadline`], for untrusted input.

    Args:
        gold (`str`): the gold answer (an [`ExtractedAnswer`], or a string read as LaTeX).
        pred (`str`): the predicted answer (an [`ExtractedAnswer`], or a string read as LaTeX).
        config ([`AccuracyConfig`], *optional*): verification options.

    Returns:
        `bool`: `True` if equivalent.

    Raises:
        `ValueError`: if the gold cannot be parsed. [`SampleTimeout`]: if the cost guard refuses the expression.
    """
    config = config or AccuracyConfig()
    gold_kind = getattr(gold, "kind", "latex")
    pred_kind = getattr(pred, "kind", "latex")
    g, p = _plain_number(gold), _plain_number(pred)
    if g is not None and p is not None:
        return g == p
    return _verify_cached(str(gold), gold_kind, str(pred), pred_kind, config)


def score_accuracy(text: str, solution: Any, config: AccuracyConfig) -> tuple[float, str]:
    """Scores one completion against one gold `solution` (the per-sample scorer of `accuracy_reward`).

    Args:
        text (`str`): the completion text.
        solution (`str`): the gold (see [`~hf_es.rewards.extraction.extract_gold`]).
        config ([`AccuracyConfig`]): options.

    Returns:
        `tuple[float, str]`: `(1.0 or 0.0, outcome)` with outcome `"ok"` or `"no_answer"`.

    Raises:
        `ValueError`: if the gold is empty or unparseable.
    """
    gold = extract_gold(solution)
    if gold is None:
        raise ValueError("empty gold solution")
    pred = extract_answer(text, config.extract)
    if pred is None or len(pred) > config.max_answer_chars:
        return 0.0, OUTCOME_NO_ANSWER
    return (1.0 if answers_match(gold, pred, config) else 0.0), OUTCOME_OK


def make_accuracy_reward(
    extract: str | Sequence[str] = "auto",
    *,
    on_failure: float | None = 0.0,
    timeout: float | None = 5.0,
    timeout_backend: TimeoutBackend = "auto",
    num_workers: int = 0,
    max_answer_chars: int = 1000,
    guard: bool = True,
    float_rounding: int = 6,
    numeric_precision: int = 15,
    strict: bool = True,
    name: str = "accuracy_reward",
) -> RewardFunction:
    """Builds an accuracy reward: 1.0 if the completion's final answer equals the gold, else 0.0.

    The gold is read from the `solution` column: a GSM8K worked answer ending in `#### 18`, a MATH solution with
    `\\boxed{...}`, or a bare answer (`18`, `\\frac{14}{3}`, `(3, \\frac{\\pi}{2})`).

    Args:
        extract (`str` or sequence of `str`, *optional*, defaults to `"auto"`):
            how to find the completion's final answer: `"boxed"`, `"hash"` (`#### x`), `"answer_is"`
            ("The answer is x"), `"last_number"`, a sequence of these tried in order, or `"auto"` (all four, in that
            order). The last occurrence counts.
        on_failure (`float` or `None`, *optional*, defaults to 0.0): score for a sample that timed out, was refused
            by the cost guard, or raised (including an unparseable gold). `None` makes TRL-style trainers skip it.
        timeout (`float` or `None`, *optional*, defaults to 5.0): per-sample deadline in seconds.
        timeout_backend (`str`, *optional*, defaults to `"auto"`): `"signal"`, `"process"`, `"none"` or `"auto"`;
            see [`~hf_es.rewards.base.build_reward`].
        num_workers (`int`, *optional*, defaults to 0): score in this many worker processes.
        max_answer_chars (`int`, *optional*, defaults to 1000): longer extracted answers count as no answer.
        guard (`bool`, *optional*, defaults to `True`): refuse power towers / huge factorials before `verify`.
        float_rounding (`int`), numeric_precision (`int`), strict (`bool`): forwarded to `math_verify.verify`.
        name (`str`, *optional*, defaults to `"accuracy_reward"`): the function's `__name__`.

    Returns:
        `Callable`: `reward(prompts, completions, solution, **kwargs) -> list[float | None]`. Its `stats` attribute
        ([`~hf_es.rewards.base.RewardStats`]) counts samples, timeouts, errors and missing answers; read it with
        `stats.as_dict()` and clear it with `stats.reset()`.
    """
    config = AccuracyConfig(
        extract=_resolve_strategies(extract),
        max_answer_chars=max_answer_chars,
        guard=guard,
        float_rounding=float_rounding,
        numeric_precision=numeric_precision,
        strict=strict,
    )
    doc = (
        f"{name}(prompts, completions, solution, **kwargs) -> list[float | None]: 1.0 if the final answer "
        f"(extracted with {config.extract}) matches `solution` under math-verify, else 0.0; timeouts/errors score "
        f"{on_failure!r}. Counters in `{name}.stats`.\n\n" + (make_accuracy_reward.__doc__ or "")
    )
    return build_reward(
        name,
        score_accuracy,
        config,
        columns=("solution",),
        on_failure=on_failure,
        timeout=timeout,
        timeout_backend=timeout_backend,
        num_workers=num_workers,
        doc=doc,
    )


#: Default accuracy reward: answers extracted with `"auto"`, 5 s per-sample deadline, failures score 0.0.
accuracy_reward = register_reward("accuracy", make_accuracy_reward())

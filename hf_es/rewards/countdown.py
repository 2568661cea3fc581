"""`countdown_reward`: the Countdown numbers game, verified with a safe AST walk (never `eval`).

The model must combine the given numbers, each exactly once, with `+ - * /` and parentheses to hit the target, e.g.
numbers `[3, 5, 7, 2]`, target `54`: `(3 + 5) * 7 - 2`. The expression is taken from the completion's last
`<answer>...</answer>` (or `\\boxed{...}`, or last line), normalised (`\\times`, `×`, `÷`, `\\left(` ...), checked
against a character whitelist and a length cap, parsed with `ast.parse(mode="eval")` and evaluated by walking the tree
with exact `Fraction` arithmetic; only integer literals, the four binary operators and parentheses are accepted.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .base import OUTCOME_NO_ANSWER, OUTCOME_OK, RewardFunction, TimeoutBackend, build_reward
from .extraction import extract_last_boxed, extract_last_tag
from .registry import register_reward

__all__ = [
    "CountdownConfig",
    "countdown_reward",
    "evaluate_countdown_expression",
    "extract_countdown_expression",
    "make_countdown_reward",
    "score_countdown",
]

_ALLOWED_CHARS_RE = re.compile(r"[0-9+\-*/() ]+")
_REPLACEMENTS = (
    ("\\left", ""),
    ("\\right", ""),
    ("\\times", "*"),
    ("\\cdot", "*"),
    ("\\div", "/"),
    ("×", "*"),
    ("·", "*"),
    ("∗", "*"),
    ("÷", "/"),
    ("−", "-"),
    ("–", "-"),
    ("\\[", ""),
    ("\\]", ""),
    ("\\(", ""),
    ("\\)", ""),
    ("$", ""),
    ("[", "("),
    ("]", ")"),
    ("{", "("),
    ("}", ")"),
    ("\t", " "),
    ("\n", " "),
)
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


@dataclass(frozen=True)
class CountdownConfig:
    """Configuration of [`score_countdown`].

    Args:
        extract (`str`): where the expression is: `"answer_tag"` (last `<answer>...</answer>`), `"boxed"`, `"last_line"`
            or `"auto"` (answer tag, then box, then last line).
        use_all_numbers (`bool`): every given number must be used exactly once (else: each at most once).
        format_score (`float`): score of a well-formed expression that misses the target or uses the numbers wrongly.
        max_chars (`int`): longer expressions are rejected.
    """

    extract: str = "auto"
    use_all_numbers: bool = True
    format_score: float = 0.0
    max_chars: int = 256


def extract_countdown_expression(text: str, extract: str = "auto") -> str | None:
    """Extracts the candidate equation from a completion.

    Args:
        text (`str`): the completion.
        extract (`str`, *optional*, defaults to `"auto"`): `"answer_tag"`, `"boxed"`, `"last_line"` or `"auto"`.

    Returns:
        `str` or `None`: the raw (un-normalised) expression text.
    """
    order = {
        "auto": ("answer_tag", "boxed", "last_line"),
        "answer_tag": ("answer_tag",),
        "boxed": ("boxed",),
        "last_line": ("last_line",),
    }
    if extract not in order:
        raise ValueError(f"extract must be one of {tuple(order)}, got {extract!r}")
    for how in order[extract]:
        if how == "answer_tag":
            value = extract_last_tag(text, "answer")
        elif how == "boxed":
            value = extract_last_boxed(text)
        else:
            lines = [ln for ln in text.strip().splitlines() if any(c.isdigit() for c in ln)]
            value = lines[-1] if lines else None
        if value is not None and value.strip():
            return value.strip()
    return None


def _normalise(expr: str, target: int | None) -> str:
    for old, new in _REPLACEMENTS:
        expr = expr.replace(old, new)
    expr = expr.strip().rstrip(".").strip()
    if "=" in expr:
        sides = [s.strip() for s in expr.split("=") if s.strip()]
        # Keep the side that is not just the target (`(1+2)*3 = 9`, `9 = (1+2)*3`), else the left one.
        candidates = [s for s in sides if not (target is not None and s.strip("() ") == str(target))]
        expr = (candidates or sides or [""])[0]
    return expr


def _eval_node(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body, used)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left = _eval_node(node.left, used)
        right = _eval_node(node.right, used)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            raise ZeroDivisionError("division by zero")
        return left / right
    raise ValueError(f"disallowed syntax: {type(node).__name__}")


def evaluate_countdown_expression(expr: str, max_chars: int = 256) -> tuple[Fraction, list[int]]:
    """Safely evaluates an arithmetic expression of integer literals, `+ - * /` and parentheses.

    Args:
        expr (`str`): the expression (already normalised: only digits, operators, parentheses, spaces).
        max_chars (`int`, *optional*, defaults to 256): longer expressions are rejected.

    Returns:
        `tuple[Fraction, list[int]]`: the exact value and the integer literals used, in order.

    Raises:
        `ValueError`: disallowed characters or syntax (names, calls, `**`, unary minus, floats, ...), too long.
        `ZeroDivisionError`: division by zero.
        `SyntaxError`: not a valid expression.
    """
    if len(expr) > max_chars:
        raise ValueError(f"expression longer than {max_chars} characters")
    if not _ALLOWED_CHARS_RE.fullmatch(expr):
        raise ValueError("expression contains disallowed characters")
    if "**" in expr or "//" in expr:
        raise ValueError("only + - * / are allowed")
    tree = ast.parse(expr, mode="eval")
    used: list[int] = []
    return _eval_node(tree, used), used


def score_countdown(text: str, target: Any, nums: Any, config: CountdownConfig) -> tuple[float, str]:
    """Scores one Countdown completion (the per-sample scorer of `countdown_reward`).

    Args:
        text (`str`): the completion text.
        target (`int`): the target number.
        nums (`list[int]`): the available numbers.
        config ([`CountdownConfig`]): options.

    Returns:
        `tuple[float, str]`: 1.0 if the expression is valid, uses the numbers correctly and equals the target;
        `config.format_score` if it is a valid expression that fails either check; 0.0 if there is no valid
        expression (outcome `"no_answer"` when nothing could be extracted).
    """
    target = int(target)
    nums = [int(n) for n in nums]
    raw = extract_countdown_expression(text, config.extract)
    if raw is None or len(raw) > 4 * config.max_chars:
        return 0.0, OUTCOME_NO_ANSWER
    expr = _normalise(raw, target)
    try:
        value, used = evaluate_countdown_expression(expr, config.max_chars)
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError, MemoryError):
        return 0.0, OUTCOME_OK
    available, counted = Counter(nums), Counter(used)
    numbers_ok = counted == available if config.use_all_numbers else not (counted - available)
    if numbers_ok and value == target:
        return 1.0, OUTCOME_OK
    return config.format_score, OUTCOME_OK


def make_countdown_reward(
    extract: str = "auto",
    *,
    use_all_numbers: bool = True,
    format_score: float = 0.0,
    max_chars: int = 256,
    on_failure: float | None = 0.0,
    timeout: float | None = 1.0,
    timeout_backend: TimeoutBackend = "auto",
    name: str = "countdown_reward",
) -> RewardFunction:
    """Builds a Countdown reward: 1.0 if the completion's equation uses the numbers correctly and hits the target.

    Reads the `target` (int) and `nums` (list of int) dataset columns, as produced by
    [`~hf_es.data.load_countdown`] (and TinyZero's Countdown datasets).

    Args:
        extract (`str`, *optional*, defaults to `"auto"`): `"answer_tag"`, `"boxed"`, `"last_line"` or `"auto"`.
        use_all_numbers (`bool`, *optional*, defaults to `True`): every number exactly once (else at most once).
        format_score (`float`, *optional*, defaults to 0.0): score of a valid expression that is wrong (TinyZero
            uses 0.1).
        max_chars (`int`, *optional*, defaults to 256): longer expressions are rejected.
        on_failure (`float` or `None`, *optional*, defaults to 0.0): score of a sample that timed out or raised.
        timeout (`float` or `None`, *optional*, defaults to 1.0): per-sample deadline in seconds.
        timeout_backend (`str`, *optional*, defaults to `"auto"`): see [`~hf_es.rewards.base.build_reward`].
        name (`str`, *optional*, defaults to `"countdown_reward"`): the function's `__name__`.

    Returns:
        `Callable`: `reward(prompts, completions, target, nums, **kwargs) -> list[float | None]` with a `stats`
        attribute.
    """
    config = CountdownConfig(
        extract=extract, use_all_numbers=use_all_numbers, format_score=format_score, max_chars=max_chars
    )
    extract_countdown_expression("", extract)  # validates `extract`
    doc = (
        f"{name}(prompts, completions, target, nums, **kwargs) -> list[float | None]: 1.0 if the final equation "
        f"uses `nums` {'exactly' if use_all_numbers else 'at most'} once each with + - * / and equals `target`. "
        f"Counters in `{name}.stats`.\n\n" + (score_countdown.__doc__ or "")
    )
    return build_reward(
        name,
        score_countdown,
        config,
        columns=("target", "nums"),
        on_failure=on_failure,
        timeout=timeout,
        timeout_backend=timeout_backend,
        doc=doc,
    )


#: Default Countdown reward: last `<answer>` (or box, or last line); all numbers exactly once; 1.0 / 0.0.
countdown_reward = register_reward("countdown", make_countdown_reward())

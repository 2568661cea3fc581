"""`format_reward`: the completion ends with exactly one final answer in the requested format."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .base import OUTCOME_NO_ANSWER, OUTCOME_OK, RewardFunction, TimeoutBackend, build_reward
from .extraction import _boxed_spans
from .registry import register_reward

__all__ = ["ANSWER_FORMATS", "FormatConfig", "format_reward", "make_format_reward", "score_format"]

#: Supported formats: `\\boxed{x}`, `#### x` (GSM8K), `<answer>x</answer>`, `<think>...</think><answer>x</answer>`.
ANSWER_FORMATS = ("boxed", "hash", "answer_tag", "think_answer")

# What may follow the final answer: whitespace, closing math delimiters, final punctuation, an end-of-sequence marker.
_TRAILER_RE = re.compile(r"(?:\s|\$|\\\]|\\\)|[.!]|</s>|<\|im_end\|>|<\|endoftext\|>|<\|eot_id\|>)*")
_HASH_LINE_RE = re.compile(r"(?m)^[ \t]*####[ \t]*(\S[^\n]*?)[ \t]*$")
_THINK_ANSWER_RE = re.compile(
    r"\s*<think>(?:(?!</?think>).)*</think>\s*<answer>((?:(?!</?answer>).)*)</answer>", re.DOTALL
)


@dataclass(frozen=True)
class FormatConfig:
    """Configuration of [`score_format`].

    Args:
        format (`str`): one of [`ANSWER_FORMATS`].
    """

    format: str = "boxed"


def _only_trailer(text: str, start: int) -> bool:
    m = _TRAILER_RE.match(text, start)
    return m is not None and m.end() == len(text)


def score_format(text: str, config: FormatConfig) -> tuple[float, str]:
    """1.0 if `text` ends with exactly one non-empty final answer in `config.format`, else 0.0.

    - `"boxed"`: exactly one `\\boxed{...}` (nested boxes count once), and after it only whitespace, `$`, `\\]`,
      `\\)`, `.`/`!` or an end-of-sequence token.
    - `"hash"`: exactly one `#### x` line, and it is the last non-empty line.
    - `"answer_tag"`: exactly one `<answer>x</answer>`, followed only by whitespace / an end-of-sequence token.
    - `"think_answer"`: the whole completion is `<think>...</think>` then `<answer>x</answer>`.

    Args:
        text (`str`): the completion text.
        config ([`FormatConfig`]): the requested format.

    Returns:
        `tuple[float, str]`: the score and the outcome (`"no_answer"` when no answer in the format was found).
    """
    fmt = config.format
    if fmt == "boxed":
        spans = _boxed_spans(text)
        # Outermost boxes only: a box inside another box is part of the same answer.
        outer = [s for s in spans if not any(o[0] < s[0] and s[1] <= o[1] for o in spans)]
        if not outer:
            return 0.0, OUTCOME_NO_ANSWER
        start, end, content = outer[-1]
        ok = len(outer) == 1 and content.strip() != "" and _only_trailer(text, end)
    elif fmt == "hash":
        lines = _HASH_LINE_RE.findall(text)
        if not lines and "####" not in text:
            return 0.0, OUTCOME_NO_ANSWER
        last_line = text.rstrip().rsplit("\n", 1)[-1]
        ok = len(lines) == 1 and text.count("####") == 1 and last_line.strip().startswith("####")
        ok = ok and bool(lines[0].strip())
    elif fmt == "answer_tag":
        close = text.rfind("</answer>")
        if close < 0:
            return 0.0, OUTCOME_NO_ANSWER
        open_ = text.rfind("<answer>", 0, close)
        ok = (
            text.count("<answer>") == 1
            and text.count("</answer>") == 1
            and open_ >= 0
            and text[open_ + len("<answer>") : close].strip() != ""
            and _only_trailer(text, close + len("</answer>"))
        )
    elif fmt == "think_answer":
        m = _THINK_ANSWER_RE.match(text)
        if "<answer>" not in text:
            return 0.0, OUTCOME_NO_ANSWER
        ok = m is not None and m.group(1).strip() != "" and _only_trailer(text, m.end())
    else:  # validated in make_format_reward
        raise ValueError(f"unknown format {fmt!r}")
    return (1.0 if ok else 0.0), OUTCOME_OK


def make_format_reward(
    format: str = "boxed",
    *,
    on_failure: float | None = 0.0,
    timeout: float | None = 1.0,
    timeout_backend: TimeoutBackend = "auto",
    name: str | None = None,
) -> RewardFunction:
    """Builds a format reward: 1.0 if the completion ends with exactly one final answer in `format`, else 0.0.

    Args:
        format (`str`, *optional*, defaults to `"boxed"`): one of `"boxed"`, `"hash"`, `"answer_tag"`,
            `"think_answer"` (see [`score_format`]).
        on_failure (`float` or `None`, *optional*, defaults to 0.0): score of a sample that timed out or raised.
        timeout (`float` or `None`, *optional*, defaults to 1.0): per-sample deadline in seconds.
        timeout_backend (`str`, *optional*, defaults to `"auto"`): see [`~hf_es.rewards.base.build_reward`].
        name (`str`, *optional*): the function's `__name__`; defaults to `"format_reward"` for `"boxed"` and
            `"format_reward_<format>"` otherwise.

    Returns:
        `Callable`: `reward(prompts, completions, **kwargs) -> list[float | None]` with a `stats` attribute.
    """
    if format not in ANSWER_FORMATS:
        raise ValueError(f"format must be one of {ANSWER_FORMATS}, got {format!r}")
    name = name or ("format_reward" if format == "boxed" else f"format_reward_{format}")
    doc = (
        f"{name}(prompts, completions, **kwargs) -> list[float | None]: 1.0 if the completion ends with exactly one "
        f"final answer in the {format!r} format, else 0.0. Counters in `{name}.stats`.\n\n"
        + (score_format.__doc__ or "")
    )
    return build_reward(
        name,
        score_format,
        FormatConfig(format=format),
        on_failure=on_failure,
        timeout=timeout,
        timeout_backend=timeout_backend,
        doc=doc,
    )


#: Default format reward: exactly one `\\boxed{...}`, at the end of the completion.
format_reward = register_reward("format", make_format_reward())

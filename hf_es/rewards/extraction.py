"""Final-answer extraction from model completions and gold solutions.

Everything here is plain string processing that runs in time linear in the input (no backtracking-prone regular
expressions on unbounded input), so it is safe to run on adversarial completions before any timeout is armed. The
heavy lifting (LaTeX/expression parsing and equivalence checking) happens later, in `math-verify`.

Extraction strategies (see [`extract_answer`]):

- `"boxed"`: the content of the last complete `\\boxed{...}` / `\\fbox{...}` (balanced braces, escaped braces `\\{`
  `\\}` are content).
- `"hash"`: the text after the last `####` marker, up to the end of its line (GSM8K style).
- `"answer_is"`: the text after the last "answer is" / "final answer:" / "Answer:" phrase, up to the end of its line.
- `"last_number"`: the last number in the text (integers, decimals, thousands separators, simple fractions `a/b`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "ANSWER_STRATEGIES",
    "DEFAULT_STRATEGIES",
    "ExtractedAnswer",
    "completion_to_text",
    "extract_all_boxed",
    "extract_answer",
    "extract_answer_is",
    "extract_gold",
    "extract_hash",
    "extract_last_boxed",
    "extract_last_number",
    "extract_last_tag",
]

#: All extraction strategies, in the order `"auto"` tries them.
ANSWER_STRATEGIES: tuple[str, ...] = ("boxed", "hash", "answer_is", "last_number")
#: Strategies tried by `extract="auto"`.
DEFAULT_STRATEGIES: tuple[str, ...] = ANSWER_STRATEGIES

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*(\{)?")
# A brace that is not escaped by a single backslash (`\{` is a literal brace in LaTeX; `\\{` is a line break + brace).
_BRACE_RE = re.compile(r"(?<!\\)(?:\\\\)*[{}]")
_BARE_TOKEN_RE = re.compile(r"[^\s$\\{}]{1,64}")
_HASH_RE = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS_RE = re.compile(
    r"(?i)\b(?:final\s+answer|the\s+answer|answer)\s*(?:\*\*|__)?\s*(?:is|:|=)\s*(?:\*\*|__)?[ \t]*:?[ \t]*([^\n]*)"
)
# Numbers: thousands-separated (1,234,567.89), plain (1234.5, .5), optional sign, optional simple fraction a/b.
_NUMBER_RE = re.compile(r"(?<![\w.])-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:/\d+)?")


class ExtractedAnswer(str):
    """A string holding an extracted answer, tagged with the strategy that produced it.

    `kind` is `"latex"` for content taken from `\\boxed{}` or a bare LaTeX gold, and `"text"` for free text (after
    `####`, "the answer is", or a bare number), which is parsed less strictly.
    """

    kind: str
    strategy: str

    def __new__(cls, value: str, kind: str, strategy: str) -> ExtractedAnswer:
        obj = super().__new__(cls, value)
        obj.kind = kind
        obj.strategy = strategy
        return obj

    def __reduce__(self):  # keep the tags across pickling (process pool)
        return (ExtractedAnswer, (str(self), self.kind, self.strategy))


def completion_to_text(completion: Any) -> str:
    """Turns a TRL completion into plain text.

    Args:
        completion (`str`, `list[dict]`, `dict` or `None`):
            A string, or conversational messages such as `[{"role": "assistant", "content": "..."}]`. Message content
            may itself be a list of parts (`{"type": "text", "text": "..."}`).

    Returns:
        `str`: the text of all assistant messages joined by newlines (all messages if none has the assistant role),
        or `""` for `None`.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_to_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        if not messages:
            return "\n".join(str(m) for m in completion)
        assistant = [m for m in messages if m.get("role") == "assistant"]
        return "\n".join(_content_to_text(m.get("content")) for m in (assistant or messages))
    return str(completion)


def _content_to_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)


def _boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """All complete `\\boxed` occurrences as `(start, end, content)`, in order, in O(len(text))."""
    first = text.find("\\boxed")
    first_fbox = text.find("\\fbox")
    starts = [i for i in (first, first_fbox) if i >= 0]
    if not starts:
        return []
    offset = min(starts)
    # Match every unescaped brace once with a stack: open index -> close index.
    close_of: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text, offset):
        pos = m.end() - 1
        if text[pos] == "{":
            stack.append(pos)
        elif stack:
            close_of[stack.pop()] = pos
    spans = []
    for m in _BOXED_RE.finditer(text, offset):
        if m.group(1):  # \boxed{...}
            open_pos = m.end() - 1
            close_pos = close_of.get(open_pos)
            if close_pos is None:
                continue  # unbalanced / truncated box
            spans.append((m.start(), close_pos + 1, text[open_pos + 1 : close_pos]))
        elif m.group(0)[-1].isspace():  # `\boxed 5`: TeX allows a single token without braces
            tok = _BARE_TOKEN_RE.match(text, m.end())
            if tok:
                spans.append((m.start(), tok.end(), tok.group(0)))
    return spans


def extract_all_boxed(text: str) -> list[str]:
    """Contents of all complete `\\boxed{...}`/`\\fbox{...}` in `text`, in order of appearance.

    Args:
        text (`str`): the text to search.

    Returns:
        `list[str]`: the box contents (nested boxes are returned as well, outer first).
    """
    return [s[2] for s in _boxed_spans(text)]


def extract_last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` in `text` (the one that ends last), or `None`."""
    spans = _boxed_spans(text)
    if not spans:
        return None
    value = max(spans, key=lambda s: (s[1], -s[0]))[2]
    # `\boxed{\boxed{3}}`: descend to the innermost box.
    while value.lstrip().startswith(("\\boxed", "\\fbox")):
        inner = extract_last_boxed(value)
        if inner is None:
            break
        value = inner
    return value


def extract_hash(text: str) -> str | None:
    """Text after the last `####` marker, up to the end of its line, or `None` if absent or empty."""
    idx = text.rfind("####")
    if idx < 0:
        return None
    m = _HASH_RE.match(text, idx)
    value = m.group(1).strip() if m else ""
    return value or None


def extract_answer_is(text: str) -> str | None:
    """Text after the last "the answer is" / "final answer:" / "Answer:" phrase, up to the end of its line."""
    last = None
    for m in _ANSWER_IS_RE.finditer(text):
        value = m.group(1).strip()
        if value:
            last = value
    return last


def extract_last_number(text: str) -> str | None:
    """The last number in `text` (e.g. `-1,234.5`, `.5`, `3/4`), or `None`."""
    last = None
    for m in _NUMBER_RE.finditer(text):
        last = m.group(0)
    return last


def extract_last_tag(text: str, tag: str = "answer") -> str | None:
    """Content of the last complete `<tag>...</tag>` element, or `None`."""
    close = f"</{tag}>"
    end = text.rfind(close)
    if end < 0:
        return None
    start = text.rfind(f"<{tag}>", 0, end)
    if start < 0:
        return None
    return text[start + len(tag) + 2 : end]


_EXTRACTORS = {
    "boxed": (extract_last_boxed, "latex"),
    "hash": (extract_hash, "text"),
    "answer_is": (extract_answer_is, "text"),
    "last_number": (extract_last_number, "text"),
}


def _resolve_strategies(extract: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(extract, str):
        strategies = DEFAULT_STRATEGIES if extract == "auto" else (extract,)
    else:
        strategies = tuple(extract)
    unknown = [s for s in strategies if s not in _EXTRACTORS]
    if unknown or not strategies:
        raise ValueError(
            f"Unknown answer extraction strategy {unknown or strategies}; choose from {ANSWER_STRATEGIES}."
        )
    return strategies


def extract_answer(text: str, extract: str | Sequence[str] = "auto") -> ExtractedAnswer | None:
    """Extracts the final answer of a completion.

    The strategies are tried in order; the first one that finds something wins, and within a strategy the *last*
    occurrence counts (a completion that boxes several answers is judged on its last box).

    Args:
        text (`str`): the completion text.
        extract (`str` or sequence of `str`, *optional*, defaults to `"auto"`):
            `"auto"` (= `("boxed", "hash", "answer_is", "last_number")`), one strategy name, or a sequence of them.

    Returns:
        [`ExtractedAnswer`] or `None`: the answer string, tagged with its `kind` and `strategy`.
    """
    for strategy in _resolve_strategies(extract):
        fn, kind = _EXTRACTORS[strategy]
        value = fn(text)
        if value is not None and value.strip():
            return ExtractedAnswer(value.strip(), kind, strategy)
    return None


def extract_gold(solution: Any) -> ExtractedAnswer | None:
    """Extracts the gold final answer from a `solution` column value.

    Accepts a GSM8K worked answer ending in `#### 18`, a MATH worked solution containing `\\boxed{...}` (the last
    box counts), or a bare answer (`18`, `\\frac{14}{3}`, `(3, \\frac{\\pi}{2})`), which is read as LaTeX.

    Args:
        solution (`str`, `int` or `float`): the gold value.

    Returns:
        [`ExtractedAnswer`] or `None` if `solution` is empty.
    """
    if solution is None:
        return None
    text = solution if isinstance(solution, str) else str(solution)
    if "####" in text:
        value = extract_hash(text)
        return ExtractedAnswer(value, "text", "hash") if value else None
    if "\\boxed" in text or "\\fbox" in text:
        value = extract_last_boxed(text)
        if value and value.strip():
            return ExtractedAnswer(value.strip(), "latex", "boxed")
    text = text.strip()
    if not text:
        return None
    if text.startswith("$") and text.endswith("$") and len(text) > 1:
        text = text.strip("$").strip()
    return ExtractedAnswer(text, "latex", "bare")

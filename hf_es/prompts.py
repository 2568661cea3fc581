"""The one path from dataset prompts to the text a generation backend receives (training, evaluation, scripts).

TRL's convention: a conversational prompt (a list of `{"role", "content"}` messages) goes through the tokenizer's chat
template with `add_generation_prompt=True`; a plain-text prompt is sent as it is. Text that is not valid UTF-8 is
repaired (U+FFFD) with one warning, and a prompt longer than `max_prompt_length` tokens is either an error naming the
fixes or, with `overflow="truncate"`, cut from the left so that its end (usually the question) is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from trl.data_utils import is_conversational

logger = logging.getLogger(__name__)

__all__ = ["OVERFLOW_POLICIES", "fit_prompts", "format_prompts", "is_conversational_prompt", "prompt_texts"]

OVERFLOW_POLICIES = ("error", "truncate")


def is_conversational_prompt(prompt: Any) -> bool:
    """Whether `prompt` is a list of chat messages (TRL's `is_conversational` on `{"prompt": prompt}`)."""
    return isinstance(prompt, list) and bool(prompt) and is_conversational({"prompt": prompt})


def prompt_texts(
    prompts: Sequence[str | list[dict]],
    tokenizer: Any,
    *,
    max_prompt_length: int | None = None,
    overflow: str = "error",
    chat_template_kwargs: dict | None = None,
) -> list[str]:
    """Turns dataset prompts into the texts to generate from.

    Args:
        prompts (`Sequence[str | list[dict]]`):
            Plain-text prompts, chat conversations, or `bytes` (decoded as UTF-8, invalid bytes replaced).
        tokenizer ([`~transformers.PreTrainedTokenizerBase`]):
            Applies the chat template and counts tokens.
        max_prompt_length (`int`, *optional*):
            Most tokens a prompt may have (e.g. the model context minus `max_completion_length`); `None`: no limit.
        overflow (`str`, *optional*, defaults to `"error"`):
            What to do with a longer prompt: `"error"` raises a `ValueError` naming the fixes, `"truncate"` keeps its
            last `max_prompt_length` tokens.
        chat_template_kwargs (`dict`, *optional*):
            Extra arguments of `tokenizer.apply_chat_template` (e.g. `{"enable_thinking": False}`).

    Returns:
        `list[str]`: One text per prompt.
    """
    texts = format_prompts(prompts, tokenizer, chat_template_kwargs=chat_template_kwargs)
    return fit_prompts(texts, tokenizer, max_prompt_length, overflow=overflow)[0]


def format_prompts(prompts: Sequence[Any], tokenizer: Any, *, chat_template_kwargs: dict | None = None) -> list[str]:
    """The first half of [`prompt_texts`]: chat template for conversations, raw text otherwise, valid UTF-8."""
    texts, repaired = [], []
    for index, prompt in enumerate(prompts):
        if isinstance(prompt, (bytes, bytearray)):
            prompt = bytes(prompt).decode("utf-8", errors="surrogateescape")  # made valid below
        if is_conversational_prompt(prompt):
            text = tokenizer.apply_chat_template(
                prompt, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
            )
        elif isinstance(prompt, str):
            text = prompt
        else:
            raise ValueError(
                f"A prompt must be a string or a list of chat messages with 'role' and 'content', got "
                f"{type(prompt).__name__}: {str(prompt)[:80]!r}."
            )
        text, replaced = valid_utf8(text)
        texts.append(text)
        if replaced:
            repaired.append(index)
    if repaired:
        logger.warning(
            f"Prompts {repaired[:10]} of the batch hold bytes that are not valid UTF-8; they were replaced by U+FFFD. "
            "Clean the dataset (e.g. decode with errors='replace') to silence this warning."
        )
    return texts


def fit_prompts(
    texts: list[str], tokenizer: Any, max_prompt_length: int | None, *, overflow: str = "error"
) -> tuple[list[str], list[int]]:
    """The second half of [`prompt_texts`]: enforces `max_prompt_length` with the `overflow` policy.

    Returns:
        `(texts, truncated)`: the texts, and the indices of those that were cut from the left.
    """
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, got {overflow!r}.")
    if max_prompt_length is None:
        return list(texts), []
    texts = list(texts)
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    truncated = []
    for index, length in enumerate(lengths):
        if length <= max_prompt_length:
            continue
        if overflow != "truncate" or max_prompt_length < 1:
            fix = (
                "Filter long prompts from the dataset, lower max_completion_length, or set "
                "prompt_overflow='truncate' to keep the end of such prompts."
                if max_prompt_length >= 1
                else "max_completion_length alone fills the model context; lower it."
            )
            raise ValueError(
                f"Prompt {index} of the batch has {length} tokens, more than the {max_prompt_length} the model context "
                f"leaves for a prompt (max_prompt_length). {fix} Prompt starts: {texts[index][:120]!r}"
            )
        texts[index] = keep_last_tokens(texts[index], tokenizer, max_prompt_length)
        truncated.append(index)
    if truncated:
        logger.warning(
            f"Truncated {len(truncated)} prompt(s) from the left to {max_prompt_length} tokens; (index, tokens): "
            f"{[(i, lengths[i]) for i in truncated][:10]}."
        )
    return texts, truncated


def keep_last_tokens(text: str, tokenizer: Any, budget: int) -> str:
    """The longest suffix of `text`, cut at a token boundary, that tokenizes to at most `budget` tokens."""
    keep = budget
    for _ in range(8):  # re-tokenising a suffix can merge differently; shrink until it fits
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        suffix = tokenizer.decode(ids[-keep:], skip_special_tokens=False)
        length = len(tokenizer(suffix, add_special_tokens=False)["input_ids"])
        if length <= budget:
            return suffix
        keep -= length - budget
    raise ValueError(f"Could not truncate a prompt to {budget} tokens; filter long prompts from the dataset.")


def valid_utf8(text: str) -> tuple[str, bool]:
    """`(text, replaced)`: what cannot be UTF-8 (lone surrogates, e.g. from bytes decoded with `surrogateescape`) is
    replaced by U+FFFD."""
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", errors="surrogatepass")
    return raw.decode("utf-8", errors="replace"), True

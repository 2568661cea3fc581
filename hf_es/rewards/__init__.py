"""Verifiable rewards for ES/GRPO post-training, in TRL's reward-function convention.

Every reward is a plain function `f(prompts, completions, **columns) -> list[float | None]` with a `__name__` (logged
by trainers as `rewards/<__name__>/mean`); completions may be strings or conversational message lists. Configurable
variants come from `make_*` factories. Each function carries `fn.stats` ([`RewardStats`]): counters of samples,
timeouts, errors and missing answers that a trainer can log (`fn.stats.as_dict()`) and clear (`fn.stats.reset()`), or
read both ways with [`get_reward_stats`].

Each verifier registers itself by name ([`register_reward`], in its own module); [`reward_functions`] /
[`get_reward`] look them up. Every module and subpackage in this folder is imported below, so a new verifier is one
new file or folder here (see `registry.py`).
"""

import sys

from .accuracy import AccuracyConfig, accuracy_reward, answers_match, make_accuracy_reward, score_accuracy
from .base import RewardStats, build_reward, get_reward_stats
from .countdown import (
    CountdownConfig,
    countdown_reward,
    evaluate_countdown_expression,
    extract_countdown_expression,
    make_countdown_reward,
    score_countdown,
)
from .extraction import completion_to_text, extract_all_boxed, extract_answer, extract_gold, extract_last_boxed
from .format import ANSWER_FORMATS, FormatConfig, format_reward, make_format_reward, score_format
from .registry import discover_rewards, get_reward, register_reward, registered_rewards, reward_functions

__all__ = [
    "ANSWER_FORMATS",
    "CountdownConfig",
    "FormatConfig",
    "countdown_reward",
    "evaluate_countdown_expression",
    "extract_countdown_expression",
    "format_reward",
    "make_countdown_reward",
    "make_format_reward",
    "score_countdown",
    "score_format",
    "AccuracyConfig",
    "RewardStats",
    "accuracy_reward",
    "answers_match",
    "build_reward",
    "completion_to_text",
    "extract_all_boxed",
    "extract_answer",
    "extract_gold",
    "extract_last_boxed",
    "get_reward",
    "get_reward_stats",
    "make_accuracy_reward",
    "register_reward",
    "registered_rewards",
    "reward_functions",
    "score_accuracy",
]

discover_rewards(sys.modules[__name__])

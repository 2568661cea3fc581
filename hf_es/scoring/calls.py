"""Calling user reward functions safely: a deadline per call, and recognising a missing dataset column."""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .timeout import SampleTimeout, call_with_deadline, signal_timer_available

__all__ = ["TRAINER_REWARD_ARGS", "RewardTimeout", "call_with_timeout", "missing_column"]

TRAINER_REWARD_ARGS = ("prompts", "completions", "completion_ids", "trainer_state", "log_metric", "log_extra")


class RewardTimeout(Exception):
    """A reward function call ran past its deadline."""


def call_with_timeout(func: Callable[..., Any], timeout: float | None, kwargs: dict[str, Any]) -> Any:
    """Calls `func(**kwargs)`, raising `RewardTimeout` after `timeout` seconds (None/0: no deadline).

    In the main thread a `SIGALRM` timer interrupts the call (an outer timer is re-armed afterwards); elsewhere the call
    runs in a daemon thread that is abandoned when it misses the deadline.
    """
    func = _awaiting(func)
    if not timeout:
        return func(**kwargs)
    if signal_timer_available():
        try:
            return call_with_deadline(lambda: func(**kwargs), timeout)
        except SampleTimeout:
            raise RewardTimeout(f"timed out after {timeout:g}s") from None
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = func(**kwargs)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="hf_es-reward", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RewardTimeout(f"timed out after {timeout:g}s (the call is left running in a daemon thread)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _awaiting(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func`, run to completion when it is a coroutine function (TRL accepts `async def` reward functions)."""
    if not inspect.iscoroutinefunction(func):
        return func

    def run(**kwargs: Any) -> Any:
        return asyncio.run(func(**kwargs))  # in the caller's (or the deadline's) thread, which has no running loop

    return run


def code_constants(func: Any) -> set[str]:
    """String constants in a function's code (nested code objects included), to recognise `kwargs["column"]`."""
    code = getattr(inspect.unwrap(func), "__code__", None) if callable(func) else None
    found, stack = set(), [code] if code is not None else []
    while stack:
        current = stack.pop()
        for const in current.co_consts:
            if isinstance(const, str):
                found.add(const)
            elif hasattr(const, "co_consts"):
                stack.append(const)
    return found


def missing_column(error: BaseException, func: Any, columns: Sequence[str]) -> str | None:
    """The dataset column a reward function failed to find, judged from its exception, or None."""
    text = str(error)
    if isinstance(error, TypeError):
        match = re.search(r"missing \d+ required (?:keyword-only |positional )?arguments?: '(\w+)'", text)
        if match and match.group(1) not in columns and match.group(1) not in TRAINER_REWARD_ARGS:
            return match.group(1)
    if isinstance(error, KeyError) and error.args and isinstance(error.args[0], str):
        key = error.args[0]
        if key.isidentifier() and key not in columns and key in code_constants(func):
            return key
    match = re.search(r"needs the dataset column '(\w+)'", text)  # hf_es.rewards' own message
    if match and match.group(1) not in columns:
        return match.group(1)
    return None

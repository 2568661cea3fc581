"""Shared plumbing for verifiable rewards: per-sample deadlines, failure policy and loggable counters.

Every reward built here is a plain function with a `__name__` (TRL logs it as `rewards/<__name__>/mean`) that follows
TRL's convention `f(prompts, completions, **columns) -> list[float | None]`, plus two attributes:

- `fn.stats` ([`RewardStats`]): running counters (samples, timeouts, errors, missing answers, seconds). A trainer logs
  `fn.stats.as_dict(prefix=f"rewards/{fn.__name__}/")` and calls `fn.stats.reset()` after each logging step.
- `fn.config`: the frozen configuration the scorer runs with.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..scoring import SampleTimeout, call_with_deadline, get_pool, signal_timer_available
from .extraction import completion_to_text

logger = logging.getLogger(__name__)

__all__ = ["RewardFunction", "RewardStats", "TimeoutBackend", "build_reward", "get_reward_stats"]

TimeoutBackend = Literal["auto", "signal", "process", "none"]
_BACKENDS = ("auto", "signal", "process", "none")

#: Outcome a scorer reports next to its score.
OUTCOME_OK = "ok"
OUTCOME_NO_ANSWER = "no_answer"


@dataclass
class RewardStats:
    """Counters of one reward function, accumulated over calls until [`RewardStats.reset`].

    Attributes:
        calls (`int`): batches scored.
        samples (`int`): completions scored.
        timeouts (`int`): samples that ran past the per-sample deadline, or that the cost guard refused because
            they would (e.g. `\\boxed{9^{9^{9}}}`); scored `on_failure`.
        errors (`int`): samples whose verifier raised, or whose gold could not be read; scored `on_failure`.
        no_answer (`int`): completions with no extractable answer (scored 0.0: a wrong answer, not a failure).
        untimed (`int`): samples that ran without a deadline because no timer was available (signal backend outside
            the main thread).
        seconds (`float`): wall time spent scoring.
    """

    calls: int = 0
    samples: int = 0
    timeouts: int = 0
    errors: int = 0
    no_answer: int = 0
    untimed: int = 0
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        """The counters as a flat dict, keys prefixed with `prefix` (e.g. `"rewards/accuracy_reward/"`)."""
        return {
            f"{prefix}{k}": getattr(self, k)
            for k in ("calls", "samples", "timeouts", "errors", "no_answer", "untimed", "seconds")
        }

    def reset(self) -> dict[str, float]:
        """Zeroes the counters and returns their values before the reset."""
        with self._lock:
            snapshot = self.as_dict()
            self.calls = self.samples = self.timeouts = self.errors = self.no_answer = self.untimed = 0
            self.seconds = 0.0
        return snapshot

    def _add(self, **counts: float) -> None:
        with self._lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)


RewardFunction = Callable[..., list[float | None]]


def get_reward_stats(reward_fn: Any, prefix: str | None = None, reset: bool = False) -> dict[str, float]:
    """Reads (and optionally resets) the counters of a reward function built by this package.

    Args:
        reward_fn (`Callable`): a reward function; functions without `stats` give `{}`.
        prefix (`str`, *optional*): key prefix; defaults to `"rewards/<__name__>/"`.
        reset (`bool`, *optional*, defaults to `False`): zero the counters after reading them.

    Returns:
        `dict[str, float]`: the counters.
    """
    stats = getattr(reward_fn, "stats", None)
    if not isinstance(stats, RewardStats):
        return {}
    if prefix is None:
        prefix = f"rewards/{getattr(reward_fn, '__name__', 'reward')}/"
    values = stats.reset() if reset else stats.as_dict()
    return {f"{prefix}{k}": v for k, v in values.items()}


_warned_untimed = False


def build_reward(
    name: str,
    scorer: Callable[..., tuple[float, str]],
    config: Any,
    *,
    columns: Sequence[str] = (),
    on_failure: float | None = 0.0,
    timeout: float | None = 5.0,
    timeout_backend: TimeoutBackend = "auto",
    num_workers: int = 0,
    doc: str | None = None,
) -> RewardFunction:
    """Builds a TRL-style batch reward function from a per-sample scorer.

    Args:
        name (`str`): the function's `__name__`.
        scorer (`Callable`): module-level function `scorer(text, *column_values, config) -> (score, outcome)` with
            outcome `"ok"` or `"no_answer"`. It must be picklable for the process backend.
        config: frozen configuration passed as the scorer's last argument.
        columns (`Sequence[str]`): dataset columns (TRL passes them as keyword arguments) the scorer needs, in order.
        on_failure (`float` or `None`, *optional*, defaults to 0.0): score of a sample that timed out or raised.
            `None` tells TRL-style trainers to ignore the sample.
        timeout (`float` or `None`, *optional*, defaults to 5.0): per-sample deadline in seconds; `None` disables it.
        timeout_backend (`str`, *optional*, defaults to `"auto"`):
            `"signal"` (in-process `SIGALRM` timer; main thread only, runs untimed elsewhere and counts `untimed`),
            `"process"` (worker processes, killed on a missed deadline: bounds even hangs inside C code, works from
            any thread), `"none"`, or `"auto"`: `"process"` if `num_workers > 0`, else `"signal"` in the main thread
            and `"process"` with one worker elsewhere.
        num_workers (`int`, *optional*, defaults to 0): worker processes for the process backend (parallel scoring).
        doc (`str`, *optional*): docstring of the returned function.

    Returns:
        `Callable`: `reward(prompts=None, completions=None, **columns) -> list[float | None]`, with `stats` and
        `config` attributes.
    """
    if timeout_backend not in _BACKENDS:
        raise ValueError(f"timeout_backend must be one of {_BACKENDS}, got {timeout_backend!r}")
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    stats = RewardStats()
    columns = tuple(columns)

    def reward(prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        if completions is None:
            raise ValueError(f"{name}: `completions` is required")
        texts = [completion_to_text(c) for c in completions]
        column_values = _column_values(name, columns, kwargs, len(texts))
        arg_tuples = [(text, *(v[i] for v in column_values), config) for i, text in enumerate(texts)]

        start = time.perf_counter()
        backend = _resolve_backend(timeout_backend, num_workers, timeout)
        untimed = 0
        if backend == "process":
            raw = get_pool(max(num_workers, 1)).map(scorer, arg_tuples, timeout)
        else:
            use_timer = backend == "signal" and timeout is not None and timeout > 0
            if use_timer and not signal_timer_available():
                untimed = len(arg_tuples)
                _warn_untimed_once(name)
            raw = _score_in_process(name, scorer, arg_tuples, timeout if use_timer else None)

        rewards, counts = _tally(raw, on_failure)
        stats._add(calls=1, samples=len(texts), untimed=untimed, seconds=time.perf_counter() - start, **counts)
        return rewards

    reward.__name__ = name
    reward.__qualname__ = name
    reward.__doc__ = doc
    reward.stats = stats  # type: ignore[attr-defined]
    reward.config = config  # type: ignore[attr-defined]
    reward.on_failure = on_failure  # type: ignore[attr-defined]
    reward.timeout = timeout  # type: ignore[attr-defined]
    return reward


def _column_values(name: str, columns: tuple[str, ...], kwargs: dict[str, Any], num_texts: int) -> list[Any]:
    """The values of each needed dataset column, one per completion (a scalar is one gold for the whole batch)."""
    column_values = []
    for col in columns:
        if col not in kwargs:
            raise ValueError(
                f"{name} needs the dataset column {col!r} (passed as a keyword argument); got {sorted(kwargs)}"
            )
        values = kwargs[col]
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            values = [values] * num_texts  # one gold for the whole batch
        if len(values) != num_texts:
            raise ValueError(f"{name}: column {col!r} has {len(values)} values for {num_texts} completions")
        column_values.append(values)
    return column_values


def _resolve_backend(timeout_backend: TimeoutBackend, num_workers: int, timeout: float | None) -> str:
    """The backend `"auto"` stands for in this call (see [`build_reward`]); other choices are returned as given."""
    if timeout_backend != "auto":
        return timeout_backend
    if num_workers > 0:
        return "process"
    if timeout is None or timeout <= 0 or signal_timer_available():
        return "signal"
    return "process"


def _warn_untimed_once(name: str) -> None:
    """Warns (once per process) that the signal timer cannot run outside the main thread."""
    global _warned_untimed
    if not _warned_untimed:
        logger.warning(
            "%s: the signal timer only works in the main thread; scoring without a per-sample deadline. "
            "Use timeout_backend='process' (or 'auto') to keep deadlines in threads.",
            name,
        )
        _warned_untimed = True


def _score_in_process(
    name: str, scorer: Callable[..., tuple[float, str]], arg_tuples: list[tuple], deadline: float | None
) -> list[tuple[str, Any]]:
    """Scores each sample in this process (under a `SIGALRM` deadline unless `deadline` is `None`); returns
    `(status, value)` pairs as the process pool does: `"ok"`, `"timeout"` or `"error"`."""
    raw = []
    for args in arg_tuples:
        try:
            value = call_with_deadline(scorer, deadline, *args)
            raw.append(("ok", value))
        except SampleTimeout:
            raw.append(("timeout", None))
        except Exception as e:  # noqa: BLE001 - a verifier failure must not kill training
            logger.debug("%s: verifier error", name, exc_info=True)
            raw.append(("error", f"{type(e).__name__}: {e}"))
    return raw


def _tally(raw: list[tuple[str, Any]], on_failure: float | None) -> tuple[list[float | None], dict[str, int]]:
    """The rewards of `(status, value)` pairs (`on_failure` for a timeout or error) and the failure counts."""
    rewards: list[float | None] = []
    counts = {"timeouts": 0, "errors": 0, "no_answer": 0}
    for status, value in raw:
        if status == "ok":
            score, outcome = value
            if outcome == OUTCOME_NO_ANSWER:
                counts["no_answer"] += 1
            rewards.append(score)
        else:
            counts["timeouts" if status == "timeout" else "errors"] += 1
            rewards.append(on_failure)
    return rewards, counts

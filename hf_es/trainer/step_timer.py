"""[`StepTimer`]: the wall time of an ES step's phases, accumulated under the names `step_logging` logs as
`timing/<phase>`."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["StepTimer"]


class StepTimer:
    """Accumulates seconds per phase: `with timer("generate"): ...` adds the block's wall time to
    `timer.seconds["generate"]` (also when the block raises). Created at the start of what it times.

    Attributes:
        seconds: Seconds per phase, in the order phases were first timed.
    """

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self._start = time.perf_counter()

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        tick = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - tick

    def elapsed(self) -> float:
        """Seconds since the timer was created."""
        return time.perf_counter() - self._start

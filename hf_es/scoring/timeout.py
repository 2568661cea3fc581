"""Per-sample deadlines for verifiers: an in-process signal timer and a process pool with hard kills.

Two mechanisms, because neither covers every case:

- [`call_with_deadline`]: arms `signal.setitimer(ITIMER_REAL)` around one call (float seconds, one timer for the whole
  sample, unlike `math-verify`'s per-call integer `signal.alarm`). Cheap (microseconds), but it only works in the main
  thread of the main interpreter, and it cannot interrupt a single long C call (e.g. `9**(9**9)` inside a big-integer
  power), because Python only runs signal handlers between bytecodes.
- [`ScoringPool`]: long-lived worker processes that score one sample at a time; a worker that misses its deadline is
  killed and replaced, so even C-level hangs are bounded. Works from any thread. Each sample costs a pipe round trip,
  and a (re)started worker needs a second or two to import `sympy`.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["SampleTimeout", "ScoringPool", "call_with_deadline", "get_pool", "signal_timer_available"]


class SampleTimeout(Exception):
    """Raised by [`call_with_deadline`] when the call ran past its deadline."""


class _Alarm(BaseException):
    # BaseException so that verifier code with `except Exception` cannot swallow it.
    pass


def signal_timer_available() -> bool:
    """Whether `signal.setitimer` can be used here (POSIX, main thread of the main interpreter)."""
    return (
        hasattr(signal, "setitimer") and os.name == "posix" and threading.current_thread() is threading.main_thread()
    )


def call_with_deadline(fn: Callable[..., Any], timeout: float | None, *args: Any) -> Any:
    """Calls `fn(*args)` and raises [`SampleTimeout`] if it runs longer than `timeout` seconds.

    Uses `SIGALRM` through `signal.setitimer`; an outer timer that was already armed is re-armed afterwards with its
    remaining time. If `timeout` is `None`/`<= 0` or the signal timer is unavailable (not the main thread), `fn` runs
    without a deadline.

    Args:
        fn (`Callable`): the function to call.
        timeout (`float` or `None`): the deadline in seconds.
        *args: positional arguments for `fn`.

    Returns:
        Whatever `fn` returns.
    """
    if timeout is None or timeout <= 0 or not signal_timer_available():
        return fn(*args)
    fired = False

    def handler(signum, frame):
        nonlocal fired
        fired = True
        raise _Alarm()

    start = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, handler)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        result = fn(*args)
    except _Alarm:
        raise SampleTimeout(f"timed out after {timeout:.3g}s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            remaining = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, remaining, old_interval)
    if fired:  # the alarm fired but the code swallowed it (e.g. a bare `except BaseException`)
        raise SampleTimeout(f"timed out after {timeout:.3g}s")
    return result


def _worker_main(conn: multiprocessing.connection.Connection, inner_timeout: float | None) -> None:
    """Worker loop: receive `(index, fn, args)`, reply `(index, status, value)`; `None` stops the worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        index, fn, args = msg
        try:
            reply = (index, "ok", call_with_deadline(fn, inner_timeout, *args))
        except SampleTimeout:
            reply = (index, "timeout", None)
        except BaseException as e:  # noqa: BLE001 - report everything to the parent
            reply = (index, "error", f"{type(e).__name__}: {e}"[:500])
        try:
            conn.send(reply)
        except (EOFError, OSError, BrokenPipeError):
            return


class _Worker:
    def __init__(self, ctx: Any, inner_timeout: float | None):
        parent, child = ctx.Pipe(duplex=True)
        self.conn = parent
        self.proc = ctx.Process(target=_worker_main, args=(child, inner_timeout), daemon=True)
        self.proc.start()
        child.close()
        self.index: int | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(timeout=5)
        finally:
            self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(timeout=2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=2)
        self.conn.close()


class ScoringPool:
    """A small pool of worker processes that scores samples under hard per-sample deadlines.

    Each worker scores one sample at a time. Inside the worker the sample runs under a signal timer of `timeout`
    seconds; if the worker has not answered after `timeout + grace` seconds (a hang inside C code), the parent kills
    it, records a timeout for that sample, and starts a replacement.

    Args:
        num_workers (`int`): number of worker processes.
        start_method (`str`, *optional*): multiprocessing start method; defaults to `"forkserver"` where available,
            else `"spawn"` (never `"fork"`, which is unsafe in a process that runs torch/CUDA threads).
        grace (`float`, *optional*, defaults to 1.0): extra seconds before a worker is killed.
    """

    def __init__(self, num_workers: int, start_method: str | None = None, grace: float = 1.0):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if start_method is None:
            methods = multiprocessing.get_all_start_methods()
            start_method = "forkserver" if "forkserver" in methods else "spawn"
        self.ctx = multiprocessing.get_context(start_method)
        self.num_workers = num_workers
        self.grace = grace
        self._workers: dict[float | None, list[_Worker]] = {}
        self._lock = threading.Lock()
        self.killed = 0

    def _get_workers(self, inner_timeout: float | None) -> list[_Worker]:
        workers = self._workers.get(inner_timeout)
        if workers is None:
            workers = [_Worker(self.ctx, inner_timeout) for _ in range(self.num_workers)]
            self._workers[inner_timeout] = workers
        return workers

    def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple], timeout: float | None) -> list[tuple[str, Any]]:
        """Scores `fn(*args)` for every tuple in `arg_tuples` under a per-sample deadline.

        Args:
            fn (`Callable`): a picklable (module-level) function.
            arg_tuples (`Sequence[tuple]`): the argument tuples, one per sample.
            timeout (`float` or `None`): per-sample deadline in seconds (`None`: no deadline).

        Returns:
            `list[tuple[str, Any]]`: `(status, value)` per sample, in input order; status is `"ok"`, `"timeout"` or
            `"error"` (value is then the error message).
        """
        with self._lock:
            return self._map(fn, arg_tuples, timeout)

    def _map(self, fn, arg_tuples, timeout):
        inner = timeout if timeout and timeout > 0 else None
        hard = (inner + self.grace) if inner else None
        workers = self._get_workers(inner)
        results: list[tuple[str, Any] | None] = [None] * len(arg_tuples)
        pending = list(range(len(arg_tuples)))[::-1]
        busy: dict[Any, _Worker] = {}

        def dispatch(worker: _Worker) -> None:
            while pending:
                index = pending.pop()
                try:
                    worker.conn.send((index, fn, arg_tuples[index]))
                except (OSError, BrokenPipeError):
                    pending.append(index)
                    replace(worker)
                    return
                worker.index = index
                worker.deadline = time.monotonic() + hard if hard else float("inf")
                busy[worker.conn] = worker
                return

        def replace(worker: _Worker) -> None:
            busy.pop(worker.conn, None)
            worker.kill()
            self.killed += 1
            new = _Worker(self.ctx, inner)
            workers[workers.index(worker)] = new
            dispatch(new)

        for worker in list(workers):
            dispatch(worker)
        while busy:
            now = time.monotonic()
            wait_for = max(0.0, min(w.deadline for w in busy.values()) - now)
            ready = multiprocessing.connection.wait(list(busy), timeout=None if wait_for == float("inf") else wait_for)
            for conn in ready:
                worker = busy.pop(conn)
                try:
                    index, status, value = conn.recv()
                except (EOFError, OSError):  # the worker died (e.g. out of memory)
                    results[worker.index] = ("error", "worker process died")
                    replace(worker)
                    continue
                results[index] = (status, value)
                dispatch(worker)
            now = time.monotonic()
            for worker in [w for w in busy.values() if w.deadline <= now]:
                results[worker.index] = ("timeout", None)
                logger.warning("Killing a reward worker that ran past its %.3gs deadline.", hard)
                replace(worker)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stops all workers."""
        with self._lock:
            for workers in self._workers.values():
                for worker in workers:
                    worker.stop()
            self._workers.clear()


_POOLS: dict[int, ScoringPool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(num_workers: int) -> ScoringPool:
    """The process-wide [`ScoringPool`] with `num_workers` workers (created on first use, closed at exit)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(num_workers)
        if pool is None:
            pool = _POOLS[num_workers] = ScoringPool(num_workers)
        return pool


@atexit.register
def _close_pools() -> None:
    for pool in list(_POOLS.values()):
        try:
            pool.close()
        except Exception:  # noqa: BLE001
            pass
    _POOLS.clear()

"""A pytest plugin that keeps a green run honest (loaded by tests/conftest.py; the rules are in docs/TESTING.md).

- A skipped or xfailed test (or a test module skipped at collection) fails the run unless its reason is in
  `ALLOWED_SKIPS` and that entry's condition holds on this machine: "vLLM is not installed" is allowed only where
  `vllm` really cannot be found, never in the vLLM environment of scripts/run_tests.sh.
- A path named on the command line from which not one test was collected fails the run.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


def _vllm_not_installed() -> bool:
    # scripts/run_tests.sh sets HF_ES_REQUIRE_VLLM=1 in its vLLM environment, where a missing or broken vLLM fails.
    return os.environ.get("HF_ES_REQUIRE_VLLM") != "1" and importlib.util.find_spec("vllm") is None


@dataclass(frozen=True)
class AllowedSkip:
    """A skip that a green run may contain: its reason starts with `reason` and `applies()` is true here."""

    reason: str
    applies: Callable[[], bool]
    why: str


# The one list of allowed skips; docs/TESTING.md states the same list (tests/test_run_guard.py compares them).
ALLOWED_SKIPS = (
    AllowedSkip(
        reason="vLLM is not installed",
        applies=_vllm_not_installed,
        why="the vLLM backend tests run in the second environment of scripts/run_tests.sh, where vLLM is required",
    ),
    AllowedSkip(
        reason="torch.randn on CUDA and CPU draw different values",
        applies=lambda: True,
        why="CUDA machines only: Gaussian noise has no host/device bit-identity to compare, by design",
    ),
)


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    """The reason of a skipped, xfailed or xpassed report, without pytest's "Skipped: " prefix."""
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}"
    longrepr = report.longrepr
    message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return message.removeprefix("Skipped: ")


def is_allowed_skip(reason: str, allowed: tuple[AllowedSkip, ...] = ALLOWED_SKIPS) -> bool:
    """Whether a skip with this reason may appear in a green run on this machine."""
    return any(reason.startswith(entry.reason) and entry.applies() for entry in allowed)


class RunGuard:
    """Collects unexpected skips and the collected paths of one session; fails the session at its end."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.unexpected: list[tuple[str, str]] = []  # (node id, reason)
        self.covered: set[Path] = set()  # files with a collected test or skipped at collection
        self.empty: list[str] = []

    def _check(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        reason = skip_reason(report)
        if not is_allowed_skip(reason):
            self.unexpected.append((report.nodeid, reason))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:  # a module-level `pytest.skip` / `importorskip`: reported here, not again as empty
            self._check(report)
            self.covered.add((self.config.rootpath / report.nodeid.split("::")[0]).resolve())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped or hasattr(report, "wasxfail"):
            self._check(report)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.covered.add(Path(item.path).resolve())

    def _paths_without_tests(self) -> list[str]:
        if self.config.args_source != pytest.Config.ArgsSource.ARGS:
            return []  # nothing named: pyproject.toml's `testpaths`
        empty = []
        for arg in self.config.args:
            path = Path(self.config.invocation_params.dir, arg.split("::")[0]).resolve()
            if path.exists() and not any(p == path or path in p.parents for p in self.covered):
                empty.append(arg)
        return empty

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.empty = self._paths_without_tests()
        # "No tests collected" (5) becomes a failure too when the reason is a skip or an empty named path.
        if (self.unexpected or self.empty) and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.unexpected:
            terminalreporter.section("unexpected skips: the run fails (allowed: tests/run_guard.py)", red=True)
            for nodeid, reason in self.unexpected:
                terminalreporter.line(f"{nodeid}: {reason}", red=True)
        if self.empty:
            terminalreporter.section("named on the command line but no test collected: the run fails", red=True)
            for arg in self.empty:
                terminalreporter.line(arg, red=True)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(RunGuard(config), "hf_es_run_guard")

"""Benchmark targets as comparisons: each measure against its limit, with a verdict and the exit status of the run."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A goal of one benchmark: the measure at `key` must be at most (or at least) `limit`.

    Args:
        measure: What is measured, as the table shows it.
        key: Dotted path of the value in the benchmark's result (e.g. `"full_over.lora_r8.master_bytes"`).
        limit: The bound the value is compared against.
        at_most: True when the value must be `<= limit` (a cost), False when it must be `>= limit` (a rate).
        cpu_only: Compared on CPU machines only (the bound was set for CPU); elsewhere reported without a verdict.
    """

    measure: str
    key: str
    limit: float
    at_most: bool = True
    cpu_only: bool = False

    @property
    def bound(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.limit:g}{' (CPU)' if self.cpu_only else ''}"


@dataclass(frozen=True)
class Verdict:
    """One target's outcome in a run.

    Args:
        bench: The benchmark the target belongs to.
        target: The target.
        value: The measured value.
        met: Whether the target is met; None when it is not compared on this device.
    """

    bench: str
    target: Target
    value: float
    met: bool | None

    @property
    def ratio(self) -> float:
        """value / limit: at most 1 is met for a cost, at least 1 for a rate."""
        return self.value / self.target.limit if self.target.limit else math.inf

    @property
    def label(self) -> str:
        return {True: "met", False: "MISSED", None: "not compared (CPU target)"}[self.met]


def lookup(result: dict, key: str) -> float:
    value = result
    for part in key.split("."):
        value = value[part]
    return float(value)


def compare(bench: str, targets: list[Target], result: dict, on_cpu: bool) -> list[Verdict]:
    """Compares each target of `bench` against its measured value in `result`.

    Args:
        bench: Benchmark name (for the table).
        targets: The benchmark's targets.
        result: The benchmark's result dictionary.
        on_cpu: Whether this machine measured on CPU (CPU-only targets are compared only then).

    Returns:
        One verdict per target. A non-finite value never meets its target.
    """
    verdicts = []
    for target in targets:
        value = lookup(result, target.key)
        if target.cpu_only and not on_cpu:
            met = None
        else:
            met = math.isfinite(value) and (value <= target.limit if target.at_most else value >= target.limit)
        verdicts.append(Verdict(bench, target, value, met))
    return verdicts


def exit_status(verdicts: list[Verdict], report_only: bool = False) -> int:
    """1 when a compared target was missed (0 with `report_only`), else 0."""
    return int(not report_only and any(v.met is False for v in verdicts))


def markdown(verdicts: list[Verdict]) -> str:
    """The verdict table: measure, value, target, value / target, verdict."""
    lines = [
        "| bench | measure | value | target | value / target | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {v.bench} | {v.target.measure} | {v.value:.4g} | {v.target.bound} | {v.ratio:.3f} | {v.label} |"
        for v in verdicts
    ]
    return "\n".join(lines)

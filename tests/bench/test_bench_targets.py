"""`python -m bench` compares every target and exits 1 when one is missed (no timing: results are stubbed)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.__main__ as bench_main
from bench import es_step, latency, low_rank, memory, noise, peft, scaling
from bench.targets import Target, compare, exit_status, lookup, markdown

COST = Target("seconds", "section.cost_s", 2.0)
RATE = Target("per second", "rate", 100.0, at_most=False)
CPU_BOUND = Target("CPU ratio", "ratio", 1.1, cpu_only=True)


def test_costs_must_be_at_most_and_rates_at_least_their_limit():
    met = compare("b", [COST, RATE], {"section": {"cost_s": 2.0}, "rate": 100.0}, on_cpu=True)
    assert [v.met for v in met] == [True, True] and [v.ratio for v in met] == [1.0, 1.0]
    missed = compare("b", [COST, RATE], {"section": {"cost_s": 3.0}, "rate": 50.0}, on_cpu=True)
    assert [v.met for v in missed] == [False, False] and [v.ratio for v in missed] == [1.5, 0.5]


def test_a_non_finite_value_never_meets_its_target():
    verdicts = compare("b", [COST, RATE], {"section": {"cost_s": math.nan}, "rate": math.inf}, on_cpu=True)
    assert [v.met for v in verdicts] == [False, False]  # a NaN or infinite measure says the benchmark broke
    assert compare("b", [COST], {"section": {"cost_s": math.inf}}, on_cpu=True)[0].met is False


def test_cpu_targets_are_compared_on_cpu_only():
    assert compare("b", [CPU_BOUND], {"ratio": 9.0}, on_cpu=True)[0].met is False
    off_cpu = compare("b", [CPU_BOUND], {"ratio": 9.0}, on_cpu=False)[0]
    assert off_cpu.met is None and exit_status([off_cpu]) == 0


def test_exit_status_is_one_when_a_target_is_missed_unless_report_only():
    verdicts = compare("b", [COST, RATE], {"section": {"cost_s": 1.0}, "rate": 50.0}, on_cpu=True)
    assert exit_status(verdicts) == 1 and exit_status(verdicts, report_only=True) == 0
    assert exit_status(verdicts[:1]) == 0
    assert "| b | per second | 50 | >= 100 | 0.500 | MISSED |" in markdown(verdicts)


def test_a_missing_measure_is_an_error_not_a_pass():
    with pytest.raises(KeyError):
        compare("b", [COST], {"section": {}}, on_cpu=True)


@pytest.mark.parametrize("module", [es_step, latency, low_rank, memory, noise, peft, scaling])
def test_every_benchmark_states_its_targets_with_a_positive_limit(module):
    assert isinstance(module.TARGETS, list)
    assert all(target.limit > 0 and target.measure for target in module.TARGETS)


def test_stated_target_keys_read_the_recorded_results():
    # A full run on record carries every key the targets read (scaling's ratio and latency are newer than it).
    result = json.loads((Path(bench_main.__file__).parent / "results" / "2026-12-01-vm.json").read_text())
    for name in ("es_step", "memory", "noise", "low_rank", "peft"):
        for target in bench_main.BENCHES[name].TARGETS:
            assert lookup(result[name], target.key) > 0, target.key


@pytest.fixture
def stub_benches(monkeypatch):
    """Two fake benchmarks with one target each; their values are set by the test."""
    values = {"fast": 1.0, "slow": 1.0}
    benches = {
        name: SimpleNamespace(
            TARGETS=[Target(f"{name} cost", "cost", 1.5)], run=lambda repeats, n=name: {"cost": values[n]}
        )
        for name in values
    }
    monkeypatch.setattr(bench_main, "BENCHES", benches)
    monkeypatch.setattr(bench_main, "ROWS", {})
    monkeypatch.setattr(bench_main, "_run", lambda name, repeats: benches[name].run(repeats))
    monkeypatch.setattr(bench_main, "_on_cpu", lambda: True)
    monkeypatch.setattr(bench_main, "_machine", lambda: "test machine")
    return values


def test_main_exits_one_when_a_target_is_missed_and_zero_with_report_only(stub_benches, tmp_path, capsys):
    out = ["--output_dir", str(tmp_path)]
    assert bench_main.main(out) == 0
    stub_benches["slow"] = 2.0
    assert bench_main.main(out) == 1
    assert "| slow | slow cost | 2 | <= 1.5 | 1.333 | MISSED |" in capsys.readouterr().out
    assert bench_main.main([*out, "--report-only"]) == 0
    assert bench_main.main([*out, "--skip", "slow"]) == 0  # the missed one did not run
    recorded = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert [(v["bench"], v["met"]) for v in recorded["verdicts"]] == [("fast", True)]

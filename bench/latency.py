"""Fail-fast latencies and throughputs that the unit tests assert by outcome only (they never time anything).

    python -m bench.latency            # every section; `--sections models rewards` for some

Each measure has a target in `TARGETS` (seconds: at most; rates: at least), compared by `python -m bench`:

- models: an unknown model id offline fails in seconds, in `resolve_model_name_or_path` and in `ESTrainer`; an
  unreachable Hub fails after one refused connection (the old path retried ~30 s); the bundled model loads.
- rewards: exact-answer scoring rates on GSM8K and MATH-500 (repeated answers hit the verdict cache); the slowest
  adversarial answer under a 2 s deadline; a 0.2 s signal deadline on spinning Python; the process backend killing a
  hang inside C code (1 s deadline); the format rewards on 20,000-fold repeated markup.
- training: 20 ES steps climbing a synthetic reward on a tiny Llama (tests/trainer/test_es_training.py); the time
  from an injected fault on process 1 of 2 until every process has stopped (tests/trainer/test_reliability.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .targets import Target, compare, exit_status, markdown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
SECTIONS = ("models", "rewards", "training")
UNKNOWN_ID = "no-such-org/no-such-model-hf-es"

TARGETS = [
    Target("unknown model id offline: resolve, s", "models.resolve_unknown_offline_s", 2.0),
    Target("unknown model id offline: ESTrainer, s", "models.trainer_unknown_offline_s", 2.0),
    Target("unreachable Hub (online, refused): resolve, s", "models.unreachable_hub_s", 5.0),
    Target("ESTrainer on the bundled SmolLM2 id, s", "models.trainer_bundled_s", 120.0),
    Target("GSM8K gold answers scored, completions/s", "rewards.gsm8k_gold_per_s", 2000.0, at_most=False),
    Target("MATH-500 repeated answers scored, completions/s", "rewards.math500_repeated_per_s", 2000.0, at_most=False),
    Target("slowest adversarial answer, 2 s deadline, s", "rewards.adversarial_worst_s", 4.0),
    Target("signal deadline 0.2 s on spinning Python, s", "rewards.signal_deadline_s", 1.0),
    Target("process backend kills a C-level hang (1 s deadline), s", "rewards.process_kill_s", 15.0),
    Target("format rewards on 20,000-fold markup, slowest format, s", "rewards.format_adversarial_s", 2.0),
    Target("20 ES steps on a tiny Llama (synthetic reward), s", "training.tiny_climb_s", 60.0),
    Target("fault on process 1 of 2 until all stopped, slowest mode, s", "training.fault_stop_s", 60.0),
]


def _subprocess_json(code: str, env: dict[str, str]) -> dict:
    """Runs `code` in a fresh interpreter (Hub settings are read at import) and returns its last JSON line."""
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_ES_REGISTER_METRICS": "0", **env}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench.latency subprocess failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


_OFFLINE = f"""
import json, tempfile, time
from hf_es import ESConfig, ESTrainer
from hf_es.models import ModelNotAvailableError, SMOLLM2_HUB_ID, resolve_model_name_or_path
# Infinity unless the call fails as it should: a call that succeeds never meets its target.
out, tmp = {{"resolve_unknown_offline_s": float("inf"), "trainer_unknown_offline_s": float("inf")}}, tempfile.mkdtemp()
start = time.perf_counter()
try:
    resolve_model_name_or_path({UNKNOWN_ID!r})
except ModelNotAvailableError:
    out["resolve_unknown_offline_s"] = time.perf_counter() - start
start = time.perf_counter()
try:
    ESTrainer(model={UNKNOWN_ID!r}, reward_funcs=len, args=ESConfig(output_dir=tmp, report_to="none"))
except ModelNotAvailableError:
    out["trainer_unknown_offline_s"] = time.perf_counter() - start
start = time.perf_counter()
ESTrainer(model=SMOLLM2_HUB_ID, reward_funcs=len, args=ESConfig(output_dir=tmp, report_to="none", use_cpu=True))
out["trainer_bundled_s"] = time.perf_counter() - start
print(json.dumps(out))
"""

_UNREACHABLE = f"""
import json, time
from hf_es.models import ModelNotAvailableError, resolve_model_name_or_path
out, start = {{"unreachable_hub_s": float("inf")}}, time.perf_counter()
try:
    resolve_model_name_or_path({UNKNOWN_ID!r})
except ModelNotAvailableError:
    out["unreachable_hub_s"] = time.perf_counter() - start
print(json.dumps(out))
"""


def models() -> dict:
    result = _subprocess_json(_OFFLINE, {"HF_HUB_OFFLINE": "1"})
    with tempfile.TemporaryDirectory() as home:
        # Online, but nothing listens at the endpoint: one refused connection.
        env = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": home}
        result.update(_subprocess_json(_UNREACHABLE, env))
    return result


def _timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def _test_module(path: str):
    """A test module of tests/ (its helpers import as the test run imports them)."""
    sys.path.insert(0, TESTS)
    name = "_bench_" + os.path.basename(path).removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, os.path.join(TESTS, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jsonl(name: str) -> list[dict]:
    from hf_es.data import packaged_path

    with open(packaged_path(name, "test"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def rewards() -> dict:
    from hf_es.rewards import accuracy_reward, make_accuracy_reward, make_format_reward
    from hf_es.scoring import SampleTimeout, call_with_deadline

    # The data of tests/rewards/test_rewards.py: GSM8K's worked answers as both completion and gold; MATH-500's
    # worked solutions against the final answers.
    gsm8k = [row["answer"] for row in _jsonl("gsm8k")]
    math500 = _jsonl("math500")
    golds, solutions = [row["answer"] for row in math500], [row["solution"] for row in math500]
    accuracy_reward(completions=solutions, solution=golds)  # warm the verdict cache, as an ES population does
    out = {
        "gsm8k_gold_per_s": len(gsm8k) / _timed(accuracy_reward, completions=gsm8k, solution=gsm8k),
        "math500_repeated_per_s": 4
        * len(golds)
        / _timed(accuracy_reward, completions=solutions * 4, solution=golds * 4),
    }
    adversarial = _test_module("rewards/test_rewards.py").ADVERSARIAL
    out["adversarial_s"] = {
        name: _timed(make_accuracy_reward(timeout=2.0, name=f"adv_{name}"), completions=[text], solution=["3"])
        for name, (text, _) in adversarial.items()
    }
    out["adversarial_worst_s"] = max(out["adversarial_s"].values())

    def spin():
        while True:
            pass

    start = time.perf_counter()
    out["signal_deadline_s"] = float("inf")  # never returns unless the deadline interrupts it
    try:
        call_with_deadline(spin, 0.2)
    except SampleTimeout:
        out["signal_deadline_s"] = time.perf_counter() - start
    hang = make_accuracy_reward(guard=False, timeout=1.0, timeout_backend="process", num_workers=1)
    hang(completions=["\\boxed{1}"], solution=["1"])  # start the worker
    out["process_kill_s"] = _timed(
        hang, completions=["\\boxed{3}", "\\boxed{9^{9^{9}}}", "\\boxed{4}"], solution=["3", "3", "3"]
    )
    big = ["<answer>" * 20_000, "\\boxed{" * 20_000, "<think>" * 20_000, "#### 1\n" * 20_000]
    out["format_adversarial_s"] = max(
        _timed(make_format_reward(fmt), completions=big) for fmt in ("boxed", "hash", "answer_tag", "think_answer")
    )
    return out


def _tiny_climb() -> float:
    """The wall time of the climb test itself: evaluate, 20 ES steps, evaluate, with its asserts."""
    climb = _test_module("trainer/test_es_training.py").test_es_climbs_a_synthetic_reward_quickly
    with tempfile.TemporaryDirectory() as tmp:
        return _timed(climb, Path(tmp))


def _fault_stop(mode: str) -> float:
    """Seconds from the injected fault (tests/scripts/rank_fault.py) until the 2-process launch has exited."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    launcher += [os.path.join(ROOT, "accelerate_configs", "cpu.yaml"), "--num_processes", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory() as out:
        cmd = launcher + [os.path.join(TESTS, "scripts", "rank_fault.py"), out, mode]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        ended = time.time()
        fault = os.path.join(out, "fault_time")
        if proc.returncode == 0 or not os.path.exists(fault):
            raise RuntimeError(f"rank_fault.py {mode}: no fault was injected and stopped:\n{proc.stderr[-3000:]}")
        with open(fault) as f:
            return ended - float(f.read())


def training() -> dict:
    out = {"tiny_climb_s": _tiny_climb(), "fault_stop_by_mode_s": {m: _fault_stop(m) for m in ("raise", "die")}}
    out["fault_stop_s"] = max(out["fault_stop_by_mode_s"].values())
    return out


def run(sections: tuple[str, ...] = SECTIONS) -> dict:
    """Measures the given sections once each (these are bounds, not ratios: one run says whether one is met).

    Args:
        sections: Any of "models", "rewards", "training".

    Returns:
        One dictionary of measures per section.
    """
    measure = {"models": models, "rewards": rewards, "training": training}
    return {section: measure[section]() for section in sections}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", nargs="*", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--report-only", action="store_true", help="Exit 0 even when a target is missed.")
    args = parser.parse_args()
    result = run(tuple(args.sections))
    print(json.dumps(result, indent=2))
    measured = [target for target in TARGETS if target.key.split(".")[0] in result]
    verdicts = compare("latency", measured, result, on_cpu=True)  # bounds that hold on any device
    print(markdown(verdicts))
    sys.exit(exit_status(verdicts, args.report_only))


if __name__ == "__main__":
    main()

"""`evaluate.load("pass_at_k")` / `evaluate.load("maj_at_k")` by bare name, in fresh processes that never import hf_es.

Every scenario runs in subprocesses with a temporary HF_HOME / HF_MODULES_CACHE and a working directory without
metric folders, so nothing but the registration can make the bare names resolve.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from math import comb
from pathlib import Path

import pytest
from hub_server import LocalHub

REPO = Path(__file__).resolve().parents[2]

# Loads both metrics by bare name and prints their values; fails if hf_es was imported along the way.
LOAD_BY_NAME = """
import json, sys, evaluate
pass_at_k = evaluate.load("pass_at_k").compute(num_samples=[10, 6, 4], num_correct=[3, 0, 4], k=[1, 4])
maj_at_k = evaluate.load("maj_at_k").compute(
    predictions=[["0.5", "1/2", "3"], ["7", "8", "8"]], references=["1/2", "7"], k=[1, 3]
)
assert "hf_es" not in sys.modules
print(json.dumps({"pass@1": pass_at_k["pass@1"], "pass@4": pass_at_k["pass@4"],
                  "maj@1": maj_at_k["maj@1"], "maj@3": maj_at_k["maj@3"]}))
"""


def run_python(code: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "HF_HOME": str(home),
        "HF_MODULES_CACHE": str(home / "modules"),
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code], cwd=home, env=environment, capture_output=True, text=True, timeout=300
    )


def expected_values() -> dict[str, float]:
    # Unbiased Pass@K by hand: 1 - C(n - c, k) / C(n, k), averaged over the three problems.
    pass_at_4 = ((1 - comb(7, 4) / comb(10, 4)) + 0.0 + 1.0) / 3  # (5/6 + 0 + 1) / 3
    return {
        "pass@1": (3 / 10 + 0 / 6 + 4 / 4) / 3,
        "pass@4": pass_at_4,
        # Problem 1: "0.5" and "1/2" vote together and match the gold 1/2; problem 2: "8" beats "7" at k=3 only.
        "maj@1": 1.0,
        "maj@3": 0.5,
    }


@pytest.mark.slow
def test_bare_names_load_offline_after_import_hf_es_and_not_before(tmp_path):
    assert abs(expected_values()["pass@4"] - 11 / 18) < 1e-15
    # Without registration, the bare name does not resolve (so the test below can fail).
    unregistered = run_python(LOAD_BY_NAME, tmp_path)
    assert unregistered.returncode != 0
    assert "FileNotFoundError" in unregistered.stderr and "pass_at_k" in unregistered.stderr

    registered = run_python("import hf_es", tmp_path)
    assert registered.returncode == 0, registered.stderr
    loaded = run_python(LOAD_BY_NAME, tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    values = json.loads(loaded.stdout.strip().splitlines()[-1])
    for name, value in expected_values().items():
        assert values[name] == pytest.approx(value, abs=1e-12), name

    # Undo: remove the entries and keep `import hf_es` from writing them again.
    removed = run_python("import hf_es.metrics as m; print(len(m.unregister()))", tmp_path, HF_ES_REGISTER_METRICS="0")
    assert removed.stdout.strip() == "2", removed.stderr
    again = run_python(LOAD_BY_NAME, tmp_path)
    assert again.returncode != 0 and "FileNotFoundError" in again.stderr


@pytest.mark.slow
def test_bare_names_load_online_when_the_hub_has_no_canonical_metric(tmp_path):
    assert run_python("import hf_es", tmp_path).returncode == 0
    with LocalHub() as hub:  # an online Hub whose `evaluate-metric` namespace has no pass_at_k / maj_at_k
        online = {"HF_HUB_OFFLINE": "0", "HF_EVALUATE_OFFLINE": "0", "HF_ENDPOINT": hub.endpoint}
        loaded = run_python(LOAD_BY_NAME, tmp_path, **online)
        asked = [request.path for request in hub.requests]
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout.strip().splitlines()[-1])["pass@4"] == pytest.approx(11 / 18, abs=1e-12)
    # evaluate did ask the Hub first, and fell back to the registered module when the Hub had none.
    assert any("/spaces/evaluate-metric/pass_at_k/resolve/" in path for path in asked), asked


def test_registration_is_idempotent_and_only_removes_its_own_entries(tmp_path, monkeypatch):
    import evaluate.config

    from hf_es.metrics import registration

    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", tmp_path / "modules")  # evaluate reads it at import
    monkeypatch.setattr(sys, "path", list(sys.path))  # evaluate appends the cache to sys.path: undo it afterwards
    foreign = tmp_path / "modules" / "evaluate_modules" / "metrics" / "evaluate-metric--pass_at_k" / ("f" * 64)
    foreign.mkdir(parents=True)
    (foreign / "pass_at_k.json").write_text(json.dumps({"original file path": "/hub/blobs/pass_at_k.py"}))
    assert registration.registered("pass_at_k") == []
    registration.register()
    first = registration.registered("pass_at_k") + registration.registered("maj_at_k")
    registration.register()
    assert registration.registered("pass_at_k") + registration.registered("maj_at_k") == first
    assert len(first) == 2 and all(len(path.name) == 64 for path in first)
    assert {path.name for path in registration.unregister()} == {path.name for path in first}
    assert foreign.is_dir()  # a module downloaded from the Hub is not ours to delete
    with pytest.raises(ValueError, match="available: pass_at_k, maj_at_k"):
        registration.register(["pass@k"])


def test_ensure_registered_is_a_no_op_when_disabled(tmp_path, monkeypatch):
    from hf_es.metrics import registration

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.delitem(sys.modules, "evaluate.config", raising=False)
    monkeypatch.setenv("HF_ES_REGISTER_METRICS", "0")
    registration.ensure_registered()
    assert not (tmp_path / "modules").exists()

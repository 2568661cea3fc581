"""scripts/publish_metrics.py through the real `huggingface_hub` client against the local Hub (tests/hub_server.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hub_server import LocalHub

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "publish_metrics.py"
TOKEN = "hf_" + "PublishTokenAbCdEfGhIjKlMnOpQrSt01"


def load_script():
    spec = importlib.util.spec_from_file_location("publish_metrics", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_ES_REGISTER_METRICS": "0"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def hub(monkeypatch):
    with LocalHub() as local:
        local.patch(monkeypatch)
        yield local


def test_publishes_one_gradio_space_per_metric_with_one_commit_each(hub, capsys):
    assert load_script().main(["--namespace", "me", "--token", TOKEN]) == 0
    creates = [json.loads(r.body) for r in hub.requests if r.path == "/api/repos/create"]
    assert [(c["name"], c["type"], c["sdk"]) for c in creates] == [
        ("pass_at_k", "space", "gradio"),
        ("maj_at_k", "space", "gradio"),
    ]
    assert [(c.repo_id, c.revision) for c in hub.commits] == [("me/pass_at_k", "main"), ("me/maj_at_k", "main")]
    metrics = REPO / "hf_es" / "metrics"
    expected = {
        "me/pass_at_k": {"README.md", "app.py", "requirements.txt", "pass_at_k.py", "estimator.py"},
        "me/maj_at_k": {"README.md", "app.py", "requirements.txt", "maj_at_k.py", "voting.py"},
    }
    for repo_id, files in expected.items():
        name = repo_id.split("/")[1]
        assert set(hub.repos[repo_id]) == files
        for file in files:
            assert hub.repos[repo_id][file] == (metrics / name / file).read_bytes(), file
        card = hub.repos[repo_id]["README.md"].decode()
        header = yaml.safe_load(re.match(r"^---\n(.*?)\n---\n", card, re.DOTALL).group(1))
        assert header["sdk"] == "gradio" and header["app_file"] == "app.py"
        assert {"evaluate", "metric"} <= set(header["tags"])
    assert "evaluate.load('me/maj_at_k')" in capsys.readouterr().out
    for request in hub.requests:  # the token travels only in the Authorization header
        assert TOKEN.encode() not in request.body
        assert all(TOKEN not in v for k, v in request.headers.items() if k.lower() != "authorization")


@pytest.mark.slow
def test_published_spaces_load_with_evaluate_from_that_endpoint(hub, tmp_path):
    assert load_script().main(["--namespace", "me", "--token", TOKEN, "--metrics", "pass_at_k", "maj_at_k"]) == 0
    code = (
        "import evaluate, json\n"
        "p = evaluate.load('me/pass_at_k').compute(num_samples=[10, 6], num_correct=[3, 0], k=4)['pass@4']\n"
        "m = evaluate.load('me/maj_at_k').compute(predictions=[['7', '8', '8']], references=['8'], k=3)['maj@3']\n"
        "print(json.dumps([p, m]))\n"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path), "HF_ES_REGISTER_METRICS": "0", "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    pass_at_4, maj_at_3 = json.loads(out.stdout.strip().splitlines()[-1])
    assert pass_at_4 == pytest.approx((1 - 35 / 210 + 0.0) / 2, abs=1e-12)  # C(7,4)/C(10,4) = 35/210
    assert maj_at_3 == 1.0
    assert any(r.path == "/spaces/me/maj_at_k/resolve/main/voting.py" for r in hub.requests)


def test_help_shows_defaults():
    out = run_cli("--help")
    text = " ".join(out.stdout.split())
    assert out.returncode == 0
    assert "(default: ['pass_at_k', 'maj_at_k'])" in text and "(default: None)" in text and "--namespace" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--namespace", "me/you"], "without '/'"),
        (["--namespace", "bad name!"], "does not make a valid Space id"),
        (["--namespace", "me", "--metrics", "pass@k"], "unknown metric(s) pass@k"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_code_2(args, message):
    out = run_cli(*args)
    assert out.returncode == 2
    assert message in out.stderr.strip().splitlines()[-1]
    assert "Traceback" not in out.stderr

"""Model ids resolve in one place (hf_es.models) for every entry point, and fail fast when unavailable offline."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hf_es import ESConfig, ESTrainer
from hf_es.models import (
    BUNDLED_MODELS,
    SMOLLM2_HUB_ID,
    ModelNotAvailableError,
    load_tokenizer,
    resolve_model_name_or_path,
)

REPO = Path(__file__).resolve().parents[1]
BUNDLED_DIR = Path(os.environ.get("HF_ES_CACHE") or Path.home() / ".cache" / "hf_es") / "SmolLM2-135M-Instruct"
needs_bundled = pytest.mark.skipif(
    not (BUNDLED_DIR / "model.safetensors").is_file(), reason="bundled SmolLM2 not converted (scripts/setup_env.sh)"
)
UNKNOWN_ID = "no-such-org/no-such-model-hf-es"


def _reward(completions, **kwargs):
    return [float(len(c)) for c in completions]


@needs_bundled
@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_bundled_ids_resolve_to_the_local_conversion(name):
    assert Path(resolve_model_name_or_path(name)) == BUNDLED_DIR


def test_local_folder_is_returned_unchanged(tmp_path):
    assert resolve_model_name_or_path(tmp_path) == str(tmp_path)


@pytest.fixture
def network(monkeypatch):
    """Every connection or DNS lookup attempted while the test runs (each is refused)."""
    attempts = []

    def refuse(*args):
        attempts.append(args)
        raise ConnectionRefusedError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_unknown_id_offline_fails_fast_with_the_bundled_ids_and_the_local_folder_hint(network):
    with pytest.raises(ModelNotAvailableError) as info:
        resolve_model_name_or_path(UNKNOWN_ID)
    assert network == []  # fails fast: offline, the Hub is never asked (bench/latency.py times it)
    message = str(info.value)
    assert UNKNOWN_ID in message and "HF_HUB_OFFLINE" in message
    assert SMOLLM2_HUB_ID in message and "local checkpoint folder" in message
    assert isinstance(info.value, OSError)  # code that catches transformers' OSError keeps working


def test_missing_local_path_is_named():
    with pytest.raises(ModelNotAvailableError, match="No model folder at"):
        resolve_model_name_or_path("./checkpoints/does/not/exist")


def test_trainer_with_unknown_id_offline_fails_fast(tmp_path, network):
    with pytest.raises(ModelNotAvailableError, match="Bundled ids"):
        ESTrainer(model=UNKNOWN_ID, reward_funcs=_reward, args=ESConfig(output_dir=str(tmp_path), report_to="none"))
    assert network == []


def test_unreachable_hub_fails_fast_without_offline_mode(tmp_path):
    # Online mode but nothing listens at the endpoint: one refused connection, no 30 s of retries.
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "0",
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": str(REPO),
        "HF_ES_REGISTER_METRICS": "0",
    }
    # Connections and sleeps are counted: a retrying client reconnects and backs off between attempts.
    code = (
        "import socket, time\n"
        "connects, sleeps, connect, sleep = [], [], socket.socket.connect, time.sleep\n"
        "socket.socket.connect = lambda sock, address: (connects.append(address), connect(sock, address))[1]\n"
        "time.sleep = lambda seconds: (sleeps.append(seconds), sleep(seconds))[1]\n"
        "from hf_es.models import resolve_model_name_or_path, ModelNotAvailableError\n"
        "try:\n    resolve_model_name_or_path('no-such-org/no-such-model-hf-es')\n"
        "except ModelNotAvailableError as e:\n    print('ERROR', e)\n"
        "print('ATTEMPTS', len(connects), len(sleeps))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "ERROR" in out.stdout and "cannot be reached" in out.stdout, out.stdout + out.stderr
    connects, sleeps = map(int, out.stdout.split("ATTEMPTS")[-1].split())
    # One refused connection for the model (huggingface_hub may open one of its own) and no back-off: the old path
    # retried the Hub for ~30 s. bench/latency.py times it.
    assert 1 <= connects <= 2 and sleeps == 0, (connects, sleeps)


@needs_bundled
def test_load_tokenizer_resolves_the_bundled_id():
    tokenizer = load_tokenizer(SMOLLM2_HUB_ID)
    assert tokenizer.eos_token == "<|im_end|>"


@needs_bundled
def test_trainer_accepts_the_bundled_hub_id_offline(tmp_path):
    trainer = ESTrainer(
        model=SMOLLM2_HUB_ID,
        reward_funcs=_reward,
        args=ESConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True),
    )
    assert Path(trainer.base_model_id) == BUNDLED_DIR
    assert trainer.model.config.num_hidden_layers == 30  # SmolLM2-135M
    assert trainer.processing_class.eos_token == "<|im_end|>"

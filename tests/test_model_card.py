"""Model cards (hf_es.model_card): metadata that parses and validates locally with huggingface_hub, content from
plain inputs, files written next to the checkpoint, and no credentials anywhere."""

from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.repocard_data import model_index_to_eval_results

from hf_es.analysis import compute_drift
from hf_es.model_card import (
    build_model_card,
    eval_results_from_json,
    model_card_template_path,
    redact,
    write_model_card,
)

REPO = Path(__file__).resolve().parents[1]
TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
HPARAMS = {
    "output_dir": "runs/es-gsm8k",
    "population_size": 32,
    "sigma": 1.5e-3,
    "learning_rate": 2.5e-4,
    "fitness_shaping": "zscore",
    "estimator": "one_point",
    "max_steps": 3,
    "per_device_train_batch_size": 64,
    "temperature": 0.0,
    "max_completion_length": 2048,
    "seed": 42,
    "hub_token": TOKEN,
    "push_to_hub_token": TOKEN,
    "report_to": ["none"],
}
LOG_HISTORY = [
    {"step": 1, "reward": 0.30, "reward_std": 0.05, "total_generated_tokens": 1000},
    {"step": 2, "reward": 0.35, "reward_std": 0.04, "total_generated_tokens": 2000},
    {"step": 2, "eval_reward": 0.33},
    {"step": 3, "reward": 0.41, "reward_std": 0.06, "total_generated_tokens": 3000},
    {"step": 3, "train_runtime": 12.5},
]


def eval_json(names=("base", "runs/es-gsm8k")):
    """The structure scripts/evaluate_pass_at_k.py writes (format_version 1)."""
    checkpoints = {}
    for offset, name in enumerate(names):
        checkpoints[name] = {
            "model": name,
            "settings": {"dataset": "gsm8k", "split": "test", "num_samples": 32, "temperature": 0.6},
            "summary": {
                "num_problems": 8,
                "mean_sample_accuracy": 0.40 + 0.01 * offset,
                "pass@k": {str(k): 0.40 + 0.01 * offset + 0.01 * k for k in range(1, 33)},
                "maj@k": {str(k): 0.5 for k in range(1, 33)},
                "greedy_accuracy": 0.45,
            },
        }
    return {
        "format_version": 1,
        "settings": {"dataset": "gsm8k", "split": "test", "num_samples": 32, "temperature": 0.6},
        "checkpoints": checkpoints,
    }


def front_matter(text):
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def small_drift():
    base = {"model.layers.0.self_attn.q_proj.weight": torch.ones(4, 4), "model.norm.weight": torch.ones(4)}
    tuned = {k: v + 2e-3 for k, v in base.items()}
    tuned["model.norm.weight"][0] = 1.0
    return compute_drift(base, tuned)


def test_template_shipped_with_package_matches_model_cards_copy():
    path = model_card_template_path()
    assert path.is_file() and path.parent.name == "templates"
    assert (REPO / "model_cards" / "model_card.md").read_text() == path.read_text()


def test_card_metadata_parses_and_validates():
    card = build_model_card(
        base_model=BASE,
        hyperparameters=HPARAMS,
        log_history=LOG_HISTORY,
        eval_results=eval_json(),
        eval_checkpoint="runs/es-gsm8k",
        datasets=["openai/gsm8k"],
        license="apache-2.0",
        tags=["gsm8k"],
    )
    metadata = front_matter(str(card))
    assert metadata["base_model"] == BASE
    assert metadata["library_name"] == "hf_es"
    assert {"evolution-strategies", "hf_es", "gsm8k"} <= set(metadata["tags"])
    assert metadata["datasets"] == ["openai/gsm8k"]
    assert metadata["license"] == "apache-2.0"
    # huggingface_hub reads it back: the card, its data and the model-index.
    reloaded = ModelCard(str(card))
    assert reloaded.data.base_model == BASE
    ModelCardData(**reloaded.data.to_dict())  # re-validates the metadata fields
    model_name, results = model_index_to_eval_results(metadata["model-index"])
    assert model_name == "es-gsm8k"
    by_metric = {r.metric_type: r for r in results}
    assert set(by_metric) == {"pass@1", "pass@16", "pass@32", "greedy_accuracy"}
    assert by_metric["pass@1"].metric_value == pytest.approx(0.42)  # the ES checkpoint, not the base
    assert by_metric["pass@32"].metric_value == pytest.approx(0.73)
    assert by_metric["pass@1"].dataset_type == "openai/gsm8k" and by_metric["pass@1"].dataset_split == "test"
    assert by_metric["pass@16"].metric_args == {"num_samples": 32, "temperature": 0.6}
    # content
    text = str(card)
    for expected in (
        "Population size N | 32",
        "Noise scale σ | 0.0015",
        "Step size α | 0.00025",
        "Prompts per step | 64",
    ):
        assert expected in text
    assert "Total generated tokens | 3,000" in text and "Wall time | 12.5 s" in text
    assert "0.3 → 0.41" in text
    assert "| GSM8K | **runs/es-gsm8k** (this model) | 42.0 |" in text and "| GSM8K | base | 41.0 |" in text
    assert "ESConfig(" in text and "population_size=32" in text and "@misc{es_llm_reasoning_2026" in text
    assert TOKEN not in text and "hub_token" not in text


def test_no_model_index_without_eval_results_and_minimal_inputs():
    card = build_model_card(base_model=BASE)
    metadata = front_matter(str(card))
    assert "model-index" not in metadata
    assert metadata["library_name"] == "hf_es" and "evolution-strategies" in metadata["tags"]
    assert "## Evaluation" not in str(card) and "## Parameter drift" not in str(card)


def test_write_model_card_files_and_drift(tmp_path):
    out = tmp_path / "es-gsm8k"
    drift = small_drift()
    card = write_model_card(
        out,
        base_model=BASE,
        hyperparameters=HPARAMS,
        log_history=LOG_HISTORY,
        drift=drift,
        eval_results=eval_json(names=("base", str(out))),
        lineage=["GRPO on gsm8k for 250 steps", {"method": "ES", "steps": 3, "dataset": "gsm8k"}],
        datasets=["openai/gsm8k"],
        hardware="1x H100 80GB",
        reproduce_command=["accelerate", "launch", "train.py", "--sigma", "0.0015"],
    )
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "drift_stats.json", "reward_curve.png"]
    assert (out / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    readme = (out / "README.md").read_text()
    assert readme.strip() == str(card).strip()
    loaded = ModelCard.load(out / "README.md")
    assert loaded.data.base_model == BASE and loaded.data.eval_results[0].metric_value == pytest.approx(0.42)
    assert "![Reward during ES training](reward_curve.png)" in readme
    assert "accelerate launch train.py --sigma 0.0015" in readme
    assert "1. GRPO on gsm8k for 250 steps" in readme and "2. **ES** for 3 steps on gsm8k" in readme
    assert "Hardware | 1x H100 80GB" in readme
    assert "## Parameter drift from the base model" in readme and "| 0.0015 |" in readme
    assert f"{drift.relative_l2:.4g}" in readme
    # a later save without a new report reuses the drift_stats.json already in the folder
    write_model_card(out, base_model=BASE, hyperparameters=HPARAMS, log_history=[])
    assert "## Parameter drift from the base model" in (out / "README.md").read_text()
    write_model_card(tmp_path / "plain", base_model=BASE)  # nothing logged, no drift: only the card
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["README.md"]


def test_token_never_written(tmp_path, monkeypatch):
    secret = "my-private-token-value-123"
    hparams = {**HPARAMS, "hub_model_id": "org/es-model", "run_name": f"run with {TOKEN} inside", "note": secret}
    write_model_card(
        tmp_path,
        base_model=BASE,
        hyperparameters=hparams,
        log_history=LOG_HISTORY,
        drift=small_drift(),
        reproduce_command=f"python train.py --hub_token {TOKEN} --other {secret}",
        secrets=[secret],
    )
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert TOKEN.encode() not in data and secret.encode() not in data, path.name
    readme = (tmp_path / "README.md").read_text()
    assert "<redacted>" in readme and "org/es-model" in readme
    assert redact({"hub_token": TOKEN, "total_generated_tokens": 5, "nested": [f"x {TOKEN}"]}) == {
        "total_generated_tokens": 5,
        "nested": ["x <redacted>"],
    }


def test_real_esconfig_to_dict_is_safe(tmp_path):
    from hf_es import ESConfig

    args = ESConfig(output_dir=str(tmp_path / "run"), hub_token=TOKEN, max_steps=2, report_to="none")
    card = write_model_card(
        tmp_path / "run", base_model=BASE, hyperparameters=args.to_dict(), secrets=[args.hub_token]
    )
    assert TOKEN not in str(card)
    assert "Population size N | 32" in str(card)


def test_eval_results_from_plain_dicts():
    rows = eval_results_from_json({"dataset": "math500", "pass@1": 0.3, "pass@16": 0.6})
    assert rows == [
        {
            "dataset": "math500",
            "checkpoint": "this model",
            "metrics": {"pass@1": 0.3, "pass@16": 0.6},
            "settings": {},
            "num_problems": None,
            "is_model": True,
        }
    ]
    rows = eval_results_from_json({"gsm8k": {"pass@1": 0.4}, "math500": {"pass@1": 0.2}})
    assert [r["dataset"] for r in rows] == ["gsm8k", "math500"]
    # an explicit checkpoint that was not evaluated marks nothing as this model
    assert not any(r["is_model"] for r in eval_results_from_json(eval_json(), checkpoint="other"))
    assert eval_results_from_json(eval_json(), checkpoint="other", strict=False)[-1]["is_model"]
    card = build_model_card(base_model=BASE, eval_results=[{"dataset": "math500", "pass@1": 0.3}])
    metadata = front_matter(str(card))
    _, results = model_index_to_eval_results(metadata["model-index"])
    assert results[0].dataset_type == "HuggingFaceH4/MATH-500" and results[0].metric_value == 0.3


def checkpoint_folder(tmp_path):
    from hf_es.analysis.drift import threshold_checkpoint

    folder = tmp_path / "ckpt"
    threshold_checkpoint({"w": torch.zeros(3)}, {"w": torch.ones(3)}, 0.0, folder)
    (folder / "config.json").write_text("{}")
    (folder / "trainer_state.json").write_text('{"log_history": []}')
    (folder / "training_args.bin").write_bytes(b"pickle")
    (folder / "optimizer.pt").write_bytes(b"x")
    write_model_card(folder, base_model=BASE, hyperparameters=HPARAMS, log_history=LOG_HISTORY, drift=small_drift())
    return folder


def test_push_checkpoint_one_commit_with_retries(tmp_path, caplog, monkeypatch):
    """Through the real huggingface_hub client against a local Hub endpoint (tests/hub_server.py)."""
    from hub_server import LocalHub
    from huggingface_hub import HfApi

    from hf_es.model_card import push_checkpoint

    folder = checkpoint_folder(tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with LocalHub(fail_commits=2) as hub, caplog.at_level("WARNING"):
        hub.patch(monkeypatch)
        result = push_checkpoint(folder, "org/es-model", token=TOKEN, api=HfApi(endpoint=hub.endpoint), backoff_s=0.01)
    assert hub.failed_commits == 2 and len(hub.commits) == 1  # one commit, after two retries
    assert result.oid == hub.commits[0].oid
    files = hub.commits[0].files
    assert sorted(files) == [
        "README.md",
        "config.json",
        "drift_stats.json",
        "model.safetensors",
        "reward_curve.png",
        "trainer_state.json",
    ]
    assert {name: (folder / name).read_bytes() for name in files} == files  # byte for byte
    assert "retrying" in caplog.text and TOKEN not in caplog.text
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing deleted or changed


def test_push_checkpoint_gives_up_without_leaking_or_deleting(tmp_path, monkeypatch):
    from hub_server import LocalHub
    from huggingface_hub import HfApi

    from hf_es.model_card import push_checkpoint

    folder = checkpoint_folder(tmp_path)
    before = sorted(p.name for p in folder.iterdir())
    with LocalHub(fail_commits=10) as hub:
        hub.patch(monkeypatch)
        with pytest.raises(RuntimeError, match="local copy .* is intact") as info:
            push_checkpoint(
                folder, "org/es-model", token=TOKEN, api=HfApi(endpoint=hub.endpoint), max_retries=2, backoff_s=0.0
            )
        assert hub.failed_commits == 3 and not hub.commits
    assert TOKEN not in str(info.value) and info.value.__cause__ is None
    assert sorted(p.name for p in folder.iterdir()) == before
    # a file that would publish the token is refused before any network call
    (folder / "leak.json").write_text(f'{{"hub_token": "{TOKEN}"}}')
    with LocalHub() as hub:
        hub.patch(monkeypatch)
        with pytest.raises(ValueError, match="leak.json") as info:
            push_checkpoint(
                folder, "org/es-model", token=TOKEN, api=HfApi(endpoint=hub.endpoint), allow_patterns=["*.json"]
            )
        assert not hub.requests
    assert TOKEN not in str(info.value)

"""TRL's own CLI script `trl/scripts/grpo.py`, of the installed TRL, with `GRPOConfig` / `GRPOTrainer` swapped for
`ESConfig` / `ESTrainer`: it trains the bundled model on a local dataset folder with TRL's own reward functions."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trl

SWAPPED = {"GRPOConfig": "ESConfig", "GRPOTrainer": "ESTrainer"}


def swap_names(source: str) -> str:
    """`source` with the two names swapped; an import of them from `trl` becomes an import from `hf_es` (the one
    place where their module differs), every other name and line is unchanged."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    # Import statements first, bottom-up, so that earlier line numbers stay valid.
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "trl"]
    for node in sorted(imports, key=lambda n: n.lineno, reverse=True):
        moved = [alias.name for alias in node.names if alias.name in SWAPPED]
        if not moved:
            continue
        kept = [alias.name for alias in node.names if alias.name not in SWAPPED]
        indent = lines[node.lineno - 1][: len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())]
        new = "".join(
            [f"{indent}from trl import {', '.join(kept)}\n" if kept else "",
             f"{indent}from hf_es import {', '.join(SWAPPED[name] for name in moved)}\n"]
        )  # fmt: skip
        lines[node.lineno - 1 : node.end_lineno] = [new]
    text = "".join(lines)
    for old, new in SWAPPED.items():
        text = text.replace(old, new)
    return text


def test_swap_names_changes_only_the_two_names():
    source = "from trl import GRPOTrainer, get_dataset\nx = GRPOConfig\nfrom trl import ModelConfig\n"
    assert swap_names(source) == (
        "from trl import get_dataset\nfrom hf_es import ESTrainer\nx = ESConfig\nfrom trl import ModelConfig\n"
    )


@pytest.mark.slow
def test_trl_grpo_script_trains_with_the_two_names_swapped(tmp_path):
    script = Path(trl.__file__).parent / "scripts" / "grpo.py"
    swapped = swap_names(script.read_text())
    assert "GRPOTrainer(" not in swapped and "ESTrainer(" in swapped
    (tmp_path / "es_grpo.py").write_text(swapped)

    data = tmp_path / "data"
    data.mkdir()
    rows = [
        {"prompt": [{"role": "user", "content": f"What is {a} + {b}? Think in <think></think>, then answer."}],
         "solution": f"${a + b}$"}
        for a, b in [(1, 2), (3, 4), (2, 5), (6, 1)]
    ]  # fmt: skip
    (data / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "out"
    command = [
        sys.executable, str(tmp_path / "es_grpo.py"),
        "--model_name_or_path", "HuggingFaceTB/SmolLM2-135M-Instruct",
        "--dataset_name", str(data),
        "--reward_funcs", "accuracy_reward", "think_format_reward",
        "--output_dir", str(output),
        "--max_steps", "2", "--per_device_train_batch_size", "2", "--max_completion_length", "8",
        "--population_size", "2", "--report_to", "none", "--logging_steps", "1", "--use_cpu", "true", "--save_strategy", "no",
    ]  # fmt: skip
    repo = str(Path(__file__).resolve().parents[2])  # this checkout's hf_es, whatever is installed
    env = {**os.environ, "PYTHONPATH": repo, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    logs = proc.stdout + proc.stderr
    assert "Training completed" in logs
    assert "rewards/accuracy_reward/mean" in logs and "rewards/think_format_reward/mean" in logs  # TRL's rewards ran
    state = json.loads((output / "es_state.json").read_text())
    assert state["global_step"] == 2
    assert (output / "model.safetensors").is_file()

"""The GRPO baseline under the DeepSpeed configs this repo ships, on CPU: DeepSpeed's CPU accelerator with gloo,
two processes, ZeRO-2 (the paper's GRPO ran under ZeRO). Needs `hf_es[deepspeed]` (in the dev extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["deepspeed_zero2.yaml", "deepspeed_zero3.yaml"])
def test_deepspeed_configs_are_read_by_accelerate(name):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(REPO / "accelerate_configs" / name))
    assert config.distributed_type == "DEEPSPEED"
    assert config.deepspeed_config["zero_stage"] == int(name[len("deepspeed_zero")])


@pytest.mark.slow
def test_grpo_baseline_runs_two_steps_under_zero2_on_cpu(tmp_path):
    import deepspeed  # noqa: F401 - a missing dev dependency fails here, not as a skip

    output = tmp_path / "out"
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO / "accelerate_configs" / "deepspeed_zero2.yaml"),
        # The shipped config is for 8 GPUs in bf16; on CPU: 2 processes, fp32.
        "--num_processes", "2", "--mixed_precision", "no",
        str(REPO / "scripts" / "train_grpo.py"),
        "--config", str(REPO / "recipes" / "smollm2_cpu_arithmetic_grpo.yaml"),
        "--max_steps", "2", "--num_train_samples", "16", "--num_eval_samples", "4",
        "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
        "--eval_strategy", "no", "--eval_on_start", "false", "--report_to", "none", "--use_cpu", "true",
        "--output_dir", str(output),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    logs = proc.stdout + proc.stderr
    assert proc.returncode == 0, logs[-4000:]
    assert "DEEPSPEED (ZeRO stage 2) x 2 process(es)" in logs  # the baseline states how it ran
    history = json.loads((output / "log_history.json").read_text())
    steps = [entry for entry in history if "loss" in entry]
    assert [entry["step"] for entry in steps] == [1, 2]
    assert (output / "model.safetensors").is_file()

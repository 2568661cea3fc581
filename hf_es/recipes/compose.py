"""Sequential composition of ES and GRPO (paper, section 4): ES->GRPO and GRPO->ES, half the updates each.

    python scripts/compose.py --order es_grpo grpo_es --total_steps 30 --output_dir outputs/compose \
        --es_config recipes/smollm2_cpu_arithmetic.yaml --grpo_config recipes/smollm2_cpu_arithmetic_grpo.yaml

    # at scale, each stage under its own launcher:
    python scripts/compose.py --order es_grpo --total_steps 234 --output_dir outputs/qwen1.5b-compose \
        --es_config recipes/qwen2.5-1.5b-instruct_gsm8k_es.yaml \
        --grpo_config recipes/qwen2.5-1.5b-instruct_gsm8k_grpo.yaml \
        --es_launcher "accelerate launch --config_file accelerate_configs/multi_gpu.yaml" \
        --grpo_launcher "accelerate launch --config_file accelerate_configs/deepspeed_zero2.yaml"

Each stage runs `python -m hf_es.recipes.train_es` or `hf_es.recipes.train_grpo` (the modules behind
`scripts/train_es.py` / `scripts/train_grpo.py`) with its recipe, importing the same `hf_es` as this process; the
first stage runs `total_steps // 2` updates from the recipe's model (or `--model_name_or_path`), the second the
remaining updates starting from the first stage's saved checkpoint (`--model_name_or_path <stage 1 folder>`). Both
trainers read the starting checkpoint's `hf_es_lineage.json` and append their own stage, so the final model card lists
the whole lineage. `compose_summary.json` (per order) records each stage's command, folder, number of updates, first and last
`eval_reward`, and a checksum of the saved weights, so that one can check that stage 2 started from stage 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..cli import SimpleArgumentParser, resolve_recipe

__all__ = ["ORDERS", "STAGE_MODULES", "compose", "main", "run_stage", "stage_command", "weights_checksum"]

STAGE_MODULES = {"es": "hf_es.recipes.train_es", "grpo": "hf_es.recipes.train_grpo"}
ORDERS = {"es_grpo": ("es", "grpo"), "grpo_es": ("grpo", "es")}
EVAL_LINE = re.compile(r"eval_reward: (?P<start>[-\d.eE+]+) at start -> (?P<end>[-\d.eE+]+) at the end")


def weights_checksum(folder: str | os.PathLike, dtype: str = "float32") -> str:
    """SHA-256 of a checkpoint's tensors (names and values, cast to `dtype`), independent of file layout.

    Casting to float32 makes a bf16 checkpoint and its exact float32 upcast hash the same, so a stage that trains in
    float32 from a bf16 checkpoint can be compared with it.

    Args:
        folder: A folder with `*.safetensors` weights.
        dtype: The dtype tensors are cast to before hashing (`"float32"`), or `"native"`.

    Returns:
        The hex digest.
    """
    import torch
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    files = [f for f in files if f.name != "es_master.safetensors"]
    if not files:
        raise FileNotFoundError(f"No *.safetensors weights in {folder}.")
    tensors: dict[str, Any] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                tensors[name] = f.get_tensor(name)
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name]
        if dtype != "native":
            tensor = tensor.to(getattr(torch, dtype))
        digest.update(name.encode())
        digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _recipe_max_steps(recipe: str) -> int | None:
    with open(resolve_recipe(recipe)) as f:
        value = (yaml.safe_load(f) or {}).get("max_steps")
    return int(value) if value is not None and int(value) > 0 else None


def stage_command(
    method: str,
    recipe: str,
    steps: int,
    output_dir: str,
    init_from: str | None,
    launcher: Sequence[str],
    extra_args: str,
) -> list[str]:
    """The command line of one training stage: `<launcher> -m hf_es.recipes.train_<method> --config ...`.

    Args:
        method: `"es"` or `"grpo"`.
        recipe: The stage's YAML recipe (a path or a shipped recipe's name).
        steps: Number of updates.
        output_dir: Where the stage saves its model.
        init_from: Checkpoint to start from (`None`: the recipe's `model_name_or_path`).
        launcher: Command prefix, e.g. `["python"]` or `["accelerate", "launch", "--config_file", ...]` (both run
            a module with `-m`).
        extra_args: Extra CLI overrides for the stage.

    Returns:
        The command's arguments.
    """
    command = [*launcher, "-m", STAGE_MODULES[method], "--config", recipe, "--max_steps", str(steps)]
    command += ["--output_dir", output_dir]
    if init_from is not None:
        command += ["--model_name_or_path", init_from]
    return command + shlex.split(extra_args or "")


def run_stage(
    method: str,
    recipe: str,
    steps: int,
    output_dir: str,
    init_from: str | None,
    launcher: str,
    extra_args: str,
) -> dict[str, Any]:
    """Runs one training stage as a subprocess (streaming its output) and describes it.

    Args:
        method: `"es"` or `"grpo"`.
        recipe: The stage's YAML recipe.
        steps: Number of updates.
        output_dir: Where the stage saves its model.
        init_from: Checkpoint to start from (`None`: the recipe's `model_name_or_path`).
        launcher: Command prefix, e.g. `"python"` or `"accelerate launch --config_file ..."`.
        extra_args: Extra CLI overrides for the stage's script.

    Returns:
        `{"method", "output_dir", "steps", "init_from", "command", "eval_reward_start", "eval_reward_end"}`.
    """
    launcher_argv = shlex.split(launcher) if launcher else [sys.executable]
    if launcher_argv == ["python"]:
        launcher_argv = [sys.executable]
    command = stage_command(method, recipe, steps, output_dir, init_from, launcher_argv, extra_args)
    # The stage imports the hf_es this process runs (a checkout or an install), whatever its working directory.
    package_root = str(Path(__file__).resolve().parents[2])  # hf_es/recipes/compose.py -> a checkout, or site-packages
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    print(f"[compose] {method.upper()} stage: {shlex.join(command)}", flush=True)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env
    )
    evals: dict[str, float] = {}
    tail: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(line)
        tail = (tail + [line])[-40:]
        match = EVAL_LINE.search(line)
        if match:
            evals = {"eval_reward_start": float(match["start"]), "eval_reward_end": float(match["end"])}
    if process.wait() != 0:
        raise RuntimeError(
            f"The {method.upper()} stage failed (exit code {process.returncode}): {shlex.join(command)}\n"
            + "".join(tail)
        )
    return {
        "method": method.upper(),
        "output_dir": output_dir,
        "steps": steps,
        "init_from": init_from,
        "command": shlex.join(command),
        **evals,
    }


def compose(
    order: str,
    es_config: str,
    grpo_config: str,
    total_steps: int,
    output_dir: str,
    model_name_or_path: str | None = None,
    es_launcher: str = "python",
    grpo_launcher: str = "python",
    es_args: str = "",
    grpo_args: str = "",
) -> dict[str, Any]:
    """Runs one composition (`"es_grpo"` or `"grpo_es"`) and writes `<output_dir>/<order>/compose_summary.json`.

    Returns:
        The summary: the stages (see [`run_stage`]) with `weights_sha256` of each saved model, `init_sha256` of the
        weights stage 2 started from, and the final lineage.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {sorted(ORDERS)}, got {order!r}.")
    if total_steps < 2:
        raise ValueError(f"total_steps must be >= 2 (each stage needs at least one update), got {total_steps}.")
    recipes = {"es": es_config, "grpo": grpo_config}
    launchers = {"es": es_launcher, "grpo": grpo_launcher}
    extras = {"es": es_args, "grpo": grpo_args}
    first_steps = total_steps // 2
    stage_steps = (first_steps, total_steps - first_steps)
    root = Path(output_dir) / order
    stages = []
    init_from = model_name_or_path
    for index, (method, steps) in enumerate(zip(ORDERS[order], stage_steps), 1):
        stage_dir = str(root / f"stage{index}_{method}")
        stage = run_stage(method, recipes[method], steps, stage_dir, init_from, launchers[method], extras[method])
        stage["weights_sha256"] = weights_checksum(stage_dir)
        if index > 1:
            stage["init_sha256"] = stages[-1]["weights_sha256"]
        stages.append(stage)
        init_from = stage_dir
    lineage_path = Path(init_from) / "hf_es_lineage.json"
    lineage = json.loads(lineage_path.read_text()) if lineage_path.is_file() else []
    summary = {"order": order, "total_steps": total_steps, "stages": stages, "lineage": lineage}
    root.mkdir(parents=True, exist_ok=True)
    (root / "compose_summary.json").write_text(json.dumps(summary, indent=2))
    print(f"[compose] {order}: " + " -> ".join(f"{s['method']} ({s['steps']} updates)" for s in stages))
    return summary


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = SimpleArgumentParser(description=__doc__)
    parser.add_argument("--order", nargs="+", default=["es_grpo", "grpo_es"], choices=sorted(ORDERS))
    parser.add_argument("--es_config", required=True, help="ES recipe (of train_es).")
    parser.add_argument("--grpo_config", required=True, help="GRPO recipe (of train_grpo).")
    parser.add_argument(
        "--total_steps",
        type=int,
        default=None,
        help="Updates of the whole composition (each stage gets half). Default: the ES recipe's max_steps.",
    )
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--model_name_or_path", default=None, help="Starting model (default: the recipes').")
    parser.add_argument("--es_launcher", default="python", help='e.g. "accelerate launch --config_file ...".')
    parser.add_argument("--grpo_launcher", default="python", help='e.g. "accelerate launch --config_file ...".')
    parser.add_argument("--es_args", default="", help="Extra CLI overrides for the ES stage.")
    parser.add_argument("--grpo_args", default="", help="Extra CLI overrides for the GRPO stage.")
    args = parser.parse_args(argv)
    total_steps = args.total_steps or _recipe_max_steps(args.es_config)
    if total_steps is None:
        parser.error("--total_steps is needed when the ES recipe has no max_steps.")
    return [
        compose(
            order,
            args.es_config,
            args.grpo_config,
            total_steps,
            args.output_dir,
            model_name_or_path=args.model_name_or_path,
            es_launcher=args.es_launcher,
            grpo_launcher=args.grpo_launcher,
            es_args=args.es_args,
            grpo_args=args.grpo_args,
        )
        for order in args.order
    ]


if __name__ == "__main__":
    main()

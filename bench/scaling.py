"""ES steps/s with 1 vs 2 Accelerate processes on the same total population (CPU), and bytes exchanged per step.

python -m bench.scaling                    # both runs, interleaved, prints the ratio
python -m bench.scaling --worker           # one run in this process (used under `accelerate launch`)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .targets import Target

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What processes exchange per step is O(population), not O(parameters): the same bytes for a 1.6M-parameter model.
TARGETS = [Target("bytes all-reduced per step, SmolLM2 / tiny model", "bytes_per_step_over_tiny_model", 1.0)]


def worker(population_size: int, batch_size: int, max_completion_length: int, steps: int, model: str) -> dict:
    """Trains `steps` ES steps and reports the median step time (first step excluded) and the bytes reduced."""
    import torch

    from hf_es import ESConfig, ESTrainer
    from hf_es.data import load_arithmetic
    from hf_es.models import prepare_smollm2
    from hf_es.rewards import accuracy_reward

    args = ESConfig(
        output_dir="/tmp/hf_es_bench_scaling",
        population_size=population_size,
        per_device_train_batch_size=batch_size,
        max_completion_length=max_completion_length,
        generation_kwargs={"min_new_tokens": max_completion_length},
        max_steps=steps,
        report_to="none",
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
        model_init_kwargs={"dtype": "bfloat16"},
        model_card_drift=False,
    )
    if model == "tiny":
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from utils import tiny_llama, tiny_tokenizer

        model_obj, tokenizer = tiny_llama(), tiny_tokenizer()
    else:
        model_obj, tokenizer = prepare_smollm2(), None
    trainer = ESTrainer(
        model=model_obj,
        reward_funcs=[accuracy_reward],
        args=args,
        train_dataset=load_arithmetic(num_samples=batch_size * steps, seed=0),
        processing_class=tokenizer,
    )
    reduced_bytes = []
    original_reduce = trainer.accelerator.reduce

    def recording_reduce(tensor, *a, **k):
        reduced_bytes.append(tensor.numel() * tensor.element_size())
        return original_reduce(tensor, *a, **k)

    trainer.accelerator.reduce = recording_reduce
    trainer.train()
    step_times = [h["timing/step"] for h in trainer.state.log_history if "timing/step" in h][1:]
    return {
        "processes": trainer.accelerator.num_processes,
        "step_s": statistics.median(step_times),
        "bytes_per_step": statistics.median(reduced_bytes) if reduced_bytes else 0,
        "num_parameters": sum(t.numel() for t in trainer.backend.centre.master.values()),
    }


def _launch(processes: int, extra: list[str]) -> dict:
    if processes == 1:
        cmd = [sys.executable, "-m", "bench.scaling", "--worker", *extra]
    else:
        cmd = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            os.path.join(ROOT, "accelerate_configs", "cpu.yaml"),
            "--num_processes",
            str(processes),
            "-m",
            "bench.scaling",
            "--worker",
            *extra,
        ]
    env = {
        **os.environ,
        "OMP_WAIT_POLICY": "PASSIVE",
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // processes)),
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"scaling run with {processes} process(es) failed:\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


def run(
    population_size: int = 8, batch_size: int = 16, max_completion_length: int = 16, steps: int = 4, repeats: int = 3
) -> dict:
    """Interleaves 1- and 2-process runs `repeats` times; the ratio is steps/s(2) / steps/s(1)."""
    extra = [
        "--population_size",
        str(population_size),
        "--batch_size",
        str(batch_size),
        "--max_completion_length",
        str(max_completion_length),
        "--steps",
        str(steps),
    ]
    one, two = [], []
    for _ in range(repeats):
        one.append(_launch(1, extra))
        two.append(_launch(2, extra))
    ratios = [a["step_s"] / b["step_s"] for a, b in zip(one, two)]
    tiny = _launch(2, [*extra[:-1], "2", "--model", "tiny"])
    return {
        "two_process_scaling": statistics.median(ratios),
        "two_process_scaling_spread": [min(ratios), max(ratios)],
        "step_s_1_process": [r["step_s"] for r in one],
        "step_s_2_processes": [r["step_s"] for r in two],
        "bytes_per_step": two[0]["bytes_per_step"],
        "bytes_per_step_tiny_model": tiny["bytes_per_step"],
        "bytes_per_step_over_tiny_model": two[0]["bytes_per_step"] / tiny["bytes_per_step"],
        "num_parameters": two[0]["num_parameters"],
        "num_parameters_tiny_model": tiny["num_parameters"],
        "settings": {
            "population_size": population_size,
            "batch_size": batch_size,
            "max_completion_length": max_completion_length,
            "timed_steps": steps - 1,
            "repeats": repeats,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--population_size", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--max_completion_length", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"])
    args = parser.parse_args()
    if args.worker:
        result = worker(args.population_size, args.batch_size, args.max_completion_length, args.steps, args.model)
        if int(os.environ.get("RANK", "0")) == 0:
            print(json.dumps(result))
    else:
        print(
            json.dumps(
                run(args.population_size, args.batch_size, args.max_completion_length, args.steps, args.repeats)
            )
        )


if __name__ == "__main__":
    main()

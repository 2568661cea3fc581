"""Low-rank population (issue 17): one batched generation per step vs. the full-rank member-by-member loop.

    OMP_WAIT_POLICY=PASSIVE python -m bench.low_rank --population_size 8 --batch_size 8 --repeats 3

Three sides on SmolLM2-135M, interleaved (A B C A B C ...), same N x B completions and tokens (EOS suppressed):

- generation-only: the N x B prompts in one `generate` call with the centre's weights (pure batch inference);
- ES step, `perturbation="low_rank"`: every member in one batched call through the per-row hooks, plus the update;
- ES step, `perturbation="full"` (the paper's method): perturb, generate B prompts, restore, N times, plus the update.

Reports low-rank step / generation-only (the cost of the hooks and the update on top of batch inference) and the
speedup of the low-rank step over the full-rank step (median and spread).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import date

import torch

from .es_step import build_trainer
from .targets import Target

TARGETS = [
    Target(
        "low-rank ES step (one batch) / generation-only, same N x B", "low_rank_over_generation", 1.10, cpu_only=True
    ),
    Target("steps/s, low-rank batched / full-rank sequential", "low_rank_speedup", 1.4, at_most=False, cpu_only=True),
]


def run(
    population_size: int = 8,
    batch_size: int = 8,
    max_completion_length: int = 16,
    repeats: int = 3,
    rank: int = 1,
    non_matrix_noise: str = "full",
    dtype: str = "bfloat16",
) -> dict:
    """Measures the three sides `repeats` times, interleaved, and returns the summary."""
    shape = (population_size, batch_size, max_completion_length, "table", dtype)
    low_rank = build_trainer(
        *shape, perturbation="low_rank", perturbation_rank=rank, low_rank_non_matrix_noise=non_matrix_noise
    )
    full = build_trainer(*shape)
    batch = [low_rank.train_dataset[i] for i in range(batch_size)]
    texts = low_rank._prompt_texts([example["prompt"] for example in batch])
    for trainer in (low_rank, full):
        trainer.state.global_step = 0
        trainer.create_scheduler(num_training_steps=repeats + 1, optimizer=trainer.create_optimizer())

    def generation_only() -> float:
        start = time.perf_counter()
        result = low_rank.backend.generate(texts * population_size, low_rank.sampling, seed=0)
        assert result.num_tokens == population_size * batch_size * max_completion_length
        return time.perf_counter() - start

    def es_step(trainer) -> float:
        start = time.perf_counter()
        trainer._es_step(batch)
        trainer.state.global_step += 1
        return time.perf_counter() - start

    generation_only(), es_step(low_rank), es_step(full)  # warm-up
    times: dict[str, list[float]] = {"generation_only": [], "low_rank_step": [], "full_rank_step": []}
    for _ in range(repeats):
        times["generation_only"].append(generation_only())
        times["low_rank_step"].append(es_step(low_rank))
        times["full_rank_step"].append(es_step(full))
    over_generation = [s / g for s, g in zip(times["low_rank_step"], times["generation_only"])]
    speedup = [f / s for f, s in zip(times["full_rank_step"], times["low_rank_step"])]
    return {
        "low_rank_over_generation": statistics.median(over_generation),
        "low_rank_over_generation_spread": [min(over_generation), max(over_generation)],
        "low_rank_speedup": statistics.median(speedup),
        "low_rank_speedup_spread": [min(speedup), max(speedup)],
        "times_s": times,
        "tokens_per_step": population_size * batch_size * max_completion_length,
        "settings": {
            "model": "SmolLM2-135M-Instruct (bundled GGUF conversion)",
            "dtype": dtype,
            "population_size": population_size,
            "batch_size": batch_size,
            "max_completion_length": max_completion_length,
            "perturbation_rank": rank,
            "low_rank_non_matrix_noise": non_matrix_noise,
            "noise_type": "table",
            "repeats": repeats,
            "torch_threads": torch.get_num_threads(),
            "load_average": os.getloadavg(),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--population_size", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_completion_length", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--non_matrix_noise", default="full", choices=["full", "none"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--output", default=None, help="JSON path (default bench/results/<date>-<host>-low_rank.json)")
    args = parser.parse_args()
    result = run(
        args.population_size,
        args.batch_size,
        args.max_completion_length,
        args.repeats,
        args.rank,
        args.non_matrix_noise,
        args.dtype,
    )
    result["machine"] = f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs)"
    result["date"] = date.today().isoformat()
    output = args.output or os.path.join(
        os.path.dirname(__file__), "results", f"{result['date']}-{platform.node()}-low_rank.json"
    )
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output, "w") as f:
        json.dump(result, f, indent=2)
    print(
        f"low-rank step / generation-only = {result['low_rank_over_generation']:.3f} "
        f"(spread {result['low_rank_over_generation_spread'][0]:.3f}-{result['low_rank_over_generation_spread'][1]:.3f}); "
        f"speedup over full-rank sequential = {result['low_rank_speedup']:.2f}x "
        f"(spread {result['low_rank_speedup_spread'][0]:.2f}-{result['low_rank_speedup_spread'][1]:.2f}); "
        f"load average {result['settings']['load_average']}"
    )
    print(f"wrote {output}")


if __name__ == "__main__":
    main()

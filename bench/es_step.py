"""ES step wall time vs generation-only wall time for the same N x B completions (SmolLM2-135M, CPU).

    OMP_WAIT_POLICY=PASSIVE python -m bench.es_step --population_size 8 --batch_size 16 --repeats 3

Both sides generate exactly the same number of tokens (EOS is suppressed with `min_new_tokens`), so the ratio is the
cost ES adds on top of sampling: perturbation, restore, scoring, the update and logging. Runs are interleaved
(A B A B ...) and the median and spread are reported.
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

from .targets import Target

TARGETS = [Target("ES step / generation-only, same N x B", "es_over_generation", 1.15, cpu_only=True)]


def build_trainer(
    population_size: int, batch_size: int, max_completion_length: int, noise_type: str, dtype: str, **overrides
):
    from hf_es import ESConfig, ESTrainer
    from hf_es.data import load_arithmetic
    from hf_es.models import prepare_smollm2
    from hf_es.rewards import accuracy_reward

    args = ESConfig(
        output_dir="/tmp/hf_es_bench",
        population_size=population_size,
        per_device_train_batch_size=batch_size,
        max_completion_length=max_completion_length,
        generation_kwargs={"min_new_tokens": max_completion_length},
        noise_type=noise_type,
        model_init_kwargs={"dtype": dtype},
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        model_card_drift=False,
        **overrides,
    )
    dataset = load_arithmetic(num_samples=batch_size, seed=0)
    return ESTrainer(model=prepare_smollm2(), reward_funcs=[accuracy_reward], args=args, train_dataset=dataset)


def run(
    population_size: int = 8,
    batch_size: int = 16,
    max_completion_length: int = 32,
    repeats: int = 3,
    noise_type: str = "table",
    dtype: str = "bfloat16",
) -> dict:
    """Measures both sides `repeats` times, interleaved, and returns the summary."""
    trainer = build_trainer(population_size, batch_size, max_completion_length, noise_type, dtype)
    batch = [trainer.train_dataset[i] for i in range(batch_size)]
    texts = trainer._prompt_texts([example["prompt"] for example in batch])
    trainer.state.global_step = 0
    # Outside train(): give the step its learning-rate schedule as `Trainer` would.
    trainer.create_scheduler(num_training_steps=repeats + 1, optimizer=trainer.create_optimizer())

    def generation_only() -> float:
        start = time.perf_counter()
        for _ in range(population_size):
            trainer.backend.generate(texts, trainer.sampling, seed=0)
        return time.perf_counter() - start

    def es_step() -> tuple[float, dict]:
        start = time.perf_counter()
        trainer._es_step(batch)
        wall = time.perf_counter() - start
        split = {key: values[-1] for key, values in trainer._metrics["train"].items() if key.startswith("timing/")}
        trainer.state.global_step += 1
        return wall, split

    generation_only()  # warm-up (allocator, kernels, noise table)
    es_step()
    gen_times, es_times, splits = [], [], []
    for _ in range(repeats):
        gen_times.append(generation_only())
        wall, split = es_step()
        es_times.append(wall)
        splits.append(split)
    ratios = [e / g for e, g in zip(es_times, gen_times)]
    return {
        "es_over_generation": statistics.median(ratios),
        "es_over_generation_spread": [min(ratios), max(ratios)],
        "es_step_s": es_times,
        "generation_only_s": gen_times,
        "es_step_split_s": {key: statistics.median(s[key] for s in splits) for key in splits[0]},
        "settings": {
            "model": "SmolLM2-135M-Instruct (bundled GGUF conversion)",
            "dtype": dtype,
            "population_size": population_size,
            "batch_size": batch_size,
            "max_completion_length": max_completion_length,
            "noise_type": noise_type,
            "repeats": repeats,
            "torch_threads": torch.get_num_threads(),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--population_size", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--max_completion_length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--noise_type", default="table", choices=["table", "gaussian"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--output", default=None, help="JSON path (default bench/results/<date>-<host>-es_step.json)")
    args = parser.parse_args()
    result = run(
        args.population_size, args.batch_size, args.max_completion_length, args.repeats, args.noise_type, args.dtype
    )
    result["machine"] = f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs)"
    result["date"] = date.today().isoformat()
    output = args.output or os.path.join(
        os.path.dirname(__file__), "results", f"{result['date']}-{platform.node()}-es_step.json"
    )
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output, "w") as f:
        json.dump(result, f, indent=2)
    split = ", ".join(f"{k.removeprefix('timing/')} {v:.2f}s" for k, v in result["es_step_split_s"].items())
    print(
        f"ES step / generation-only = {result['es_over_generation']:.3f} "
        f"(spread {result['es_over_generation_spread'][0]:.3f}-{result['es_over_generation_spread'][1]:.3f}); "
        f"ES step split: {split}"
    )
    print(f"wrote {output}")


if __name__ == "__main__":
    main()

"""Peak memory of one ES step vs one TRL GRPOTrainer step vs inference alone (same model, prompts, lengths).

The peak is taken over the step itself (CPU: VmHWM reset through /proc/self/clear_refs after loading; GPU:
`torch.cuda` peak stats reset after loading), with everything resident at that point counted: the model, and for ES
the fp32 master and noise table, for GRPO whatever its step allocates (gradients, optimizer state, activations).

Each measurement runs in its own subprocess (peak RSS on CPU, peak CUDA memory on GPU), so the peaks do not mix:

    python -m bench.memory --mode es|grpo|inference
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import subprocess
import sys

import torch

from .targets import Target

MODES = ("inference", "es", "grpo")
TARGETS = [
    Target("ES peak / (inference peak + fp32 master)", "es_peak_over_inference", 1.05),
    Target("ES peak / GRPO peak", "es_peak_over_grpo", 0.5),
]


def _reset_peak() -> None:
    """Starts a fresh peak at the current footprint, so one-off loading spikes do not count as the step's peak."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/clear_refs", "w") as f:  # "5" resets VmHWM (Linux)
        f.write("5")


def _peak_bytes() -> int:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(
    mode: str,
    population_size: int,
    batch_size: int,
    max_completion_length: int,
    dtype: str,
    noise_table_size: int | None = None,
) -> dict:
    """Runs one step of `mode` in this process and returns its peak memory and the model's weight bytes."""
    from hf_es.data import load_arithmetic
    from hf_es.models import prepare_smollm2
    from hf_es.rewards import accuracy_reward

    model_path = prepare_smollm2()
    dataset = load_arithmetic(num_samples=batch_size, seed=0)
    use_cpu = not torch.cuda.is_available()
    if mode == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        args = GRPOConfig(
            output_dir="/tmp/hf_es_bench_grpo",
            per_device_train_batch_size=batch_size * population_size,
            num_generations=population_size,
            max_completion_length=max_completion_length,
            max_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=use_cpu,
            bf16=False,
            disable_tqdm=True,
            model_init_kwargs={"dtype": dtype},
        )
        # GRPO needs one group of `num_generations` per prompt: the same B prompts x G completions as ES's N x B.
        trainer = GRPOTrainer(model=model_path, reward_funcs=[accuracy_reward], args=args, train_dataset=dataset)
        _reset_peak()
        trainer.train()
        weight_bytes = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
        param_dtype = str(next(trainer.model.parameters()).dtype)
    else:
        from hf_es import ESConfig, ESTrainer

        args = ESConfig(
            output_dir="/tmp/hf_es_bench_es",
            population_size=population_size,
            per_device_train_batch_size=batch_size,
            max_completion_length=max_completion_length,
            generation_kwargs={"min_new_tokens": max_completion_length},
            max_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=use_cpu,
            disable_tqdm=True,
            model_init_kwargs={"dtype": dtype},
            model_card_drift=False,
            noise_table_size=noise_table_size,
        )
        if mode == "es":
            trainer = ESTrainer(model=model_path, reward_funcs=[accuracy_reward], args=args, train_dataset=dataset)
            _reset_peak()
            trainer.train()
            weight_bytes = sum(t.numel() * t.element_size() for t in trainer.backend.centre.master.values())
            param_dtype = str(trainer.model.dtype)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from hf_es.generation import SamplingConfig, TransformersGenerationBackend

            model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
            tokenizer = AutoTokenizer.from_pretrained(model_path)
            backend = TransformersGenerationBackend(model, tokenizer)
            texts = [
                tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in dataset["prompt"]
            ]
            sampling = SamplingConfig(
                max_completion_length=max_completion_length, extra={"min_new_tokens": max_completion_length}
            )
            _reset_peak()
            for _ in range(population_size):
                backend.generate(texts, sampling)
            weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
            param_dtype = str(model.dtype)
    return {"mode": mode, "peak_bytes": _peak_bytes(), "weight_bytes": weight_bytes, "param_dtype": param_dtype}


def run(
    population_size: int = 8,
    batch_size: int = 16,
    max_completion_length: int = 32,
    repeats: int = 3,
    dtype: str = "bfloat16",
) -> dict:
    """Interleaves the three modes `repeats` times, each in a fresh subprocess; returns medians and ratios."""
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.memory",
                    "--mode",
                    mode,
                    "--population_size",
                    str(population_size),
                    "--batch_size",
                    str(batch_size),
                    "--max_completion_length",
                    str(max_completion_length),
                    "--dtype",
                    dtype,
                ],
                capture_output=True,
                text=True,
                check=False,
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            )
            if proc.returncode != 0:
                raise RuntimeError(f"bench.memory --mode {mode} failed:\n{proc.stderr[-3000:]}")
            results[mode].append(json.loads(proc.stdout.strip().splitlines()[-1]))

    def median(mode: str, key: str) -> float:
        values = sorted(r[key] for r in results[mode])
        return values[len(values) // 2]

    inference, es, grpo = (median(m, "peak_bytes") for m in MODES)
    master_bytes = median("es", "weight_bytes")
    return {
        "es_peak_over_inference": es / (inference + master_bytes),
        "es_peak_over_grpo": es / grpo,
        "peak_bytes": {m: [r["peak_bytes"] for r in results[m]] for m in MODES},
        "es_master_bytes": master_bytes,
        "param_dtype": {m: results[m][0]["param_dtype"] for m in MODES},
        "model_weight_bytes": median("inference", "weight_bytes"),
        "settings": {
            "population_size": population_size,
            "batch_size": batch_size,
            "max_completion_length": max_completion_length,
            "dtype": dtype,
            "repeats": repeats,
            "grpo": "TRL GRPOTrainer defaults: bf16=True (see param_dtype), AdamW, gradient checkpointing; "
            "num_generations=N so it samples the same N x B completions",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, default=None, help="Measure one mode in this process.")
    parser.add_argument("--population_size", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--max_completion_length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--noise_table_size",
        type=int,
        default=None,
        help="ES noise table (with --mode es; default: sized to the model).",
    )
    args = parser.parse_args()
    if args.mode:
        result = measure(
            args.mode,
            args.population_size,
            args.batch_size,
            args.max_completion_length,
            args.dtype,
            args.noise_table_size,
        )
    else:
        result = run(args.population_size, args.batch_size, args.max_completion_length, args.repeats, args.dtype)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

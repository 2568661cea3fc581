"""Cost of the noise path for the full model, per noise implementation: perturb, restore, update."""

from __future__ import annotations

import statistics
import time

import torch

TARGETS = []  # reported only: the per-step cost of each noise implementation


def run(population_size: int = 8, repeats: int = 3, dtype: str = "bfloat16") -> dict:
    """Times `perturb_` (one member), `restore_` and `update_` (N directions) on SmolLM2-135M's weights.

    Returns:
        Per noise type: median seconds of each operation and the per-step total `N * perturb + restore + update`.
    """
    from transformers import AutoModelForCausalLM

    from hf_es.es import ESCentre, make_noise_source
    from hf_es.models import prepare_smollm2

    model = AutoModelForCausalLM.from_pretrained(prepare_smollm2(), dtype=getattr(torch, dtype))
    weights = {name: p.data for name, p in model.named_parameters()}
    results = {}
    for noise_type in ("table", "gaussian"):
        centre = ESCentre(weights, make_noise_source(noise_type))
        timings: dict[str, list[float]] = {"perturb": [], "restore": [], "update": []}
        for repeat in range(repeats):
            start = time.perf_counter()
            centre.perturb_(repeat, 1.5e-3)
            timings["perturb"].append(time.perf_counter() - start)
            start = time.perf_counter()
            centre.restore_()
            timings["restore"].append(time.perf_counter() - start)
            start = time.perf_counter()
            # A negligible step size: the full update path runs, the throwaway weights barely move.
            centre.update_(list(range(population_size)), [1.0 / population_size] * population_size, 1e-12)
            timings["update"].append(time.perf_counter() - start)
        medians = {key: statistics.median(values) for key, values in timings.items()}
        medians["per_step"] = population_size * medians["perturb"] + medians["restore"] + medians["update"]
        results[noise_type] = medians
        centre.restore_()
    return {
        "noise_path_s": results,
        "num_parameters": sum(w.numel() for w in weights.values()),
        "population_size": population_size,
        "dtype": dtype,
    }

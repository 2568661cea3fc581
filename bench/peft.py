"""Cost of the noise path by evolved set: full model vs a LoRA adapter vs attention projections only.

ES perturbs, restores and updates only the parameters it evolves, and keeps an fp32 master of those alone, so both
the time of the noise path and the master's memory should scale with the evolved size. The three settings are built
through the trainer's own path (`prepare_evolved_parameters` + the transformers backend's `live_weights`) on
SmolLM2-135M-Instruct and timed interleaved (full, LoRA, attention, full, ...) in one process:

    python -m bench.peft
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace

import torch

from .targets import Target

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
SETTINGS = ("full", "lora_r8", "attention_only")
# The noise path scales with the evolved set: a smaller set is faster than the full model.
TARGETS = [
    Target(
        f"noise path perturb+restore time, full / {setting}", f"full_over.{setting}.perturb_restore_time", 1.0, False
    )
    for setting in SETTINGS[1:]
]


def _centre(setting: str, model_path: str, dtype: str, noise_type: str):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_es.es import ESCentre, make_noise_source
    from hf_es.generation import TransformersGenerationBackend
    from hf_es.trainer.adapters import prepare_evolved_parameters

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
    args = SimpleNamespace(
        seed=0,
        use_vllm=False,
        save_merged_model=False,
        es_target_modules=ATTENTION if setting == "attention_only" else None,
    )
    peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=ATTENTION) if setting == "lora_r8" else None
    model = prepare_evolved_parameters(model, args, peft_config)
    backend = TransformersGenerationBackend(model, AutoTokenizer.from_pretrained(model_path))
    return model, ESCentre(backend.live_weights(), make_noise_source(noise_type))


def run(population_size: int = 8, repeats: int = 5, dtype: str = "bfloat16", noise_type: str = "table") -> dict:
    """Times perturb (one member), restore and update (N directions) for each evolved set, interleaved.

    Returns:
        Per setting: evolved parameters, fp32 master bytes, median seconds of each operation; and the ratios of the
        full model's perturb+restore time and master bytes over each smaller setting.
    """
    from hf_es.models import prepare_smollm2

    model_path = str(prepare_smollm2())
    built = {setting: _centre(setting, model_path, dtype, noise_type) for setting in SETTINGS}
    timings = {setting: {"perturb": [], "restore": [], "update": []} for setting in SETTINGS}
    for repeat in range(repeats):
        for setting in SETTINGS:
            centre = built[setting][1]
            start = time.perf_counter()
            centre.perturb_(repeat, 1.5e-3)
            timings[setting]["perturb"].append(time.perf_counter() - start)
            start = time.perf_counter()
            centre.restore_()
            timings[setting]["restore"].append(time.perf_counter() - start)
            start = time.perf_counter()
            # A negligible step size: the full update path runs, the weights barely move.
            centre.update_(list(range(population_size)), [1.0 / population_size] * population_size, 1e-12)
            timings[setting]["update"].append(time.perf_counter() - start)
    result: dict = {"settings": {}, "population_size": population_size, "dtype": dtype, "noise_type": noise_type}
    for setting in SETTINGS:
        model, centre = built[setting]
        medians = {key: statistics.median(values) for key, values in timings[setting].items()}
        result["settings"][setting] = {
            "evolved_parameters": centre.num_parameters,
            "total_parameters": sum(p.numel() for p in model.parameters()),
            "master_bytes": sum(t.numel() * t.element_size() for t in centre.master.values()),
            "perturb_restore_s": medians["perturb"] + medians["restore"],
            "perturb_restore_spread_s": [
                min(p + r for p, r in zip(timings[setting]["perturb"], timings[setting]["restore"])),
                max(p + r for p, r in zip(timings[setting]["perturb"], timings[setting]["restore"])),
            ],
            **{f"{key}_s": value for key, value in medians.items()},
        }
    full = result["settings"]["full"]
    result["full_over"] = {
        setting: {
            "perturb_restore_time": full["perturb_restore_s"] / result["settings"][setting]["perturb_restore_s"],
            "update_time": full["update_s"] / result["settings"][setting]["update_s"],
            "master_bytes": full["master_bytes"] / result["settings"][setting]["master_bytes"],
        }
        for setting in SETTINGS[1:]
    }
    return result


def markdown_rows(result: dict) -> list[tuple[str, str, str]]:
    """Rows for the `python -m bench` table: one per evolved set."""
    mib = 1 << 20
    rows = []
    for setting, values in result["settings"].items():
        ratios = result["full_over"].get(setting)
        detail = f"{values['evolved_parameters']:,} params, master {values['master_bytes'] / mib:.1f} MiB" + (
            f"; full / this: time x{ratios['perturb_restore_time']:.1f}, master x{ratios['master_bytes']:.0f}"
            if ratios
            else ""
        )
        rows.append(
            (
                f"noise path, evolved = {setting}: perturb+restore / update(N={result['population_size']}), s",
                f"{values['perturb_restore_s']:.4f} / {values['update_s']:.4f}",
                detail,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--population_size", type=int, default=8)
    parser.add_argument("--noise_type", choices=["table", "gaussian"], default="table")
    args = parser.parse_args()
    result = run(population_size=args.population_size, repeats=args.repeats, noise_type=args.noise_type)
    print(json.dumps(result, indent=2))
    for row in markdown_rows(result):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

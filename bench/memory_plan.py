"""The master placement plan for the paper's model sizes on one 80 GB accelerator, computed by the library's own pure
placement function (`hf_es.es.plan_master_placement`), not measured on a GPU:

    python -m bench.memory_plan

For each model and backend it states the bytes the fp32 master and noise table need, the bytes free after the
engine's share (vLLM: `(1 - gpu_memory_utilization) x total`, less a CUDA context of 0.5 GiB; transformers: total
minus the bf16 weights and the context), the headroom kept, where the master goes, and for vLLM the largest
`vllm_gpu_memory_utilization` at which it still fits on the device.
"""

from __future__ import annotations

import json

from .targets import Target

GIB = 2**30
# Public parameter counts (config.json of the Hub checkpoints; tied embeddings counted once).
MODELS = {"Qwen2.5-1.5B-Instruct": 1_543_714_304, "Qwen2.5-7B-Instruct": 7_615_616_512}
CONTEXT_BYTES = GIB // 2  # CUDA context and allocator slack outside any share
TARGETS = [
    Target("7B master on an 80 GiB device beside vLLM at utilization 0.55 (1 = device)", "qwen7b_vllm_055", 1, False)
]


def plan(num_parameters: int, total: int, utilization: float | None) -> dict:
    from hf_es.es import NoiseTable, plan_master_placement, table_size_for_model

    noise = NoiseTable(size=table_size_for_model(num_parameters), table_seed=0)
    weights = 2 * num_parameters  # bf16 live weights
    if utilization is None:
        free = total - weights - CONTEXT_BYTES
    else:
        free = int((1 - utilization) * total) - CONTEXT_BYTES
    placement = plan_master_placement(
        "auto", "cuda:0", num_parameters, noise, free, total, engine_utilization=utilization,
        engine_weight_bytes=weights,
    )  # fmt: skip
    return {
        "device": str(placement.device),
        "free_gib": free / GIB,
        "max_vllm_gpu_memory_utilization": placement.max_engine_utilization,
        "reason": placement.reason,
    }


def run(repeats: int = 1) -> dict:
    total = 80 * GIB
    rows = {}
    for model, count in MODELS.items():
        rows[model] = {
            "transformers": plan(count, total, None),
            **{f"vllm_{u}": plan(count, total, u) for u in (0.5, 0.55, 0.6, 0.7)},
        }
    rows["qwen7b_vllm_055"] = 1.0 if rows["Qwen2.5-7B-Instruct"]["vllm_0.55"]["device"].startswith("cuda") else 0.0
    return rows


def main() -> None:
    print(json.dumps(run(), indent=2))


if __name__ == "__main__":
    main()

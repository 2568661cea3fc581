"""Gaussian-noise values each tensor-parallel rank draws for one decoder layer, relative to its shard's size
(`hf_es.es.sharding.drawn_elements`: row-parallel slices are strided, so `torch.randn` must draw whole chunks).
Counts, not timings; the largest ratio over ranks:

    python -m bench.tp_noise_cost
"""

from __future__ import annotations

import json
import math

# Public configs: hidden size, MLP size, attention heads, KV heads, head dim.
MODELS = {
    "Llama-7B": (4096, 11008, 32, 32, 128),
    "Qwen2.5-32B": (5120, 27648, 40, 8, 128),
    "Qwen2.5-72B": (8192, 29568, 64, 8, 128),
}


def layer_ratio(model: str, tp: int) -> float:
    from hf_es.es.noise import DEFAULT_CHUNK_SIZE
    from hf_es.es.sharding import column_parallel_spec, drawn_elements, row_parallel_spec

    hidden, mlp, heads, kv_heads, head_dim = MODELS[model]
    worst = 0.0
    for rank in range(tp):
        specs = [
            column_parallel_spec((heads * head_dim, hidden), rank, tp),
            *[column_parallel_spec((kv_heads * head_dim, hidden), rank, tp, replicas=max(1, tp // kv_heads))] * 2,
            row_parallel_spec((hidden, heads * head_dim), rank, tp),
            *[column_parallel_spec((mlp, hidden), rank, tp)] * 2,
            row_parallel_spec((hidden, mlp), rank, tp),
        ]
        drawn = sum(drawn_elements(spec, DEFAULT_CHUNK_SIZE) for spec in specs)
        held = sum(
            math.prod(spec.shape) // (1 if spec.dim is None else spec.shape[spec.dim]) * spec.size for spec in specs
        )
        worst = max(worst, drawn / held)
    return worst


def run() -> dict:
    return {model: {f"tp{tp}": round(layer_ratio(model, tp), 3) for tp in (2, 4, 8)} for model in MODELS}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))

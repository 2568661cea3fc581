"""Per-shard ES noise path of a tensor-parallel rank: perturb, restore, update of one rank's slices vs the whole layer.

A rank of a TP engine holds slices of every tensor ([`hf_es.es.sharding`]); it must regenerate exactly its slice of
the whole tensor's noise, which for row-parallel layers (o_proj, down_proj) means reading (table) or drawing
(Gaussian) every chunk of the whole tensor. This times one rank's `ShardCentre` against the unsharded `ESCentre` on
decoder layers of a given shape (default: Llama-2-7B, 4096 hidden, 11008 intermediate, 32 heads), on the GPU when
there is one. `python -m bench.tp_shards [--tp 2] [--layers 2] [--tiny]`; `bench.gpu_check` runs it too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

LLAMA_7B_LAYER = dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32)
TINY_LAYER = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2)


def layer_shards(shape: dict[str, int], layers: int, rank: int, tp: int) -> dict[str, Any]:
    """HF name -> ShardSpec of `layers` decoder layers as vLLM shards them for `rank` of `tp`."""
    from hf_es.es.sharding import column_parallel_spec, replicated_spec, row_parallel_spec

    hidden, inter = shape["hidden_size"], shape["intermediate_size"]
    head_dim = hidden // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * head_dim
    replicas = max(1, tp // shape["num_key_value_heads"])
    specs = {}
    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        specs[prefix + "self_attn.q_proj.weight"] = column_parallel_spec((hidden, hidden), rank, tp)
        specs[prefix + "self_attn.k_proj.weight"] = column_parallel_spec((kv, hidden), rank, tp, replicas)
        specs[prefix + "self_attn.v_proj.weight"] = column_parallel_spec((kv, hidden), rank, tp, replicas)
        specs[prefix + "self_attn.o_proj.weight"] = row_parallel_spec((hidden, hidden), rank, tp)
        specs[prefix + "mlp.gate_proj.weight"] = column_parallel_spec((inter, hidden), rank, tp)
        specs[prefix + "mlp.up_proj.weight"] = column_parallel_spec((inter, hidden), rank, tp)
        specs[prefix + "mlp.down_proj.weight"] = row_parallel_spec((hidden, inter), rank, tp)
        specs[prefix + "input_layernorm.weight"] = replicated_spec((hidden,), rank)
        specs[prefix + "post_attention_layernorm.weight"] = replicated_spec((hidden,), rank)
    return specs


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_path(centre, device: torch.device, population_size: int, repeats: int) -> dict[str, float]:
    timings: dict[str, list[float]] = {"perturb": [], "restore": [], "update": []}
    for repeat in range(repeats):
        for key, call in (
            ("perturb", lambda seed=repeat: centre.perturb_(seed, 1.5e-3)),
            ("restore", centre.restore_),
            # A negligible step: the whole update path runs, the weights barely move.
            (
                "update",
                lambda: centre.update_(list(range(population_size)), [1.0 / population_size] * population_size, 1e-12),
            ),
        ):
            _sync(device)
            start = time.perf_counter()
            call()
            _sync(device)
            timings[key].append(time.perf_counter() - start)
    return {key: statistics.median(values) for key, values in timings.items()}


def run(
    shape: dict[str, int] | None = None,
    tp: int = 2,
    layers: int = 1,
    population_size: int = 8,
    repeats: int = 3,
    device: str | None = None,
) -> dict[str, Any]:
    """Times the whole layers' noise path and each distinct rank's shard path, for both noise types.

    Returns:
        Per noise type: median seconds of perturb / restore / update for the whole layers (`tp1`) and per rank
        (`rank<r>`), each rank's `shard_over_whole` time ratios (ideal: 1/TP), the noise values drawn relative to
        the shard (`drawn_over_shard`), and whether every rank's perturbed slice equals the whole tensor's
        (`slices_exact`).
    """
    from hf_es.es import ESCentre, make_noise_source
    from hf_es.es.sharding import drawn_elements
    from hf_es.generation.vllm_worker import ShardCentre

    shape = shape or LLAMA_7B_LAYER
    where = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    generator = torch.Generator().manual_seed(0)
    whole_specs = layer_shards(shape, layers, 0, 1)
    whole = {
        name: (torch.randn(spec.shape, generator=generator) * 0.02).to(where, torch.bfloat16)
        for name, spec in whole_specs.items()
    }
    results: dict[str, Any] = {"shape": shape, "tp": tp, "layers": layers, "device": str(where)}
    for noise_type in ("table", "gaussian"):
        noise = make_noise_source(noise_type)
        entry: dict[str, Any] = {}
        reference = ESCentre({name: tensor.clone() for name, tensor in whole.items()}, noise)
        entry["tp1"] = _time_path(reference, where, population_size, repeats)
        reference.perturb_(99, 1.5e-3)
        exact = True
        for rank in range(tp):
            specs = layer_shards(shape, layers, rank, tp)
            shards = {name: (spec.slice_of(whole[name]).clone(), spec) for name, spec in specs.items()}
            centre = ShardCentre(shards, noise)
            timings = _time_path(centre, where, population_size, repeats)
            timings["shard_over_whole"] = {
                key: timings[key] / entry["tp1"][key] for key in ("perturb", "restore", "update")
            }
            shard_numel = sum(spec.numel for spec in specs.values())
            timings["drawn_over_shard"] = (
                sum(drawn_elements(s, noise.chunk_size) for s in specs.values()) / shard_numel
            )
            centre.perturb_(99, 1.5e-3)
            exact &= all(
                torch.equal(centre.parameters[name], spec.slice_of(reference.parameters[name]))
                for name, spec in specs.items()
            )
            entry[f"rank{rank}"] = timings
            del centre, shards
        entry["slices_exact"] = exact
        results[noise_type] = entry
        del reference
        if where.type == "cuda":
            torch.cuda.empty_cache()
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--population_size", type=int, default=8)
    parser.add_argument("--tiny", action="store_true", help="A 256-wide layer (seconds on CPU).")
    args = parser.parse_args(argv)
    result = run(TINY_LAYER if args.tiny else None, args.tp, args.layers, args.population_size)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()

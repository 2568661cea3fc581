"""Self-check of the ES accelerator path on any CUDA machine: exactness, speed and memory, in under 8 minutes.

    python -m bench.gpu_check            # CUDA: Qwen2.5-0.5B- and 1.5B-shaped random models, bf16
    python -m bench.gpu_check --tiny     # CPU, seconds: the same checks on a tiny model (in the test suite)

Needs only torch and transformers (no network: models are random-initialised from configs written here). For each
model and noise type (`table`, `gaussian`) it checks that
- restoring after perturbations and after an update gives back the exact bf16 centre,
- the update matches a float64 reference,
- a host master and a master next to the weights give bit-identical centres (table noise; CUDA's randn differs from
  the CPU's by design),
and measures perturb, restore, update (N seeds) and generation time per member, and peak CUDA memory of ES against
inference alone. Targets: (perturb + restore + update) <= 5% of the ES step at N=32, B=64, and ES peak <= inference
peak + master + noise table. Every section records its own failure and the JSON is rewritten after each one, so a
run cut short still reports what it measured. Writes `bench/results/gpu-<date>.json` (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from datetime import date
from typing import Any

import torch

from hf_es.es import ESCentre, make_noise_source, master_device_for

from . import tp_shards

MODEL_SHAPES: dict[str, dict[str, Any]] = {
    # Qwen2.5-0.5B / 1.5B shapes (config.json of the released checkpoints), random weights.
    "qwen2.5-0.5b-shaped": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    ),
    "qwen2.5-1.5b-shaped": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    ),
}
TINY_SHAPE = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
SIGMA = 1.5e-3
OVERHEAD_TARGET = 0.05


class Report:
    """The JSON result, rewritten to disk after every section."""

    def __init__(self, path: str, settings: dict[str, Any]):
        self.path = path
        self.start = time.perf_counter()
        self.data: dict[str, Any] = {"settings": settings, "environment": _environment(), "models": {}, "errors": []}

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def flush(self) -> None:
        self.data["elapsed_s"] = round(self.elapsed(), 2)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.data, f, indent=2)
        os.replace(self.path + ".tmp", self.path)

    def section(self, where: dict[str, Any], name: str, budget_s: float, function, *args) -> Any:
        """Runs one check, stores its result (or its error) under `where[name]`, flushes; skips past the budget."""
        if self.elapsed() > budget_s:
            where[name] = {"skipped": f"time budget of {budget_s:.0f} s spent"}
            self.flush()
            return None
        print(f"[{self.elapsed():7.1f} s] {name} ...", flush=True)
        try:
            result = function(*args)
            where[name] = result
        except Exception as error:  # record and go on: one run may be the only chance on a given machine
            where[name] = {"error": f"{type(error).__name__}: {error}"}
            self.data["errors"].append({"section": name, "traceback": traceback.format_exc()[-3000:]})
            result = None
        self.flush()
        return result


def _environment() -> dict[str, Any]:
    import transformers

    env = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), sm_count=props.multi_processor_count
        )
    return env


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device: torch.device, function, repeats: int = 3) -> float:
    """Median seconds of `function()` over `repeats` runs."""
    times = []
    for _ in range(repeats):
        _sync(device)
        tick = time.perf_counter()
        function()
        _sync(device)
        times.append(time.perf_counter() - tick)
    return statistics.median(times)


def build_model(shape: dict[str, Any], device: torch.device, dtype: torch.dtype, vocab_size: int):
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=vocab_size,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        rope_theta=1e6,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
        **shape,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def _generate_fn(model, device: torch.device, batch_size: int, prompt_length: int, new_tokens: int):
    from transformers import GenerationConfig

    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, model.config.vocab_size, (batch_size, prompt_length), generator=generator).to(device)
    config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)

    @torch.no_grad()
    def generate():
        return model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config)

    return generate


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def check_inference(model, device, args) -> dict[str, Any]:
    """Generation time per member (B prompts, fixed length) and peak memory of inference alone."""
    generate = _generate_fn(model, device, args.batch_size, args.prompt_length, args.new_tokens)
    _generate_fn(model, device, 2, 8, 2)()  # warm-up (kernels, allocator)
    _reset_peak(device)
    seconds = _timed(device, generate, repeats=1)
    return {
        "generate_s_per_member": seconds,
        "tokens_per_s": args.batch_size * args.new_tokens / seconds,
        "inference_peak_bytes": _peak(device),
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
    }


def check_exactness(model, noise_type: str, args) -> dict[str, Any]:
    """Exact bf16 restore after perturbations and an update; update vs float64; host vs device master."""
    weights = {name: p.data for name, p in model.named_parameters()}
    original = {name: t.clone() for name, t in weights.items()}
    num_parameters = sum(t.numel() for t in weights.values())
    noise = make_noise_source(noise_type, table_size=None, num_parameters=num_parameters)
    centre = ESCentre(weights, noise, master_device=master_device_for("auto", weights, noise))
    result: dict[str, Any] = {"master_device": str(centre.master_device)}
    for seed in range(3):
        centre.perturb_(seed, SIGMA)
    centre.restore_()
    result["restore_exact_after_perturb"] = all(torch.equal(weights[n], original[n]) for n in weights)

    # Update against float64 on a few tensors (the largest first: most rounding).
    names = sorted(weights, key=lambda n: -weights[n].numel())[:3]
    before = {n: centre.master[n].double() for n in names}
    seeds, coefficients, lr = [11, 12, 13, 14], [0.9, -0.4, 1.7, -1.2], 1e-3
    centre.update_(seeds, coefficients, lr)
    worst = 0.0
    for n in names:
        delta = sum(
            lr * c * noise.full(s, n, weights[n].shape, centre.master_device).double()
            for s, c in zip(seeds, coefficients)
        )
        reference = before[n] + delta
        # fp32 accumulates delta and the sum: a few float32 ulps of |theta| + |terms| per element.
        scale = before[n].abs() + sum(
            abs(lr * c) * noise.full(s, n, weights[n].shape, centre.master_device).double().abs()
            for s, c in zip(seeds, coefficients)
        )
        worst = max(worst, float(((centre.master[n].double() - reference).abs() / (scale * 2**-24 + 1e-30)).max()))
    result["update_max_error_in_fp32_ulps"] = worst
    result["update_matches_float64"] = worst <= 8
    result["restore_exact_after_update"] = all(
        torch.equal(weights[n], centre.master[n].to(weights[n].dtype)) for n in weights
    )
    if noise_type == "table" and centre.master_device.type != "cpu":
        host = ESCentre({n: t.clone() for n, t in original.items()}, noise, master_device="cpu")
        host.update_(seeds, coefficients, lr)
        result["host_and_device_master_bit_identical"] = all(
            torch.equal(host.master[n].to(centre.master_device), centre.master[n]) for n in names
        )
        del host
    for n, t in weights.items():  # back to the model's initial weights for the next section
        t.copy_(original[n])
    del centre, original
    return result


def check_speed_and_memory(model, noise_type: str, inference: dict[str, Any], args) -> dict[str, Any]:
    """Times perturb / restore / update(N) and takes ES's peak memory over perturb + generate + update."""
    device = model.device
    weights = {name: p.data for name, p in model.named_parameters()}
    num_parameters = sum(t.numel() for t in weights.values())
    noise = make_noise_source(noise_type, table_size=None, num_parameters=num_parameters)
    _reset_peak(device)
    centre = ESCentre(weights, noise, master_device=master_device_for("auto", weights, noise))
    perturb_s = _timed(device, lambda: centre.perturb_(1, SIGMA))
    restore_s = _timed(device, centre.restore_)
    seeds = list(range(args.population_size))
    coefficients = [((-1) ** i) * 1e-6 for i in seeds]  # tiny: the timing, not the move, matters here
    update_s = _timed(device, lambda: centre.update_(seeds, coefficients, 1.0), repeats=1)
    centre.perturb_(2, SIGMA)
    _generate_fn(model, device, args.batch_size, args.prompt_length, args.new_tokens)()
    centre.update_(seeds, coefficients, 1.0)
    es_peak = _peak(device)
    master_bytes = 4 * num_parameters
    table_bytes = 4 * (noise.size + noise.chunk_size) if hasattr(noise, "size") else 0
    generate_s = inference["generate_s_per_member"]
    n = args.population_size
    overhead = n * perturb_s + update_s  # members overwrite each other; update_ ends with the one restore
    result = {
        "master_device": str(centre.master_device),
        "perturb_s": perturb_s,
        "restore_s": restore_s,
        f"update_s_N{n}": update_s,
        "es_step_s_estimate": n * generate_s + overhead,
        "overhead_fraction": overhead / (n * generate_s + overhead),
        "overhead_target": OVERHEAD_TARGET,
        "master_bytes": master_bytes,
        "table_bytes": table_bytes,
        "es_peak_bytes": es_peak,
    }
    result["meets_overhead_target"] = result["overhead_fraction"] <= OVERHEAD_TARGET
    if es_peak is not None and inference["inference_peak_bytes"] is not None:
        bound = inference["inference_peak_bytes"] + master_bytes + table_bytes
        result["es_peak_over_bound"] = es_peak / bound
        result["meets_memory_target"] = es_peak <= bound
    centre.restore_()
    return result


def _build_into(built: list, shape: dict[str, Any], device: torch.device, dtype: torch.dtype, vocab_size: int):
    built.append(build_model(shape, device, dtype, vocab_size))
    return {"num_parameters": sum(p.numel() for p in built[0].parameters()), "dtype": str(dtype)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    shapes = {"tiny": TINY_SHAPE} if args.tiny else MODEL_SHAPES
    report = Report(args.out, {k: v for k, v in vars(args).items() if k != "out"} | {"device": str(device)})
    dtype = torch.bfloat16
    for model_name, shape in shapes.items():
        entry: dict[str, Any] = {}
        report.data["models"][model_name] = entry
        built: list[torch.nn.Module] = []
        report.section(entry, "build", args.time_budget_s, _build_into, built, shape, device, dtype, args.vocab_size)
        if not built:
            continue
        model = built.pop()
        inference = report.section(entry, "inference", args.time_budget_s, check_inference, model, device, args)
        for noise_type in ("table", "gaussian"):
            report.section(
                entry, f"exactness_{noise_type}", args.time_budget_s, check_exactness, model, noise_type, args
            )
            if inference is not None:
                report.section(
                    entry,
                    f"speed_memory_{noise_type}",
                    args.time_budget_s,
                    check_speed_and_memory,
                    model,
                    noise_type,
                    inference,
                    args,
                )
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    # One rank's shards of a TP-2 engine on Llama-7B-shaped layers (bench/tp_shards.py): per-shard perturb / restore /
    # update against the whole layers, and whether each slice equals the whole tensor's.
    tp_entry: dict[str, Any] = {}
    report.data["models"]["tp2_layer_shards"] = tp_entry
    tp_shape, tp_layers = (tp_shards.TINY_LAYER, 1) if args.tiny else (tp_shards.LLAMA_7B_LAYER, 2)
    report.section(
        tp_entry,
        "tp_shards",
        args.time_budget_s,
        tp_shards.run,
        tp_shape,
        2,
        tp_layers,
        args.population_size,
        2,
        str(device),
    )
    sections = [section for entry in report.data["models"].values() for section in entry.values()]
    report.data["all_checks_pass"] = (
        not report.data["errors"]
        and not any("skipped" in s for s in sections)
        and all(
            value is not False
            for entry in report.data["models"].values()
            for section in entry.values()
            if isinstance(section, dict)
            for key, value in section.items()
            if key.startswith(("restore_exact", "update_matches", "host_and_device"))
        )
        and all(
            section.get(noise_type, {}).get("slices_exact", True) is not False
            for section in report.data["models"]["tp2_layer_shards"].values()
            if isinstance(section, dict)
            for noise_type in ("table", "gaussian")
        )
    )
    report.flush()
    print(
        f"[{report.elapsed():7.1f} s] wrote {args.out}; all checks pass: {report.data['all_checks_pass']}", flush=True
    )
    return report.data


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="Tiny model on CPU (seconds); for the test suite.")
    parser.add_argument("--out", default=None, help="JSON path (default: bench/results/gpu-<date>.json).")
    parser.add_argument("--population_size", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--prompt_length", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--vocab_size", type=int, default=151936)
    parser.add_argument("--time_budget_s", type=float, default=420.0, help="Sections starting later are skipped.")
    args = parser.parse_args(argv)
    if args.tiny:
        args.population_size, args.batch_size, args.prompt_length, args.new_tokens = 4, 2, 8, 4
        args.vocab_size = 1000
    if args.out is None:
        suffix = "-tiny" if args.tiny else ""
        args.out = os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "results", f"gpu{suffix}-{date.today()}.json"
        )
    if not args.tiny and not torch.cuda.is_available():
        print("No CUDA device: run with --tiny on CPU.", file=sys.stderr)
    return run(args)


if __name__ == "__main__":
    main()

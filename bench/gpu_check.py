"""Self-check of the ES accelerator path on any CUDA machine: exactness, speed and memory, in under 8 minutes.

    python -m bench.gpu_check            # CUDA: Qwen2.5-0.5B-, 1.5B- and 7B-shaped random models, bf16
    python -m bench.gpu_check --tiny     # CPU, seconds: the same code paths on a tiny model (in the test suite)

Exit status: 0 when every check passes, 1 when any fails (or errs, or is skipped for time), 2 when there is no CUDA
device and no `--tiny`. Needs only torch and transformers (no network: models are random-initialised from configs
written here, the tokenizer is built in memory). For each model and noise type (`table`, `gaussian`; the 7B shape:
`table`) it checks that
- a perturbation writes exactly `master + scale * eps` (the fp32 sum rounded once into the live dtype),
- restoring after perturbations and after an update gives back the exact bf16 centre,
- the update matches a float64 reference,
- a host master and a master next to the weights give bit-identical centres (table noise; CUDA's randn differs from
  the CPU's by design),
and measures perturb, restore, update (N seeds) and generation time per member, and peak CUDA memory of ES against
inference alone. Targets (count on CUDA; reported only on the CPU): (perturb + restore + update) <= 5% of the ES step
at N=32, B=64, and ES peak <= inference peak + master + noise table. Further checks:
- in-place writes are seen by `torch.compile` (inductor; on the CPU, dynamo with `aot_eager`) and by CUDA graphs
  (`mode="reduce-overhead"` and a hand-captured `torch.cuda.CUDAGraph`): perturb, replay, compare with eager, restore,
  bit-exact;
- placement beside a simulated vLLM reservation (`vllm_gpu_memory_utilization` of the device held by a buffer): the
  7B master lands on the device and the bytes it takes stay within the plan's estimate (on the CPU: the plan with
  simulated memory);
- the low-rank population's one batched call against full-rank members one by one (ES steps per second, transformers
  backend, rows bounded by `--max_rows`).
Every section records its own failure and the JSON is rewritten after each one, so a run cut short still reports what
it measured. Writes `bench/results/gpu-<date>.json` (or `--out`).
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

from hf_es.es import (
    ESCentre,
    make_noise_source,
    make_population,
    master_bytes_needed,
    master_device_for,
    plan_master_placement,
)

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
# Qwen2.5-7B (7,615,616,512 parameters): untied embeddings, larger vocabulary. 15 GiB in bf16, a 28.4 GiB master.
SEVEN_B_SHAPE = dict(
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    vocab_size=152064,
    tie_word_embeddings=False,
)
TINY_SHAPE = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
SIGMA = 1.5e-3
# Large enough to move every bf16 weight group's logits visibly (the start-up probe's scale).
PROBE_SCALE = 0.05
OVERHEAD_TARGET = 0.05
# vLLM's share held by a buffer in the placement check (the recipe's value for 64 prompts x 8k tokens at 7B).
SIMULATED_VLLM_UTILIZATION = 0.55
# Keys of boolean results that decide `all_checks_pass` (False fails; None means "not applicable here").
PASS_KEYS = (
    "restore_exact",
    "update_matches",
    "host_and_device",
    "perturb_matches",
    "meets_",
    "sees_",
    "restores_",
    "placed_",
    "estimate_covers",
    "rows_bounded",
    "slices_exact",
)


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

    values = dict(
        vocab_size=vocab_size,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        rope_theta=1e6,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    config = Qwen2Config(**(values | shape))
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
    centre.perturb_(0, SIGMA)
    result["perturb_matches_reference"] = _perturb_matches_reference(centre, 0, SIGMA)
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


def _perturb_matches_reference(centre: ESCentre, seed: int, scale: float) -> bool:
    """Whether the live weights hold `master + scale * eps` summed in fp32 and rounded once into their dtype."""
    for name, live in centre.parameters.items():
        master, flat = centre.master[name].view(-1), live.view(-1)
        for start, end, eps in centre.noise.chunks(seed, name, master.numel(), master.device):
            expected = torch.add(master[start:end], eps, alpha=scale).to(device=live.device, dtype=live.dtype)
            if not torch.equal(flat[start:end], expected):
                return False
    return True


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
    # The targets are about accelerators: on the CPU the numbers are reported, not judged (None).
    on_cuda = device.type == "cuda"
    result["meets_overhead_target"] = result["overhead_fraction"] <= OVERHEAD_TARGET if on_cuda else None
    result["meets_memory_target"] = None
    if es_peak is not None and inference["inference_peak_bytes"] is not None:
        bound = inference["inference_peak_bytes"] + master_bytes + table_bytes
        result["es_peak_over_bound"] = es_peak / bound
        result["meets_memory_target"] = es_peak <= bound
    centre.restore_()
    return result


def _logits_fn(model, input_ids: torch.Tensor):
    @torch.no_grad()
    def logits() -> torch.Tensor:
        return model(input_ids=input_ids, use_cache=False).logits.float().clone()

    return logits


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def _lands_and_restores(centre: ESCentre, run, eager) -> dict[str, Any]:
    """Perturbs, runs `run` (compiled / replayed) and `eager`, restores, runs again; compares bit for bit."""
    before, eager_before = run(), eager()
    centre.perturb_(7, PROBE_SCALE)
    perturbed, eager_perturbed = run(), eager()
    centre.restore_()
    restored = run()
    moved, gap = _max_diff(eager_perturbed, eager_before), _max_diff(perturbed, eager_perturbed)
    return {
        # Seen: the compiled output moved with the weights, to where eager went (up to kernel rounding).
        "sees_perturbation": bool(not torch.equal(perturbed, before) and gap <= 0.1 * moved),
        "restores_bit_exact": torch.equal(restored, before),
        "eager_logit_change": moved,
        "compiled_vs_eager_after_perturbation": gap,
    }


def check_inplace_compiled(shape: dict[str, Any], device: torch.device, dtype: torch.dtype, args) -> dict[str, Any]:
    """In-place ES writes reach torch.compile'd and CUDA-graph-replayed forwards, and restoring is bit-exact."""
    model = build_model(shape, device, dtype, args.vocab_size)
    weights = {name: p.data for name, p in model.named_parameters()}
    noise = make_noise_source("table", table_size=None, num_parameters=sum(t.numel() for t in weights.values()))
    centre = ESCentre(weights, noise)
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, args.vocab_size, (2, 16), generator=generator).to(device)
    eager = _logits_fn(model, input_ids)
    modes: dict[str, Any] = {}
    if device.type == "cuda":
        modes["torch_compile_inductor"] = dict(backend="inductor")
        modes["torch_compile_reduce_overhead"] = dict(backend="inductor", mode="reduce-overhead")
    else:
        # No C++ toolchain is assumed on the CPU: dynamo + AOTAutograd (where parameters become graph inputs).
        modes["torch_compile_aot_eager"] = dict(backend="aot_eager")
    result: dict[str, Any] = {}
    for name, options in modes.items():
        torch._dynamo.reset()
        try:
            compiled = _logits_fn(torch.compile(model, **options), input_ids)
            for _ in range(3):  # compile, then (reduce-overhead) record the CUDA graph
                compiled()
            result[name] = _lands_and_restores(centre, compiled, eager)
        except Exception as error:  # one mode's failure must not hide the others' results; it still fails the run
            centre.restore_()
            result[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
    torch._dynamo.reset()
    if device.type == "cuda":
        try:
            result["cuda_graph_capture"] = _lands_and_restores(centre, _captured_graph(model, input_ids), eager)
        except Exception as error:
            centre.restore_()
            result["cuda_graph_capture"] = {"error": f"{type(error).__name__}: {error}"[:500]}
    else:
        result["cuda_graph_capture"] = {"not_applicable": "needs CUDA"}
    return result


def _captured_graph(model, input_ids: torch.Tensor):
    """A forward captured once in a `torch.cuda.CUDAGraph` (as vLLM does); replays read the weights' memory."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(2):
            model(input_ids=input_ids, use_cache=False)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        output = model(input_ids=input_ids, use_cache=False).logits

    def replay() -> torch.Tensor:
        graph.replay()
        return output.float().clone()

    return replay


def check_placement_beside_vllm(model, device: torch.device, args) -> dict[str, Any]:
    """The master beside a simulated vLLM share: placed as planned, and within the plan's byte estimate."""
    weights = {name: p.data for name, p in model.named_parameters()}
    num_parameters = sum(t.numel() for t in weights.values())
    noise = make_noise_source("table", table_size=None, num_parameters=num_parameters)
    utilization = SIMULATED_VLLM_UTILIZATION
    if device.type != "cuda":
        # The pure plan with simulated memory: an 80 GiB device of which vLLM holds 55%.
        total = 80 << 30
        placement = plan_master_placement(
            "auto", "cuda:0", num_parameters, noise, int((1 - utilization) * total), total, utilization
        )
        return {
            "simulated_total_bytes": total,
            "placed_on_device_as_planned": placement.device.type == "cuda",
            "max_engine_utilization": placement.max_engine_utilization,
            "reason": placement.reason,
        }
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    # vLLM's share holds its weights (here: the model's) and its KV cache (here: a buffer).
    reserve = int(utilization * total) - torch.cuda.memory_allocated(device)
    if reserve <= 0 or reserve > free:
        return {"not_applicable": f"the model alone exceeds {utilization} of the device"}
    reservation = torch.empty(reserve, dtype=torch.uint8, device=device)
    try:
        free_beside, _ = torch.cuda.mem_get_info(device)
        expected = plan_master_placement(
            "auto", device, num_parameters, noise, free_beside, total, utilization, engine_weight_bytes=0
        )
        master_device = master_device_for("auto", weights, noise, engine_utilization=utilization)
        allocated = torch.cuda.memory_allocated(device)
        _reset_peak(device)
        centre = ESCentre(weights, noise, master_device=master_device)
        centre.perturb_(1, SIGMA)
        centre.update_(list(range(4)), [1e-6, -1e-6, 1e-6, -1e-6], 1.0)
        used = torch.cuda.max_memory_allocated(device) - allocated
        # The caching allocator may round each of the master's tensors up by < 1 MiB (an unsplit block tail).
        estimate = master_bytes_needed(num_parameters, noise) + len(weights) * (1 << 20)
        del centre
        return {
            "utilization": utilization,
            "free_beside_bytes": free_beside,
            "master_device": str(master_device),
            "placed_on_device_as_planned": master_device == expected.device and master_device.type == "cuda",
            "max_engine_utilization": expected.max_engine_utilization,
            "es_bytes_used": used,
            "es_bytes_estimated": estimate,
            "estimate_covers_actual": used <= estimate,
            "reason": expected.reason,
        }
    finally:
        del reservation
        torch.cuda.empty_cache()


def build_tokenizer(vocab_size: int):
    """A whitespace word-level tokenizer built in memory (no network): words `t0 .. t{n-1}` are token ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(min(vocab_size, 4096))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="t0", unk_token="t0", eos_token="t1")


def check_low_rank_vs_full_rank(model, args) -> dict[str, Any]:
    """ES steps per second: low-rank members in batched calls of at most `max_rows` rows vs full-rank one by one."""
    from hf_es.generation import SamplingConfig, TransformersGenerationBackend

    device = model.device
    tokenizer = build_tokenizer(args.vocab_size)
    generator = torch.Generator().manual_seed(2)
    prompts = [
        " ".join(f"t{int(i)}" for i in torch.randint(2, len(tokenizer), (args.prompt_length,), generator=generator))
        for _ in range(args.low_rank_batch_size)
    ]
    # EOS suppressed: every row generates exactly `new_tokens`, so both sides produce the same tokens.
    sampling = SamplingConfig(max_completion_length=max(4, args.new_tokens // 4), extra={"suppress_tokens": [1]})
    members = make_population(0, 0, args.low_rank_population_size, "antithetic")
    coefficients = [((-1) ** i) * 1e-6 for i in range(len(members))]
    backend = TransformersGenerationBackend(model, tokenizer, batch_size=args.max_rows)
    original = {name: p.data.clone() for name, p in model.named_parameters()}
    calls = []
    generate = model.generate

    def counted_generate(*call_args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return generate(*call_args, **kwargs)

    model.generate = counted_generate
    result: dict[str, Any] = {"population_size": len(members), "prompts": len(prompts), "max_rows": args.max_rows}
    noise = make_noise_source("table", table_size=None, num_parameters=sum(t.numel() for t in original.values()))
    try:
        for side in ("full", "low_rank"):
            backend.init_centre(noise, perturbation=side, rank=1)
            calls.clear()

            def step():
                results = list(backend.generate_members(members, prompts, sampling, SIGMA))
                backend.apply_update([m.seed for m in members], coefficients, 1.0)
                return results

            step()  # warm-up
            calls.clear()
            seconds = _timed(device, step, repeats=1)
            result[f"{side}_steps_per_s"] = 1 / seconds
            result[f"{side}_generate_calls"] = len(calls)
            result[f"{side}_largest_call_rows"] = max(calls)
    finally:
        model.generate = generate
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.data.copy_(original[name])
    rows = len(members) * len(prompts) * sampling.num_generations
    result["low_rank_speedup"] = result["low_rank_steps_per_s"] / result["full_steps_per_s"]
    result["rows_bounded"] = result["low_rank_largest_call_rows"] <= args.max_rows and result[
        "low_rank_generate_calls"
    ] == -(-rows // args.max_rows)
    return result


def _build_into(built: list, shape: dict[str, Any], device: torch.device, dtype: torch.dtype, vocab_size: int):
    built.append(build_model(shape, device, dtype, vocab_size))
    return {"num_parameters": sum(p.numel() for p in built[0].parameters()), "dtype": str(dtype)}


def _model_plan(tiny: bool) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """(name, shape, noise types) of each model checked, smallest first."""
    if tiny:
        return [("tiny", TINY_SHAPE, ("table", "gaussian"))]
    plan = [(name, shape, ("table", "gaussian")) for name, shape in MODEL_SHAPES.items()]
    return plan + [("qwen2.5-7b-shaped", SEVEN_B_SHAPE, ("table",))]


def _check_model(report: Report, entry: dict[str, Any], model, device: torch.device, noise_types, args) -> None:
    budget = args.time_budget_s
    inference = report.section(entry, "inference", budget, check_inference, model, device, args)
    for noise_type in noise_types:
        report.section(entry, f"exactness_{noise_type}", budget, check_exactness, model, noise_type, args)
        if inference is not None:
            report.section(
                entry, f"speed_memory_{noise_type}", budget, check_speed_and_memory, model, noise_type, inference, args
            )


def all_checks_pass(data: dict[str, Any]) -> bool:
    """No error (in a section or a sub-check), no section skipped for time, and no boolean check (see `PASS_KEYS`)
    False."""
    sections = [section for entry in data["models"].values() for section in entry.values()]
    sections += list(data["checks"].values())

    def values(section: Any):
        if isinstance(section, dict):
            for key, value in section.items():
                if isinstance(value, dict):
                    yield from values(value)
                elif key.startswith(PASS_KEYS):
                    yield value
                elif key == "error":  # a sub-check that raised (e.g. one compile mode)
                    yield False

    return (
        not data["errors"]
        and not any(isinstance(s, dict) and "skipped" in s for s in sections)
        and all(value is not False for section in sections for value in values(section))
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Runs every check, writing the JSON after each section; returns the report's data."""
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    report = Report(args.out, {k: v for k, v in vars(args).items() if k != "out"} | {"device": str(device)})
    report.data["checks"] = {}
    budget, dtype = args.time_budget_s, torch.bfloat16
    for position, (model_name, shape, noise_types) in enumerate(_model_plan(args.tiny)):
        entry: dict[str, Any] = {}
        report.data["models"][model_name] = entry
        built: list[torch.nn.Module] = []
        report.section(entry, "build", budget, _build_into, built, shape, device, dtype, args.vocab_size)
        if not built:
            continue
        model = built.pop()
        if shape is SEVEN_B_SHAPE or args.tiny:
            report.section(entry, "placement_beside_vllm", budget, check_placement_beside_vllm, model, device, args)
        _check_model(report, entry, model, device, noise_types, args)
        if position == 0:  # the smallest model: the compile / graph checks and the low-rank population
            checks = report.data["checks"]
            compile_shape = shape | dict(num_hidden_layers=2)
            report.section(
                checks, "inplace_compiled", budget, check_inplace_compiled, compile_shape, device, dtype, args
            )
            report.section(checks, "low_rank_vs_full_rank", budget, check_low_rank_vs_full_rank, model, args)
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
        budget,
        tp_shards.run,
        tp_shape,
        2,
        tp_layers,
        args.population_size,
        2,
        str(device),
    )
    report.data["all_checks_pass"] = all_checks_pass(report.data)
    report.flush()
    print(
        f"[{report.elapsed():7.1f} s] wrote {args.out}; all checks pass: {report.data['all_checks_pass']}", flush=True
    )
    return report.data


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="Tiny model on CPU (seconds); for the test suite.")
    parser.add_argument("--out", default=None, help="JSON path (default: bench/results/gpu-<date>.json).")
    parser.add_argument("--population_size", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--prompt_length", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--vocab_size", type=int, default=151936)
    parser.add_argument("--low_rank_population_size", type=int, default=8)
    parser.add_argument("--low_rank_batch_size", type=int, default=8, help="Prompts of the low-rank comparison.")
    parser.add_argument("--max_rows", type=int, default=32, help="Rows of one generate call (low-rank comparison).")
    parser.add_argument("--time_budget_s", type=float, default=420.0, help="Sections starting later are skipped.")
    args = parser.parse_args(argv)
    if args.tiny:
        args.population_size, args.batch_size, args.prompt_length, args.new_tokens = 4, 2, 8, 4
        args.vocab_size, args.low_rank_population_size, args.low_rank_batch_size, args.max_rows = 1000, 4, 2, 3
    if args.out is None:
        suffix = "-tiny" if args.tiny else ""
        args.out = os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "results", f"gpu{suffix}-{date.today()}.json"
        )
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the checks (see the module docstring) and returns the report's data."""
    return run(parse_args(argv))


def cli(argv: list[str] | None = None) -> int:
    """The command line: 0 when every check passes, 1 when one fails, 2 without CUDA and without `--tiny`."""
    args = parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        print("bench.gpu_check: no CUDA device; run with --tiny for the CPU self-test.", file=sys.stderr)
        return 2
    return 0 if run(args)["all_checks_pass"] else 1


if __name__ == "__main__":
    sys.exit(cli())

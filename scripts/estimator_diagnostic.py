"""Two-point (antithetic) estimator diagnostic (paper, section 5): kappa_pair = Var(R+ - R-) / Var(R+).

    python scripts/estimator_diagnostic.py                                   # bundled SmolLM2, arithmetic
    python scripts/estimator_diagnostic.py --model_name_or_path Qwen/Qwen2.5-1.5B-Instruct --dataset_name gsm8k \
        --num_prompts 64 --max_completion_length 512 --num_directions 128 --sigmas 1e-3 1e-4

For each sigma, `num_directions` seeded directions eps (laid out exactly as the ES trainer's antithetic population,
with the same noise source and perturbation code) are evaluated at theta + sigma*eps and theta - sigma*eps, and
kappa_pair is computed over directions for three scalar objectives:

- `rollouts_common`: mean verifier reward of freshly generated completions on a fixed set of prompts, with the *same*
  sampling seed at + and - (common random numbers, what `estimator="antithetic"` does);
- `rollouts_independent`: the same, with independent sampling seeds at + and -;
- `fixed_target`: mean per-token log-probability of fixed completions (sampled once from the centre), a smooth
  objective with no sampling noise.

kappa_pair < 1 means differencing cancels common noise (the two-point estimator helps); fully independent evaluations
give about 2; above 1 it adds variance. The paper measures 1.99 (common seed) and 2.78 (independent) on regenerated
GSM8K rollouts at sigma=1e-3, 0.82 at sigma=1e-4 with a common seed, and 0.0007-0.16 on fixed-target objectives.
The table is printed and written to `--output_json` with the per-direction values.

What the fixed-target number means depends on the batch protocol (`--batch_mode`). With one fixed batch for all
directions (`fixed`, the default), a smooth objective is locally linear at small sigma, so R- ~ 2 R(theta) - R+ and
kappa_pair ~ 4 (perfect anti-correlation). With a fresh mini-batch per direction (`per_direction`, as successive ES
steps see), batch-to-batch variation is common to R+ and R- and cancels in the difference, which is the regime where
fixed-target objectives give kappa_pair << 1.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from hf_es.cli import SimpleArgumentParser
from hf_es.es import make_population, stable_seed
from hf_es.prompts import prompt_texts

OBJECTIVES = ("rollouts_common", "rollouts_independent", "fixed_target")


class Perturbable(Protocol):
    """What the diagnostic moves: an [`~hf_es.es.ESCentre`] or a [`~hf_es.generation.GenerationBackend`]."""

    def perturb(self, seed: int, scale: float) -> None: ...

    def restore(self) -> None: ...


@dataclass
class KappaResult:
    """kappa_pair of one objective at one sigma.

    Attributes:
        objective: Objective name.
        sigma: Perturbation scale.
        kappa: Var(R+ - R-) / Var(R+) (unbiased variances over directions; NaN if Var(R+) is 0).
        var_plus: Var(R+).
        var_minus: Var(R-).
        var_diff: Var(R+ - R-).
        corr: Correlation of R+ and R- (kappa = (Var+ + Var- - 2 Cov) / Var+).
        num_directions: Number of directions.
        plus: R+ per direction.
        minus: R- per direction.
    """

    objective: str
    sigma: float
    kappa: float
    var_plus: float
    var_minus: float
    var_diff: float
    corr: float
    num_directions: int
    plus: list[float]
    minus: list[float]


def kappa_pair(plus: Sequence[float], minus: Sequence[float], objective: str = "", sigma: float = 0.0) -> KappaResult:
    """kappa_pair = Var(R+ - R-) / Var(R+) over directions.

    Args:
        plus: Objective at theta + sigma * eps_i, one value per direction.
        minus: Objective at theta - sigma * eps_i.
        objective: Name recorded in the result.
        sigma: Scale recorded in the result.

    Returns:
        The [`KappaResult`].
    """
    if len(plus) != len(minus) or len(plus) < 2:
        raise ValueError(f"Need >= 2 paired values, got {len(plus)} and {len(minus)}.")
    p = torch.tensor(list(plus), dtype=torch.float64)
    m = torch.tensor(list(minus), dtype=torch.float64)
    var_plus, var_minus, var_diff = float(p.var()), float(m.var()), float((p - m).var())
    covariance = float(((p - p.mean()) * (m - m.mean())).sum() / (len(p) - 1))
    denominator = math.sqrt(var_plus * var_minus)
    return KappaResult(
        objective=objective,
        sigma=sigma,
        kappa=var_diff / var_plus if var_plus > 0 else float("nan"),
        var_plus=var_plus,
        var_minus=var_minus,
        var_diff=var_diff,
        corr=covariance / denominator if denominator > 0 else float("nan"),
        num_directions=len(p),
        plus=p.tolist(),
        minus=m.tolist(),
    )


def measure_pairs(
    weights: Perturbable,
    objectives: dict[str, Callable[[int, int], float]],
    sigma: float,
    num_directions: int,
    noise_seed: int = 0,
    independent: Sequence[str] = ("rollouts_independent",),
) -> dict[str, KappaResult]:
    """Evaluates every objective at theta +/- sigma * eps for `num_directions` directions; returns kappa per objective.

    Directions and sampling seeds are those of the ES trainer's antithetic population
    (`make_population(noise_seed, 0, 2 * num_directions, "antithetic")`): both members of a pair share a sampling
    seed (common random numbers), except for the objectives in `independent`, whose `-` member gets its own seed.
    Each point is perturbed once and all objectives are evaluated there.

    Args:
        weights: What to perturb (`perturb(seed, scale)` / `restore()`).
        objectives: Name -> `f(sampling_seed, direction) -> float`, evaluated at the current (perturbed) weights
            (`direction` lets an objective pick the pair's mini-batch; the same function registered under two names
            is called once per point and seed).
        sigma: Perturbation scale.
        num_directions: Number of directions (pairs).
        noise_seed: Seed of the directions.
        independent: Objectives evaluated with independent sampling seeds at + and -.

    Returns:
        `{name: KappaResult}`.
    """
    members = make_population(noise_seed, 0, 2 * num_directions, "antithetic")
    values: dict[str, dict[float, list[float]]] = {name: {1.0: [], -1.0: []} for name in objectives}
    try:
        for member in members:
            weights.perturb(member.seed, member.sign * sigma)
            cache: dict[tuple[int, int], float] = {}
            for name, objective in objectives.items():
                seed = member.sampling_seed
                if name in independent and member.sign < 0:
                    seed = stable_seed(member.sampling_seed, "independent")
                key = (id(objective), seed)
                if key not in cache:
                    cache[key] = float(objective(seed, member.direction))
                values[name][member.sign].append(cache[key])
    finally:
        weights.restore()
    return {name: kappa_pair(v[1.0], v[-1.0], name, sigma) for name, v in values.items()}


def format_table(results: Sequence[KappaResult]) -> str:
    """The kappa table: one row per objective, one column per sigma."""
    sigmas = sorted({r.sigma for r in results}, reverse=True)
    names = list(dict.fromkeys(r.objective for r in results))
    lookup = {(r.objective, r.sigma): r for r in results}
    header = "| objective | " + " | ".join(f"sigma={s:g}" for s in sigmas) + " |"
    lines = [header, "|---|" + "---|" * len(sigmas)]
    for name in names:
        cells = []
        for sigma in sigmas:
            r = lookup.get((name, sigma))
            cells.append("" if r is None else f"{r.kappa:.3g} (corr {r.corr:+.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ real-model objectives


@torch.no_grad()
def mean_token_logprob(model: Any, tokenizer: Any, prompt_texts: list[str], completion_ids: list[list[int]]) -> float:
    """Mean log-probability per completion token of fixed completions under the model's current weights."""
    rows, masks = [], []
    for text, ids in zip(prompt_texts, completion_ids):
        prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        rows.append(prompt_ids + ids)
        masks.append([0] * len(prompt_ids) + [1] * len(ids))
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=model.device)
    target_mask = torch.tensor([[0] * (width - len(m)) + m for m in masks], device=model.device, dtype=torch.bool)
    attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=model.device)
    logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    mask = target_mask[:, 1:]
    return float(logprobs[mask].mean()) if bool(mask.any()) else 0.0


def build_model_objectives(
    args: argparse.Namespace,
) -> tuple[Any, dict[str, Callable[[int, int], float]], dict[str, Any]]:
    """Loads the model and task and returns `(backend, objectives, info)` for [`measure_pairs`]."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_es.es import make_noise_source
    from hf_es.generation import SamplingConfig, TransformersGenerationBackend
    from hf_es.models import resolve_model_name_or_path
    from hf_es.rewards import reward_functions
    from hf_es.tasks import TaskArguments, load_task

    path = resolve_model_name_or_path(args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, args.dtype)).eval()
    pool_size = args.num_prompts * (args.pool_factor if args.batch_mode == "per_direction" else 1)
    task = TaskArguments(
        dataset_name=args.dataset_name,
        dataset_test_split=None,
        num_train_samples=pool_size,
        reward_funcs=args.reward_funcs,
    )
    dataset, _ = load_task(task, seed=args.seed)
    dataset = dataset.select(range(min(pool_size, len(dataset))))
    examples = [dataset[i] for i in range(len(dataset))]
    prompts = [example["prompt"] for example in examples]
    texts = prompt_texts(prompts, tokenizer)
    columns = {key: [e[key] for e in examples] for key in examples[0] if key != "prompt"}
    funcs = reward_functions(args.reward_funcs)
    sampling = SamplingConfig(max_completion_length=args.max_completion_length, temperature=args.temperature)
    backend = TransformersGenerationBackend(model, tokenizer)
    backend.init_centre(make_noise_source(args.noise_type))

    def batch(direction: int | None) -> list[int]:
        """The pair's mini-batch: all prompts, or `num_prompts` drawn from the pool for this direction."""
        if direction is None or args.batch_mode == "fixed":
            return list(range(min(args.num_prompts, len(texts))))
        generator = torch.Generator().manual_seed(stable_seed(args.noise_seed, direction, "batch"))
        return torch.randperm(len(texts), generator=generator)[: args.num_prompts].tolist()

    def rollout_reward(seed: int, direction: int | None = None) -> float:
        rows = batch(direction)
        result = backend.generate([texts[i] for i in rows], sampling, seed=seed)
        total = torch.zeros(len(rows), dtype=torch.float64)
        for func in funcs:
            values = func(
                prompts=[prompts[i] for i in rows],
                completions=result.completions,
                completion_ids=result.completion_ids,
                **{key: [column[i] for i in rows] for key, column in columns.items()},
            )
            total += torch.tensor([0.0 if v is None else float(v) for v in values], dtype=torch.float64)
        return float(total.mean())

    # Fixed targets: completions sampled once from the centre for every prompt of the pool.
    target = backend.generate(texts, sampling, seed=stable_seed(args.noise_seed, "fixed-target"))
    target_ids = [ids if ids else [tokenizer.eos_token_id] for ids in target.completion_ids]

    def fixed_target(seed: int, direction: int | None = None) -> float:
        rows = batch(direction)
        return mean_token_logprob(model, tokenizer, [texts[i] for i in rows], [target_ids[i] for i in rows])

    objectives = {
        "rollouts_common": rollout_reward,
        "rollouts_independent": rollout_reward,
        "fixed_target": fixed_target,
    }
    objectives = {name: f for name, f in objectives.items() if name in args.objectives}
    info = {
        "model": args.model_name_or_path,
        "dataset": args.dataset_name,
        "num_prompts": args.num_prompts,
        "pool_size": len(texts),
        "batch_mode": args.batch_mode,
        "centre_reward": rollout_reward(stable_seed(args.noise_seed, "centre")),
        "centre_fixed_target_logprob": fixed_target(0),
    }
    return backend, objectives, info


def main(argv: list[str] | None = None) -> list[KappaResult]:
    parser = SimpleArgumentParser(description=__doc__)
    parser.add_argument("--model_name_or_path", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--dtype", default="float32", help="float32 keeps sigma=1e-4 perturbations representable.")
    parser.add_argument("--dataset_name", default="arithmetic")
    parser.add_argument("--reward_funcs", nargs="+", default=["accuracy"])
    parser.add_argument("--num_prompts", type=int, default=16)
    parser.add_argument("--max_completion_length", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=0.6, help="Rollout temperature (must be > 0).")
    parser.add_argument("--sigmas", type=float, nargs="+", default=[1e-3, 1e-4])
    parser.add_argument("--num_directions", type=int, default=32)
    parser.add_argument(
        "--batch_mode",
        default="fixed",
        choices=["fixed", "per_direction"],
        help="'fixed': every direction sees the same prompts (only weights and sampling vary); 'per_direction': "
        "each pair gets its own mini-batch from a pool of num_prompts x pool_factor prompts (as successive ES "
        "steps do), so batch-to-batch variation is common to R+ and R-.",
    )
    parser.add_argument("--pool_factor", type=int, default=8)
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    parser.add_argument("--noise_seed", type=int, default=0)
    parser.add_argument("--noise_type", default="table", choices=["table", "gaussian"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args(argv)
    if args.temperature <= 0:
        parser.error("--temperature must be > 0: with greedy decoding sampling seeds play no role.")

    start = time.perf_counter()
    backend, objectives, info = build_model_objectives(args)
    results: list[KappaResult] = []
    for sigma in args.sigmas:
        measured = measure_pairs(backend, objectives, sigma, args.num_directions, noise_seed=args.noise_seed)
        results += list(measured.values())
        print(f"[diagnostic] sigma={sigma:g}: " + ", ".join(f"{k}={v.kappa:.3g}" for k, v in measured.items()))
    table = format_table(results)
    print(
        f"\nkappa_pair = Var(R+ - R-) / Var(R+) over {args.num_directions} directions "
        f"({info['model']}, {info['dataset']}, {info['num_prompts']} prompts ({args.batch_mode} batch), "
        f"temperature {args.temperature:g}, "
        f"{args.max_completion_length} new tokens)\n"
    )
    print(table)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(
                {
                    "settings": vars(args),
                    "info": info,
                    "wall_time_s": time.perf_counter() - start,
                    "table": table,
                    "results": [r.__dict__ for r in results],
                },
                f,
                indent=2,
            )
    return results


if __name__ == "__main__":
    main()

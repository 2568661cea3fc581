"""Token entropy of a policy on its own completions: the quantity whose collapse under GRPO the paper contrasts with
ES. Exact with a transformers model (one teacher-forced forward pass over prompt + completion, whichever engine
sampled the completion); an engine that returns only its top-k log-probabilities (vLLM) gives a lower bound
([`top_k_entropy_lower_bound`])."""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["EntropySums", "kv_cache_keyword", "token_entropy_sums", "top_k_entropy_lower_bound"]


def kv_cache_keyword(model: torch.nn.Module) -> str:
    """The name of the KV cache in `model`'s forward arguments and outputs: `cache` in the transformers 5.x releases
    that renamed it, `past_key_values` in earlier ones (both are inside hf_es's `transformers>=5,<6` pin)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@dataclass(frozen=True)
class EntropySums:
    """Next-token entropy summed over completion tokens (sums, so that batches and processes add up).

    Attributes:
        total: Summed entropy (nats).
        tokens: Completion tokens it sums over; the mean per-token entropy is `total / tokens`.
        top_k: `None` when exact; else each position's entropy is the lower bound from the engine's `top_k` most
            likely tokens ([`top_k_entropy_lower_bound`]).
    """

    total: float
    tokens: int
    top_k: int | None = None

    def __add__(self, other: EntropySums) -> EntropySums:
        if self.top_k != other.top_k:
            raise ValueError(f"Cannot add entropies measured with top_k={self.top_k} and top_k={other.top_k}.")
        return EntropySums(self.total + other.total, self.tokens + other.tokens, self.top_k)

    @property
    def mean(self) -> float:
        """Nats per token (NaN without tokens)."""
        return self.total / self.tokens if self.tokens else float("nan")


def top_k_entropy_lower_bound(logprobs: Iterable[float]) -> float:
    """A lower bound on a distribution's entropy (nats) from the log-probabilities of some of its tokens.

    `-sum_{v in S} q(v) ln q(v) - r ln r`, with `r = 1 - sum_{v in S} q(v)` the mass outside `S`: every token outside
    has `q(v) <= r`, so its term `-q(v) ln q(v) >= -q(v) ln r`, and those terms add up to at least `-r ln r`. The bound
    is exact when `S` holds every token with non-zero probability, and tight when the rest is one token.

    Args:
        logprobs: Natural-log probabilities of distinct tokens (e.g. an engine's top-k).
    """
    known = [math.exp(value) for value in logprobs if value > -math.inf]
    entropy = -sum(q * math.log(q) for q in known if q > 0)
    rest = 1.0 - sum(known)
    return entropy - rest * math.log(rest) if rest > 1e-12 else entropy


@torch.no_grad()
def token_entropy_sums(
    model: torch.nn.Module,
    tokenizer: object,
    prompts: Sequence[str],
    completion_ids: Sequence[Sequence[int]],
    *,
    num_generations: int = 1,
    batch_size: int | None = None,
) -> EntropySums:
    """Summed entropy of the model's next-token distribution at every completion token, and the number of tokens.

    At each position that produced a completion token, the entropy `-sum_v q(v) ln q(v)` (nats) of
    `q = softmax(logits)`: the policy itself at temperature 1, before any sampling modifier (temperature, top-k/p),
    so greedy and sampled evaluations measure the same distribution. The mean per-token entropy is the first value
    over the second; sums are returned so that processes can add them.

    Args:
        model: The causal LM whose policy is measured (the weights that generated, e.g. the ES centre).
        tokenizer: Its tokenizer; prompts are encoded as the generation backends encode them (no special tokens).
        prompts: Prompt texts (chat template applied).
        completion_ids: Completion token ids, `num_generations` consecutive entries per prompt, without EOS.
        num_generations: Completions per prompt.
        batch_size: Sequences per forward pass (`None`: all at once).

    Returns:
        [`EntropySums`] (exact: `top_k` is `None`).
    """
    prompt_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()  # no dropout: the policy that generated
    sums = EntropySums(0.0, 0)
    if num_generations > 1:
        # M samples per prompt: the prompt's KV once per prompt, then only its completions (as generation shares it)
        for index, prompt in enumerate(prompt_ids):
            rows = completion_ids[index * num_generations : (index + 1) * num_generations]
            sums += _shared_prompt_entropy(model, prompt, [list(ids) for ids in rows if ids], batch_size, device)
    else:
        rows = [(prompt_ids[i], list(ids)) for i, ids in enumerate(completion_ids) if ids]
        sums = _unshared_entropy(model, rows, batch_size, device)
    model.train(was_training)
    return sums


def _entropy_sum(logits: torch.Tensor) -> float:
    log_q = torch.log_softmax(logits.float(), dim=-1)
    return float(-(log_q.exp() * log_q).sum())


def _right_padded_logits(model: torch.nn.Module, sequences: list[list[int]], device: Any, cache: Any = None) -> Any:
    """Logits of right-padded `sequences` (after `cache`, the KV of a shared prefix, when given)."""
    # Right padding: real tokens keep their positions and, under the causal mask, never see the padding.
    width = max(len(sequence) for sequence in sequences)
    past = cache.get_seq_length() if cache is not None else 0
    input_ids = torch.zeros(len(sequences), width, dtype=torch.long)
    attention_mask = torch.zeros(len(sequences), past + width, dtype=torch.long)
    attention_mask[:, :past] = 1
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        attention_mask[row, past : past + len(sequence)] = 1
    kwargs = {kv_cache_keyword(model): cache, "use_cache": True} if cache is not None else {}
    return model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **kwargs).logits


def _unshared_entropy(
    model: torch.nn.Module, rows: list[tuple[list[int], list[int]]], batch_size: int | None, device: Any
) -> EntropySums:
    """Summed entropy over `(prompt, completion)` rows, each sequence computed whole."""
    total, count = 0.0, 0
    step = batch_size or max(len(rows), 1)
    for start in range(0, len(rows), step):
        batch = rows[start : start + step]
        logits = _right_padded_logits(model, [prompt + completion for prompt, completion in batch], device)
        for row, (prompt, completion) in enumerate(batch):
            # logits at position t predict token t + 1: the completion's tokens come from positions len(prompt) - 1 ...
            total += _entropy_sum(logits[row, len(prompt) - 1 : len(prompt) - 1 + len(completion)])
            count += len(completion)
    return EntropySums(total, count)


def _shared_prompt_entropy(
    model: torch.nn.Module, prompt: list[int], completions: list[list[int]], batch_size: int | None, device: Any
) -> EntropySums:
    """Summed entropy over the completions of one prompt, its KV computed once (all but its last token)."""
    prefix = None
    if completions and len(prompt) >= 2:
        output = model(input_ids=torch.tensor([prompt[:-1]], device=device), use_cache=True)
        prefix = getattr(output, kv_cache_keyword(model))
    if prefix is None or not hasattr(prefix, "batch_repeat_interleave"):  # nothing to share, or a cache that can't
        return _unshared_entropy(model, [(prompt, completion) for completion in completions], batch_size, device)
    total, count = 0.0, 0
    step = batch_size or len(completions)
    for start in range(0, len(completions), step):
        batch = completions[start : start + step]
        cache = copy.deepcopy(prefix)
        cache.batch_repeat_interleave(len(batch))
        # the last prompt token then the completion: position j predicts completion token j
        logits = _right_padded_logits(model, [[prompt[-1]] + completion for completion in batch], device, cache)
        for row, completion in enumerate(batch):
            total += _entropy_sum(logits[row, : len(completion)])
            count += len(completion)
    return EntropySums(total, count)

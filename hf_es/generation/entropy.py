"""Token entropy of a policy on its own completions: the quantity whose collapse under GRPO the paper contrasts with
ES. Exact with a transformers model (one teacher-forced forward pass over prompt + completion, whichever engine
sampled the completion); an engine that returns only its top-k log-probabilities (vLLM) gives a lower bound
([`top_k_entropy_lower_bound`])."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["EntropySums", "token_entropy_sums", "top_k_entropy_lower_bound"]


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
    rows = [(prompt_ids[i // num_generations], list(ids)) for i, ids in enumerate(completion_ids) if ids]
    total, count = 0.0, 0
    step = batch_size or max(len(rows), 1)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()  # no dropout: the policy that generated
    for start in range(0, len(rows), step):
        batch = rows[start : start + step]
        sequences = [prompt + completion for prompt, completion in batch]
        width = max(len(sequence) for sequence in sequences)
        # Right padding: real tokens keep positions 0..n-1 and, under the causal mask, never see the padding.
        input_ids = torch.zeros(len(batch), width, dtype=torch.long)
        attention_mask = torch.zeros(len(batch), width, dtype=torch.long)
        for row, sequence in enumerate(sequences):
            input_ids[row, : len(sequence)] = torch.tensor(sequence)
            attention_mask[row, : len(sequence)] = 1
        logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits.float()
        for row, (prompt, completion) in enumerate(batch):
            # logits at position t predict token t + 1: the completion's tokens come from positions len(prompt) - 1 ...
            scores = logits[row, len(prompt) - 1 : len(prompt) - 1 + len(completion)]
            log_q = torch.log_softmax(scores, dim=-1)
            total += float(-(log_q.exp() * log_q).sum())
            count += len(completion)
    model.train(was_training)
    return EntropySums(total, count)

"""The generation interface every engine adapter implements.

A backend owns the weights it generates with. The trainer only asks it to move those weights (perturb to a member,
restore the centre, apply an update) and to generate; how the weights are reached (an HF module, a vLLM engine's fused
tensors, a remote worker) is the backend's business. The default weight operations run the pure ES math of
[`hf_es.es.ESCentre`] over the tensors returned by [`GenerationBackend.live_weights`].
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

from ..es import ESCentre, Member, NoiseSource, make_centre
from .entropy import EntropySums

__all__ = ["GenerationBackend", "GenerationResult", "PhaseTimer", "SamplingConfig", "untimed"]

PhaseTimer = Callable[[str], AbstractContextManager[Any]]
"""Times a phase of the member loop: `with timer("generate"): ...`."""


def untimed(phase: str) -> AbstractContextManager[None]:
    """The [`PhaseTimer`] that times nothing."""
    return contextlib.nullcontext()


@dataclass
class SamplingConfig:
    """How to sample completions (the generation fields of `ESConfig`).

    Attributes:
        max_completion_length: Maximum number of new tokens.
        temperature: 0 means greedy decoding.
        top_p: Nucleus mass.
        top_k: 0 disables top-k.
        min_p: Minimum probability relative to the most likely token.
        repetition_penalty: 1.0 disables it.
        num_generations: Completions per prompt.
        extra: Backend-specific keyword arguments (`generation_kwargs`).
    """

    max_completion_length: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float | None = None
    repetition_penalty: float = 1.0
    num_generations: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_args(cls, args: Any) -> SamplingConfig:
        """Reads the generation fields of an `ESConfig` (or any object with the same attributes)."""
        return cls(
            max_completion_length=args.max_completion_length,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            min_p=args.min_p,
            repetition_penalty=args.repetition_penalty,
            num_generations=args.num_generations,
            extra=dict(args.generation_kwargs or {}),
        )


@dataclass
class GenerationResult:
    """Completions for a list of prompts, `num_generations` consecutive entries per prompt.

    Attributes:
        completion_ids: Generated token ids, without padding and without the final EOS token.
        completions: Decoded completions (special tokens removed).
        truncated: Whether each completion stopped at `max_completion_length` instead of at EOS.
    """

    completion_ids: list[list[int]]
    completions: list[str]
    truncated: list[bool]

    @property
    def num_tokens(self) -> int:
        return sum(len(ids) for ids in self.completion_ids)


class GenerationBackend(ABC):
    """Generates completions with weights that ES can move in place.

    Subclasses implement [`generate`] and [`live_weights`]; engines that cannot expose their weights as tensors in
    this process (e.g. a vLLM engine in a worker process) override the weight operations instead.
    """

    centre: ESCentre | None = None

    @abstractmethod
    def generate(self, prompts: list[str], sampling: SamplingConfig, seed: int | None = None) -> GenerationResult:
        """Generates `sampling.num_generations` completions for each prompt with the current weights.

        Args:
            prompts: Prompt texts, chat template already applied.
            sampling: How to sample.
            seed: Seed of the sampler (ignored by greedy decoding), so that results do not depend on which
                process evaluates a member.

        Returns:
            The [`GenerationResult`], prompt-major.
        """

    @abstractmethod
    def live_weights(self) -> dict[str, torch.Tensor]:
        """The tensors generation reads, keyed by Hugging Face parameter name, tied weights once."""

    def max_context_length(self) -> int | None:
        """Longest prompt + completion the engine accepts, if known."""
        return None

    def completion_entropy(
        self, prompts: list[str], completion_ids: list[list[int]], num_generations: int = 1
    ) -> EntropySums | None:
        """Next-token entropy of the current weights at every completion token (`q = softmax(logits)` at temperature
        1, before sampling modifiers), summed.

        Args:
            prompts: The prompt texts the completions answer.
            completion_ids: [`GenerationResult.completion_ids`], `num_generations` consecutive entries per prompt.
            num_generations: Completions per prompt.

        Returns:
            [`~hf_es.generation.entropy.EntropySums`], or `None` when the engine cannot tell (this default).
        """
        return None

    def init_centre(
        self,
        noise: NoiseSource,
        master_device: torch.device | str | None = None,
        perturbation: str = "full",
        rank: int = 1,
        non_matrix_noise: str = "full",
    ) -> ESCentre:
        """Snapshots the current weights as the ES centre (fp32 master copy) of the named perturbation.

        Args:
            noise: The run's noise source.
            master_device: Device of the fp32 master (see [`hf_es.es.ESCentre`]).
            perturbation: A key of [`hf_es.es.PERTURBATIONS`] (`ESConfig.perturbation`).
            rank: r of low-rank directions (`perturbation_rank`).
            non_matrix_noise: Low-rank directions on non-matrix parameters (`low_rank_non_matrix_noise`).

        Returns:
            The centre, also kept as `self.centre`.
        """
        self.centre = make_centre(
            perturbation,
            self.live_weights(),
            noise,
            master_device=master_device,
            rank=rank,
            non_matrix_noise=non_matrix_noise,
        )
        return self.centre

    def generate_members(
        self,
        members: list[Member],
        prompts: list[str],
        sampling: SamplingConfig,
        sigma: float,
        timer: PhaseTimer | None = None,
    ) -> Generator[GenerationResult, None, None]:
        """Generates the completions of several population members, each for every prompt, member after member.

        The default writes each member into the weights in turn (`perturb`, then `generate` with the member's
        sampling seed) and yields its result before moving to the next, so the caller can score a member while the
        weights still hold it; the centre is restored when the generator finishes or is closed. Engines that can
        evaluate members side by side override it.

        Args:
            members: The members to evaluate (member k sits at `centre + members[k].sign * sigma * eps`).
            prompts: Prompt texts, chat template already applied.
            sampling: How to sample.
            sigma: The perturbation scale.
            timer: Called with a phase name (`"perturb_restore"`, `"generate"`), returns a context manager that
                times the block (e.g. the trainer's `StepTimer`); `None` times nothing.

        Returns:
            A generator of one [`GenerationResult`] per member, in the order of `members`; close it (or run it to
            the end) to restore the centre.
        """
        timer = timer or untimed
        try:
            for member in members:
                with timer("perturb_restore"):
                    self.perturb(member.seed, member.sign * sigma)
                with timer("generate"):
                    result = self.generate(prompts, sampling, seed=member.sampling_seed)
                yield result
        finally:
            with timer("perturb_restore"):
                self.restore()

    def _require_centre(self) -> ESCentre:
        if self.centre is None:
            raise RuntimeError("Call init_centre() before moving the weights.")
        return self.centre

    def load_centre(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replaces the centre with fp32 master weights (e.g. from a checkpoint) and writes them into the engine.

        Engines that keep another copy of the weights (e.g. the HF model beside a vLLM engine) refresh it too.
        """
        self._require_centre().load_state_dict(state_dict)

    def sync_mirror(self) -> None:
        """Makes any copy of the weights the engine keeps beside them (e.g. the HF model beside a vLLM engine) equal
        the centre; called before that copy is read (saving, model cards, the end of training). Engines that generate
        with the HF model itself have nothing to do."""
        return None

    def perturb(self, seed: int, scale: float) -> None:
        """Sets the weights to `centre + scale * eps(seed)`."""
        self._require_centre().perturb_(seed, scale)

    def restore(self) -> None:
        """Sets the weights back to the exact centre."""
        self._require_centre().restore_()

    def apply_update(self, seeds: list[int], coefficients: list[float], learning_rate: float) -> float:
        """Moves the centre by `learning_rate * sum_j coefficients[j] * eps(seeds[j])`; returns the update norm."""
        return self._require_centre().update_(seeds, coefficients, learning_rate)

    def prompt_logits(self, prompts: list[str]) -> torch.Tensor:
        """Next-token logits after each prompt with the current weights, as generation would compute them.

        Used by the start-up check that perturbations reach the computation (see `hf_es.trainer.probe`): the values
        must come from the same weights and execution mode as [`generate`], and be deterministic for fixed weights.

        Args:
            prompts: Prompt texts, chat template already applied.

        Returns:
            A float32 host tensor of shape `(len(prompts), vocab_size)`.

        Raises:
            NotImplementedError: The engine cannot return logits.
        """
        raise NotImplementedError(f"{type(self).__name__} does not return prompt logits.")

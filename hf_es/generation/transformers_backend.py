"""Generation with transformers' `generate` (the CPU and fallback path)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Generator
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

from ..es import LowRankCentre, Member, stable_seed
from .base import GenerationBackend, GenerationResult, PhaseTimer, SamplingConfig, untimed
from .entropy import EntropySums, kv_cache_keyword, token_entropy_sums
from .low_rank import LowRankMemberHooks, PerRowSampler

__all__ = ["TransformersGenerationBackend", "refuse_quantized_weights", "rows_that_fit"]

PLAIN_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def refuse_quantized_weights(parameters: dict[str, torch.Tensor], quantization_config: Any = None) -> None:
    """Stops before any perturbation when a model is quantized (fp8, AWQ, GPTQ, bitsandbytes, torchao, ...).

    ES adds Gaussian noise to plain floating-point weights; packed integers, fp8 values with scales or tensor
    subclasses would neither move as the method assumes nor restore exactly.

    Args:
        parameters: Parameters by name (e.g. `dict(model.named_parameters())`).
        quantization_config: The model config's `quantization_config`, if any.

    Raises:
        ValueError: Naming the first parameter that is not a plain bf16/fp16/fp32 tensor, or the quantization method.
    """
    for name, param in parameters.items():
        data = param.data if isinstance(param, torch.nn.Parameter) else param
        if data.dtype not in PLAIN_DTYPES or type(data) is not torch.Tensor:
            raise ValueError(
                f"Layer {name!r} holds quantized weights ({type(param).__name__}, dtype {data.dtype}); ES perturbs "
                "plain floating-point weights only. Load an unquantized (bf16/fp16/fp32) checkpoint."
            )
    if quantization_config is not None:
        method = getattr(quantization_config, "quant_method", None)
        if method is None and isinstance(quantization_config, dict):
            method = quantization_config.get("quant_method")
        raise ValueError(
            f"The model is quantized (quantization_config with quant_method={method!r}); ES perturbs plain "
            "floating-point weights only. Load an unquantized (bf16/fp16/fp32) checkpoint."
        )


# Share of the accelerator's free memory that one generate call may fill; the rest absorbs what the estimate leaves
# out (allocator fragmentation, the sampler's temporaries, attention workspaces).
GENERATION_MEMORY_FRACTION = 0.8


def rows_that_fit(config: Any, sequence_length: int, free_bytes: int, dtype: torch.dtype) -> int:
    """How many sequences of `sequence_length` tokens one `generate` call can hold in `free_bytes`.

    Counts per row the KV cache of every layer, the prefill's widest activations (one layer at a time) and the
    float32 logits of a step, at [`GENERATION_MEMORY_FRACTION`] of the free memory.

    Args:
        config: The model's `PretrainedConfig` (layers, heads, hidden and intermediate sizes, vocabulary).
        sequence_length: Longest prompt plus the most new tokens.
        free_bytes: Free accelerator memory.
        dtype: The model's dtype.

    Returns:
        At least 1.
    """
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    width = dtype.itemsize
    kv_cache = 2 * config.num_hidden_layers * kv_heads * head_dim * sequence_length * width
    intermediate = getattr(config, "intermediate_size", None) or 4 * config.hidden_size
    prefill = sequence_length * (3 * intermediate + 4 * config.hidden_size) * width
    logits = 2 * config.vocab_size * 4
    return max(1, int(free_bytes * GENERATION_MEMORY_FRACTION) // (kv_cache + prefill + logits))


class TransformersGenerationBackend(GenerationBackend):
    """Batched, left-padded `model.generate`, stopping at EOS, over an HF model whose weights ES moves in place.

    Args:
        model: The causal LM (its parameters are perturbed in place).
        tokenizer: Its tokenizer; a missing pad token falls back to EOS.
        batch_size: Largest number of sequences (rows: members x prompts x completions) generated in one call.
            `None`: every row in one call; `"auto"`: as many as fit in the accelerator's free memory at each call
            ([`rows_that_fit`]), every row in one call on the CPU. Greedy results and low-rank sampled rows (seeded
            per row) do not depend on it; full-rank sampled completions come from one stream seeded per `generate`
            call, so their draws follow the split.
    """

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int | str | None = None
    ):
        if batch_size is not None and batch_size != "auto" and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer, 'auto' or None, got {batch_size!r}.")
        refuse_quantized_weights(dict(model.named_parameters()), getattr(model.config, "quantization_config", None))
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [eos])

    def live_weights(self) -> dict[str, torch.Tensor]:
        # named_parameters() yields tied weights (embeddings / LM head) once. Only trainable parameters evolve: a PEFT
        # adapter, or the `es_target_modules` selection (see hf_es.trainer.adapters).
        return {name: param.data for name, param in self.model.named_parameters() if param.requires_grad}

    def completion_entropy(
        self, prompts: list[str], completion_ids: list[list[int]], num_generations: int = 1
    ) -> EntropySums:
        """Exact (one teacher-forced forward pass, [`~hf_es.generation.entropy.token_entropy_sums`])."""
        return token_entropy_sums(self.model, self.tokenizer, prompts, completion_ids, num_generations=num_generations)

    def max_context_length(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)

    def _generation_config(self, sampling: SamplingConfig) -> GenerationConfig:
        kwargs = dict(
            max_new_tokens=sampling.max_completion_length,
            pad_token_id=self.pad_token_id,
            eos_token_id=sorted(self.eos_token_ids),
            repetition_penalty=sampling.repetition_penalty,
        )
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(
                do_sample=True,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                min_p=sampling.min_p,
            )
        kwargs.update(sampling.extra)
        return GenerationConfig(**kwargs)

    def _rows_per_call(self, texts: list[str], sampling: SamplingConfig, num_rows: int) -> int:
        """The rows of one `generate` call: `batch_size`, or what fits the free accelerator memory with `"auto"`."""
        if self.batch_size != "auto":
            return self.batch_size or num_rows
        device = self.model.device
        if device.type != "cuda" or not num_rows:
            return num_rows
        lengths = self.tokenizer(sorted(set(texts)), add_special_tokens=False)["input_ids"]
        sequence_length = max(len(ids) for ids in lengths) + sampling.max_completion_length
        free_bytes, _ = torch.cuda.mem_get_info(device)
        return min(num_rows, rows_that_fit(self.model.config, sequence_length, free_bytes, self.model.dtype))

    @torch.no_grad()
    def generate(self, prompts: list[str], sampling: SamplingConfig, seed: int | None = None) -> GenerationResult:
        generation_config = self._generation_config(sampling)
        expanded = [prompt for prompt in prompts for _ in range(sampling.num_generations)]
        batch_size = self._rows_per_call(prompts, sampling, len(expanded))
        if seed is not None and not sampling.greedy:
            torch.manual_seed(seed)
        completion_ids, truncated = [], []
        prefix = self._shared_prompt_cache(prompts[0]) if len(prompts) == 1 and sampling.num_generations > 1 else None
        for start in range(0, len(expanded), batch_size):
            texts = expanded[start : start + batch_size]
            ids, stopped = self._generate_batch(texts, generation_config, prompt_cache=prefix)
            completion_ids += ids
            truncated += stopped
        return self._result(completion_ids, truncated)

    @torch.no_grad()
    def _shared_prompt_cache(self, prompt: str) -> Any:
        """The KV cache of `prompt` minus its last token, computed once for all of its rows (Pass@K draws M samples
        of one prompt per call: without it, `generate` recomputes the same prompt M times). `None` where the model's
        cache cannot be repeated over rows or the prompt is a single token."""
        ids = self.tokenizer([prompt], return_tensors="pt", add_special_tokens=False)["input_ids"]
        if ids.shape[1] < 2:
            return None
        was_training = self.model.training
        self.model.eval()
        output = self.model(input_ids=ids[:, :-1].to(self.model.device), use_cache=True)
        self.model.train(was_training)
        cache = getattr(output, kv_cache_keyword(self.model))
        return cache if hasattr(cache, "batch_repeat_interleave") else None

    def _result(self, completion_ids: list[list[int]], truncated: list[bool]) -> GenerationResult:
        completions = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        return GenerationResult(completion_ids=completion_ids, completions=completions, truncated=truncated)

    def _generate_batch(
        self,
        texts: list[str],
        generation_config: GenerationConfig,
        logits_processor: LogitsProcessorList | None = None,
        prompt_cache: Any = None,
    ) -> tuple[list[list[int]], list[bool]]:
        """One left-padded `generate` call; returns the completion ids cut at EOS and whether each was truncated.

        `prompt_cache`: [`_shared_prompt_cache`] of the one prompt every row of `texts` holds (no padding then), or
        `None`.
        """
        was_training = self.model.training
        self.model.eval()
        encoded = self.tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        ).to(self.model.device)
        extra: dict[str, Any] = {}
        if prompt_cache is not None:
            # generate() extends the cache it is given: each call starts from its own copy, repeated over the rows
            cache = copy.deepcopy(prompt_cache)
            cache.batch_repeat_interleave(len(texts))
            extra[kv_cache_keyword(self.model)] = cache
        output = self.model.generate(
            **encoded, generation_config=generation_config, logits_processor=logits_processor, **extra
        )
        self.model.train(was_training)
        completion_ids, truncated = [], []
        for row in output[:, encoded["input_ids"].shape[1] :].tolist():
            ids, stopped = [], False
            for token in row:
                if token in self.eos_token_ids:
                    stopped = True
                    break
                ids.append(token)
            completion_ids.append(ids)
            truncated.append(not stopped)
        return completion_ids, truncated

    def generate_members(
        self,
        members: list[Member],
        prompts: list[str],
        sampling: SamplingConfig,
        sigma: float,
        timer: PhaseTimer | None = None,
    ) -> Generator[GenerationResult, None, None]:
        """With a [`LowRankCentre`], every member's completions come from one batched `generate` call.

        Rows are member-major (member k's prompts, each `num_generations` times, then member k+1's); forward hooks
        give each row its member's low-rank perturbation (see [`LowRankMemberHooks`]), so the weights are never
        written. `batch_size`, when set, splits the rows into several calls. When sampling, row `j` of member k
        draws from its own generator seeded by `(member.sampling_seed, j)` ([`PerRowSampler`]): independent of the
        other rows, and shared by the two members of an antithetic pair (common random numbers). Its samples
        therefore differ from those of `generate(..., seed=member.sampling_seed)`, which seeds one global stream.
        Full-rank centres use the member-by-member loop of [`GenerationBackend.generate_members`].
        """
        if not isinstance(self._require_centre(), LowRankCentre):
            yield from super().generate_members(members, prompts, sampling, sigma, timer)
            return
        with (timer or untimed)("generate"):
            results = self._generate_low_rank_members(members, prompts, sampling, sigma)
        yield from results

    @torch.no_grad()
    def _generate_low_rank_members(
        self, members: list[Member], prompts: list[str], sampling: SamplingConfig, sigma: float
    ) -> list[GenerationResult]:
        centre = self._require_centre()
        expanded = [prompt for prompt in prompts for _ in range(sampling.num_generations)]
        rows = [(position, j) for position in range(len(members)) for j in range(len(expanded))]
        generation_config = self._generation_config(dataclasses.replace(sampling, temperature=0.0))
        batch_size = self._rows_per_call(prompts, sampling, len(rows))
        completion_ids, truncated = [], []
        hooks = LowRankMemberHooks(self.model, centre, [m.seed for m in members], [m.sign * sigma for m in members])
        with hooks:
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                hooks.select_rows([position for position, _ in chunk])
                sampler = None
                if not sampling.greedy:
                    seeds = [stable_seed(members[position].sampling_seed, j) for position, j in chunk]
                    sampler = LogitsProcessorList([PerRowSampler(sampling, seeds, self.model.device)])
                ids, stopped = self._generate_batch([expanded[j] for _, j in chunk], generation_config, sampler)
                completion_ids += ids
                truncated += stopped
        per_member = len(expanded)
        return [
            self._result(
                completion_ids[k * per_member : (k + 1) * per_member], truncated[k * per_member : (k + 1) * per_member]
            )
            for k in range(len(members))
        ]

    @torch.no_grad()
    def prompt_logits(self, prompts: list[str]) -> torch.Tensor:
        """One left-padded forward in eval mode (as `generate` runs); the logits at each prompt's last token."""
        was_training = self.model.training
        self.model.eval()
        encoded = self.tokenizer(
            prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        ).to(self.model.device)
        logits = self.model(**encoded, logits_to_keep=1).logits[:, -1, :]
        self.model.train(was_training)
        return logits.float().cpu()

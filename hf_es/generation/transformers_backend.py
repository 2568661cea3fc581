"""Generation with transformers' `generate` (the CPU and fallback path)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from .base import GenerationBackend, GenerationResult, SamplingConfig

__all__ = ["TransformersGenerationBackend", "refuse_quantized_weights"]

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


class TransformersGenerationBackend(GenerationBackend):
    """Batched, left-padded `model.generate`, stopping at EOS, over an HF model whose weights ES moves in place.

    Args:
        model: The causal LM (its parameters are perturbed in place).
        tokenizer: Its tokenizer; a missing pad token falls back to EOS.
        batch_size: Largest number of sequences generated at once (`None`: all prompts in one batch).
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int | None = None):
        refuse_quantized_weights(dict(model.named_parameters()), getattr(model.config, "quantization_config", None))
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [eos])

    def live_weights(self) -> dict[str, torch.Tensor]:
        # named_parameters() yields tied weights (embeddings / LM head) once.
        return {name: param.data for name, param in self.model.named_parameters()}

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

    @torch.no_grad()
    def generate(self, prompts: list[str], sampling: SamplingConfig, seed: int | None = None) -> GenerationResult:
        generation_config = self._generation_config(sampling)
        expanded = [prompt for prompt in prompts for _ in range(sampling.num_generations)]
        batch_size = self.batch_size or len(expanded)
        if seed is not None and not sampling.greedy:
            torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        completion_ids, truncated = [], []
        for start in range(0, len(expanded), batch_size):
            encoded = self.tokenizer(
                expanded[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                padding_side="left",
                add_special_tokens=False,
            ).to(self.model.device)
            output = self.model.generate(**encoded, generation_config=generation_config)
            for row in output[:, encoded["input_ids"].shape[1] :].tolist():
                ids, stopped = [], False
                for token in row:
                    if token in self.eos_token_ids:
                        stopped = True
                        break
                    ids.append(token)
                completion_ids.append(ids)
                truncated.append(not stopped)
        self.model.train(was_training)
        completions = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        return GenerationResult(completion_ids=completion_ids, completions=completions, truncated=truncated)

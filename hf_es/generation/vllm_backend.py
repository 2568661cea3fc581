"""Generation with a colocated vLLM engine whose weights ES perturbs in place.

One engine runs in each Accelerate process (TRL's colocate recipe: `distributed_executor_backend="external_launcher"`
under `accelerate launch`, a plain engine otherwise; with `tensor_parallel_size=T > 1`, one engine of T ranks per
process). ES runs inside the engine's workers ([`hf_es.generation.vllm_worker`], vLLM's worker extension driven by
`LLM.collective_rpc`, whether the engine is in this process, `VLLM_ENABLE_V1_MULTIPROCESSING=0`, hf_es's default, or
in its own): each rank maps its parameters to Hugging Face names, un-fusing `qkv_proj` into `q_proj | k_proj | v_proj`
and `gate_up_proj` into `gate_proj | up_proj` (contiguous row slices), with tied embeddings once, and keeps the fp32
master of its slice. The noise is regenerated per HF name and whole-tensor chunk exactly as with the transformers
backend, so the centre stays bit-identical between the two backends at TP=1 (and equal to fp32 rounding at TP > 1).

Three things make in-place perturbation safe inside vLLM:

- **Live weights on CPU.** The engine loads inside [`keep_live_cpu_weights`] ([`hf_es.generation.vllm_weights`]),
  so that writing into a Linear parameter changes what the model computes.
- **Prefix caching.** KV blocks computed under one member's weights must never be served to another member, so the
  prefix cache is reset after every weight change (perturb, restore, update). Within a member, the
  `num_generations` completions of a prompt still share its prompt blocks.
- **Exact restore.** Restoring copies the float32 master back, so the centre is exact in any engine dtype. The
  trainer places the master and the noise with `ESConfig.es_master_device` ([`hf_es.es.master_device_for`]): next to
  the engine's weights when they fit beside vLLM's `gpu_memory_utilization` share, so perturbations are device
  kernels, else on the host.

Quantized engines (fp8, AWQ, GPTQ, bitsandbytes) are refused before any perturbation ([`refuse_quantized_engine`]).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..es import NoiseSource, stable_seed
from .base import GenerationBackend, GenerationResult, SamplingConfig
from .transformers_backend import refuse_quantized_weights
from .vllm_weights import engine_model, hf_named_views, keep_live_cpu_weights, refuse_quantized_engine
from .vllm_worker import (
    EXTENSION,
    WorkerCentre,
    gather_whole,
    in_process,
    load_whole,
    place_engine,
    prepare_worker_environment,
)

if TYPE_CHECKING:
    from vllm import LLM, SamplingParams

__all__ = ["VLLMGenerationBackend", "hf_named_views", "keep_live_cpu_weights", "refuse_quantized_engine"]

logger = logging.getLogger(__name__)


def _local_processes(accelerator: Any) -> int:
    """Number of Accelerate processes on this node."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))


class VLLMGenerationBackend(GenerationBackend):
    """A colocated vLLM engine behind the ES generation interface, perturbed in place with the core's noise.

    Prompts are tokenized with the Hugging Face tokenizer exactly as the transformers backend does (no special tokens
    added: the chat template already holds them), sent to vLLM as token ids, and the completions are cut at the first
    EOS token and decoded with the same tokenizer, so both backends return comparable [`GenerationResult`]s.

    Args:
        model: Path (or Hub id) of a model directory with a config and tokenizer vLLM can read.
        tokenizer: The Hugging Face tokenizer of the model.
        dtype: Engine dtype (`"auto"`: the config's).
        seed: Engine seed (sampling uses per-request seeds derived from the `generate` seed).
        gpu_memory_utilization: Fraction of accelerator memory for the engine (weights + KV cache).
        max_model_len: Context window (`None`: the model's).
        tensor_parallel_size: Ranks of the engine; each holds the master of its own shard and regenerates its slice of
            every whole tensor's noise ([`hf_es.generation.vllm_worker`]).
        distributed_executor_backend: `"external_launcher"` when every Accelerate process runs its own engine.
        enable_sleep_mode: Create the engine with sleep mode (see [`sleep`] / [`wake_up`]).
        enable_prefix_caching: Share prompt KV within a member; the cache is reset after every weight change.
        load_format: vLLM load format; `"dummy"` skips reading the checkpoint when `initial_weights` is given.
        initial_weights: HF-named tensors copied into the engine after it loads (e.g. the trainer's model), so the
            engine starts from exactly these weights whatever is on disk.
        eos_token_ids: Token ids that end a completion (default: the tokenizer's EOS).
        master_device: Default device of the float32 ES master when `init_centre` is given none (`"cpu"`: the
            engine is the only full copy on the accelerator; `None`: next to the engine weights, faster
            perturbations on a GPU). The trainer always passes the device chosen by `es_master_device`.
        mirror_model: An HF model kept equal to the ES centre after every update (its float32 parameters are made to
            share storage with the master when it is on `master_device`), so saving it saves the centre.
        llm_kwargs: Extra keyword arguments for `vllm.LLM`.
    """

    # `ESConfig.es_master_device`, set by `from_trainer`: how the ranks of an engine outside this process place their
    # shards' masters (in-process engines take the device the trainer measured).
    master_placement: str | None = None

    def __init__(
        self,
        model: str,
        tokenizer: PreTrainedTokenizerBase,
        *,
        dtype: str | torch.dtype = "auto",
        seed: int = 0,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        distributed_executor_backend: str | None = None,
        enable_sleep_mode: bool = False,
        enable_prefix_caching: bool = True,
        load_format: str = "auto",
        initial_weights: Mapping[str, torch.Tensor] | None = None,
        eos_token_ids: list[int] | None = None,
        master_device: torch.device | str | None = "cpu",
        mirror_model: PreTrainedModel | None = None,
        llm_kwargs: dict[str, Any] | None = None,
    ):
        # Tensor parallelism and engines in their own processes: see hf_es.generation.vllm_worker.
        prepare_worker_environment()
        from vllm import LLM

        if isinstance(dtype, torch.dtype):
            dtype = str(dtype).removeprefix("torch.")
        self.tokenizer = tokenizer
        self.enable_prefix_caching = enable_prefix_caching
        self.master_device = master_device
        self.mirror_model = mirror_model
        eos = eos_token_ids if eos_token_ids is not None else [tokenizer.eos_token_id]
        self.eos_token_ids = {int(t) for t in eos if t is not None}
        kwargs = dict(
            model=model,
            tokenizer=model,
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            enable_sleep_mode=enable_sleep_mode,
            enable_prefix_caching=enable_prefix_caching,
            load_format=load_format,
        )
        if distributed_executor_backend is None and tensor_parallel_size > 1:
            distributed_executor_backend = "mp"
        if distributed_executor_backend is not None:
            kwargs["distributed_executor_backend"] = distributed_executor_backend
        kwargs["worker_extension_cls"] = EXTENSION
        if not torch.cuda.is_available():
            # vLLM's CPU runner crashes ("CPU Generator does not use offset") when it rewinds the generator of a
            # seeded request whose prefill was chunked; whole-prompt prefills avoid it.
            kwargs["enable_chunked_prefill"] = False
            if max_model_len is not None:
                kwargs["max_num_batched_tokens"] = max(4096, max_model_len)
        kwargs.update(llm_kwargs or {})
        with keep_live_cpu_weights():
            self.llm: LLM = LLM(**kwargs)
        self.llm.collective_rpc("es_quantization_check", args=(self.llm.llm_engine.model_config.quantization,))
        self._shapes = {
            name: tuple(shape) for name, (shape, _, _) in self.llm.collective_rpc("es_describe")[0].items()
        }
        # In-process single-rank engines expose live views (placement, tests); others hand out gathered copies.
        self._views = hf_named_views(engine_model(self.llm)) if in_process(self.llm) else None
        if initial_weights is not None:
            self.load_weights(initial_weights)

    # ------------------------------------------------------------ creation

    @classmethod
    def from_trainer(cls, trainer: Any) -> VLLMGenerationBackend:
        """Builds one engine for this Accelerate process from an `ESTrainer` (TRL's colocate recipe).

        The engine is created from the trainer model's config and tokenizer (written to a temporary directory) with
        dummy weights, then the model's current weights are copied in, so in-memory models and checkpoints resumed
        into `trainer.model` are honoured. The trainer's model is then moved to the host (the engine is the only
        full copy on the accelerator) and kept equal to the ES centre (see `mirror_model`).

        Args:
            trainer: The `ESTrainer` (uses `model`, `processing_class`, `args` and `accelerator`).

        Returns:
            The backend.
        """
        args, model, accelerator = trainer.args, trainer.model, trainer.accelerator
        refuse_quantized_weights(dict(model.named_parameters()), getattr(model.config, "quantization_config", None))
        tokenizer = trainer.processing_class
        world, rank = accelerator.num_processes, accelerator.process_index
        tp = args.vllm_tensor_parallel_size
        # P processes x TP T: one engine of T ranks per process, on its own T devices (or cores).
        place_engine(accelerator.local_process_index, _local_processes(accelerator), tp)
        param_dtype = next(model.parameters()).dtype
        config_dir = tempfile.mkdtemp(prefix="hf_es_vllm_")
        try:
            model.config.save_pretrained(config_dir)
            if getattr(model, "generation_config", None) is not None:
                model.generation_config.save_pretrained(config_dir)
            tokenizer.save_pretrained(config_dir)
            eos = model.generation_config.eos_token_id if model.generation_config is not None else None
            eos = eos if eos is not None else tokenizer.eos_token_id
            backend = cls(
                config_dir,
                tokenizer,
                dtype=param_dtype,
                seed=args.seed + rank,
                gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                max_model_len=args.vllm_max_model_length,
                tensor_parallel_size=tp,
                distributed_executor_backend="external_launcher" if world > 1 and tp == 1 else None,
                enable_sleep_mode=args.vllm_enable_sleep_mode,
                load_format="dummy",
                initial_weights=dict(model.named_parameters()),
                eos_token_ids=eos if isinstance(eos, list) else [eos],
                mirror_model=model,
            )
        finally:
            shutil.rmtree(config_dir, ignore_errors=True)
        backend.master_placement = args.es_master_device
        if model.device.type != "cpu":
            model.to("cpu")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        return backend

    # ------------------------------------------------------------- weights

    def live_weights(self) -> dict[str, torch.Tensor]:
        """HF-named live weights: views of an in-process engine's tensors, else whole float32 copies gathered from
        the workers (read-only snapshots)."""
        if self._views is not None:
            return dict(self._views)
        return gather_whole(self.llm, live=True)

    @torch.no_grad()
    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copies HF-named tensors into the engine (every evolved tensor must be given, with its HF shape).

        Args:
            weights: HF name -> tensor, e.g. `dict(hf_model.named_parameters())`.
        """
        load_whole(self.llm, weights, self._shapes)
        self._weights_changed()

    def centre_state_dict(self) -> dict[str, torch.Tensor]:
        """The exact ES centre as float32 HF-named tensors (for saving); the live weights if no centre exists."""
        if self.centre is not None:
            return self.centre.state_dict()
        return {name: tensor.detach().float().cpu() for name, tensor in gather_whole(self.llm, live=True).items()}

    def init_centre(self, noise: NoiseSource, master_device: torch.device | str | None = None) -> WorkerCentre:
        """Snapshots the engine's weights as the ES centre, with the float32 master on `self.master_device`.

        When a `mirror_model` is attached, its weights are copied into the engine first (it is where `Trainer`
        loads resumed checkpoints), and its float32 parameters then share storage with the master.
        """
        if self.mirror_model is not None:
            self.load_weights(dict(self.mirror_model.named_parameters()))
        if self._views is None and self.master_placement is not None:
            # The trainer measured gathered host copies; the ranks place their own masters from the request.
            placement = self.master_placement
        else:
            placement = (
                "cpu" if torch.device(master_device or self.master_device or "cpu").type == "cpu" else "accelerator"
            )
        self.centre = WorkerCentre(self.llm, noise, placement)
        self._sync_mirror(alias=True)
        self._weights_changed()
        return self.centre

    def init_low_rank_centre(self, *args, **kwargs):
        raise NotImplementedError(
            "perturbation='low_rank' is not supported with vLLM (one batched pass needs per-row corrections inside "
            "the forward pass, which vLLM does not expose); use the transformers backend or perturbation='full'."
        )

    def load_centre(self, state_dict: dict[str, torch.Tensor]) -> None:
        super().load_centre(state_dict)
        self._weights_changed()
        self._sync_mirror()

    def perturb(self, seed: int, scale: float) -> None:
        super().perturb(seed, scale)
        self._weights_changed()

    def restore(self) -> None:
        super().restore()
        self._weights_changed()

    def apply_update(self, seeds: list[int], coefficients: list[float], learning_rate: float) -> float:
        norm = super().apply_update(seeds, coefficients, learning_rate)
        self._weights_changed()
        self._sync_mirror()
        return norm

    @torch.no_grad()
    def _sync_mirror(self, alias: bool = False) -> None:
        """Makes the mirror model equal the centre: shares the master's storage where dtype and device allow."""
        if self.mirror_model is None or self.centre is None:
            return
        masters = self.centre.state_dict()
        for name, param in self.mirror_model.named_parameters():
            master = masters[name]
            if param.data.data_ptr() == master.data_ptr():
                continue
            if alias and param.dtype == master.dtype and param.device == master.device:
                param.data = master
            else:
                param.data.copy_(master)

    def _weights_changed(self) -> None:
        """Drops cached KV blocks: they were computed with other weights."""
        if self.enable_prefix_caching and not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache (requests still running?).")

    # ---------------------------------------------------------- generation

    def max_context_length(self) -> int | None:
        return self.llm.llm_engine.model_config.max_model_len

    def _sampling_params(self, sampling: SamplingConfig, seed: int | None) -> SamplingParams:
        from vllm import SamplingParams

        kwargs: dict[str, Any] = dict(
            max_tokens=sampling.max_completion_length,
            repetition_penalty=sampling.repetition_penalty,
            stop_token_ids=sorted(self.eos_token_ids),
            detokenize=False,
        )
        if sampling.greedy:
            kwargs.update(temperature=0.0)
        else:
            kwargs.update(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k or 0,
                min_p=sampling.min_p or 0.0,
                seed=seed,
            )
        kwargs.update(sampling.extra)
        return SamplingParams(**kwargs)

    @torch.no_grad()
    def generate(self, prompts: list[str], sampling: SamplingConfig, seed: int | None = None) -> GenerationResult:
        from vllm.inputs import TokensPrompt

        encoded = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        requests, params = [], []
        for i, ids in enumerate(encoded):
            for j in range(sampling.num_generations):
                # One request per completion with its own seed: reproducible whatever the batch (seeded n>1 is not,
                # in bf16), and prompts still share KV through the prefix cache.
                request_seed = None if seed is None or sampling.greedy else stable_seed(seed, i, j)
                requests.append(TokensPrompt(prompt_token_ids=list(ids)))
                params.append(self._sampling_params(sampling, request_seed))
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        completion_ids, truncated = [], []
        for output in outputs:
            ids, stopped = [], False
            for token in output.outputs[0].token_ids:
                if token in self.eos_token_ids:
                    stopped = True
                    break
                ids.append(int(token))
            completion_ids.append(ids)
            truncated.append(not stopped and output.outputs[0].finish_reason == "length")
        completions = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        return GenerationResult(completion_ids=completion_ids, completions=completions, truncated=truncated)

    # ----------------------------------------------------------- lifecycle

    def sleep(self, level: int = 1) -> None:
        """Frees the engine's KV cache (and, at level 1, offloads its weights) between steps (needs sleep mode).

        Views stay valid: vLLM restores the weights to the same addresses on [`wake_up`]. Do not move the weights
        while the engine sleeps.
        """
        self.llm.sleep(level=level)

    def wake_up(self) -> None:
        """Brings a sleeping engine back; the prefix cache is empty afterwards."""
        self.llm.wake_up()

    def close(self) -> None:
        """Shuts the engine down (call before destroying the process group)."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            self._views = None
            self.centre = None
            del self.llm
            import gc

            gc.collect()

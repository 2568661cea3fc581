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
  `num_generations` completions of a prompt still share its prompt blocks. A reset that fails (requests still in
  the engine after a failed `generate`) marks the cache stale instead of replacing the error in flight; the next
  generation retries the reset and refuses to run on a stale cache.
- **Exact restore.** Restoring copies the float32 master back, so the centre is exact in any engine dtype. The
  trainer places the master and the noise with `ESConfig.es_master_device` ([`hf_es.es.master_device_for`]): next to
  the engine's weights when they fit beside vLLM's `gpu_memory_utilization` share, so perturbations are device
  kernels, else on the host.

Quantized engines (fp8, AWQ, GPTQ, bitsandbytes) are refused before any perturbation ([`refuse_quantized_engine`]).

An in-memory model's engine folder (config, generation config, tokenizer; no weights) is content-addressed under
`$HF_ES_CACHE/vllm_models/` ([`engine_folder`]): the folder path is part of vLLM's compile-cache key, so every process
of a run and later runs of the same model share one folder and reuse the compiled graphs. Sleep mode is not offered:
ES generates in every phase, so nothing else could use the memory it frees.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..es import NoiseSource, stable_seed
from ..models import cache_dir
from .base import GenerationBackend, GenerationResult, SamplingConfig
from .entropy import EntropySums, top_k_entropy_lower_bound
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

__all__ = [
    "VLLMGenerationBackend",
    "engine_folder",
    "hf_named_views",
    "keep_live_cpu_weights",
    "refuse_quantized_engine",
]

logger = logging.getLogger(__name__)


class VLLMGenerationBackend(GenerationBackend):
    """A colocated vLLM engine behind the ES generation interface, perturbed in place with the core's noise.

    Prompts are tokenized with the Hugging Face tokenizer exactly as the transformers backend does (no special tokens
    added: the chat template already holds them), sent to vLLM as token ids, and the completions are cut at the first
    EOS token and decoded with the same tokenizer, so both backends return comparable [`GenerationResult`]s.

    Built from explicit keyword arguments, as TRL builds its `VLLMGeneration`; the trainer maps its `ESConfig` to them
    (`ESTrainer._backend_arguments`) and creates the engine with [`hf_es.generation.make_backend`]`("vllm", ...)`.

    Args:
        model: Path (or Hub id) of a model directory with a config and tokenizer vLLM can read, or an in-memory
            `PreTrainedModel` (TRL's colocate recipe): the engine is then created from the model's config and
            `tokenizer` (written once to a content-addressed [`engine_folder`]) with dummy weights, the model's
            current weights are copied in (so in-memory models and checkpoints resumed into it are honoured), the
            model becomes the `mirror_model` and is moved to the host (the engine is the only full copy on the
            accelerator).
        tokenizer: The Hugging Face tokenizer of the model.
        dtype: Engine dtype (`"auto"`: the config's; for an in-memory model, its parameters' dtype).
        seed: Engine seed (sampling uses per-request seeds derived from the `generate` seed).
        gpu_memory_utilization: Fraction of accelerator memory for the engine (weights + KV cache).
        max_model_len: Context window (`None`: the model's).
        tensor_parallel_size: Ranks of the engine; each holds the master of its own shard and regenerates its slice of
            every whole tensor's noise ([`hf_es.generation.vllm_worker`]).
        distributed_executor_backend: `"external_launcher"` when every Accelerate process runs a single-rank engine;
            `None` picks vLLM's `"mp"` executor when `tensor_parallel_size > 1`.
        enable_prefix_caching: Share prompt KV within a member; the cache is reset after every weight change.
        load_format: vLLM load format; `"dummy"` skips reading the checkpoint when `initial_weights` is given.
        initial_weights: HF-named tensors copied into the engine after it loads (e.g. the trainer's model), so the
            engine starts from exactly these weights whatever is on disk.
        eos_token_ids: Token ids that end a completion (default: the tokenizer's EOS).
        master_device: Default device of the float32 ES master when `init_centre` is given none (`"cpu"`: the
            engine is the only full copy on the accelerator; `None`: next to the engine weights, faster
            perturbations on a GPU). The trainer always passes the device chosen by `es_master_device`.
        master_placement: `ESConfig.es_master_device` (`"auto"`, `"accelerator"`, `"cpu"`): how the ranks of an
            engine outside this process place their shards' masters (each measures its own device). `None`: from the
            device `init_centre` is given, as in-process engines do.
        mirror_model: An HF model made equal to the ES centre when it is read ([`sync_mirror`]: saves, cards, the
            end of training), not after every update; its float32 parameters share storage with the master when it
            is on `master_device` (then it is always equal).
        local_process_index: This process's index on its machine: its engine gets devices (GPUs, or CPU cores for
            its compute threads) `[i*T, (i+1)*T)` ([`place_engine`]; two CPU engines would both pin core 0).
        local_num_processes: Processes on this machine, each with its own engine (default: `num_processes`); the
            layout must fit the machine's devices.
        process_index: This process's global rank (`RANK` for `"external_launcher"`).
        num_processes: Number of processes, each with its own engine (`WORLD_SIZE` for `"external_launcher"`).
        llm_kwargs: Extra keyword arguments for `vllm.LLM`.
    """

    # An update moved the centre since `mirror_model` was last made equal to it.
    _mirror_stale: bool = False
    # A prefix-cache reset failed: the cache may hold KV blocks of other weights.
    _prefix_cache_stale: bool = False

    def __init__(
        self,
        model: str | os.PathLike | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        dtype: str | torch.dtype = "auto",
        seed: int = 0,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        distributed_executor_backend: str | None = None,
        enable_prefix_caching: bool = True,
        load_format: str = "auto",
        initial_weights: Mapping[str, torch.Tensor] | None = None,
        eos_token_ids: list[int] | None = None,
        master_device: torch.device | str | None = "cpu",
        master_placement: str | None = None,
        mirror_model: PreTrainedModel | None = None,
        local_process_index: int = 0,
        process_index: int = 0,
        num_processes: int = 1,
        local_num_processes: int | None = None,
        llm_kwargs: dict[str, Any] | None = None,
    ):
        in_memory = model if isinstance(model, PreTrainedModel) else None
        if in_memory is not None:
            refuse_quantized_weights(
                dict(in_memory.named_parameters()), getattr(in_memory.config, "quantization_config", None)
            )
        if local_num_processes is None:
            local_num_processes = num_processes
        # P processes x TP T: one engine of T ranks per process, on its own T devices (or cores).
        place_engine(local_process_index, local_num_processes, tensor_parallel_size)
        # Tensor parallelism and engines in their own processes: see hf_es.generation.vllm_worker.
        prepare_worker_environment()
        from vllm import LLM

        if in_memory is not None:
            if dtype == "auto":
                dtype = next(in_memory.parameters()).dtype
            load_format = "dummy"
            initial_weights = dict(in_memory.named_parameters()) if initial_weights is None else initial_weights
            eos_token_ids = _model_eos_token_ids(in_memory, tokenizer) if eos_token_ids is None else eos_token_ids
            mirror_model = in_memory if mirror_model is None else mirror_model
            model = engine_folder(in_memory, tokenizer)
        if isinstance(dtype, torch.dtype):
            dtype = str(dtype).removeprefix("torch.")
        self.tokenizer = tokenizer
        self.enable_prefix_caching = enable_prefix_caching
        self.master_device = master_device
        self.master_placement = master_placement
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
            enable_prefix_caching=enable_prefix_caching,
            load_format=load_format,
        )
        if distributed_executor_backend is None and tensor_parallel_size > 1:
            distributed_executor_backend = "mp"
        if distributed_executor_backend is not None:
            kwargs["distributed_executor_backend"] = distributed_executor_backend
        kwargs["worker_extension_cls"] = EXTENSION
        if distributed_executor_backend == "external_launcher":
            set_launcher_environment(process_index, local_process_index, num_processes)
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
        if in_memory is not None and in_memory.device.type != "cpu":
            in_memory.to("cpu")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

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

    def init_centre(
        self,
        noise: NoiseSource,
        master_device: torch.device | str | None = None,
        perturbation: str = "full",
        rank: int = 1,
        non_matrix_noise: str = "full",
    ) -> WorkerCentre:
        """Snapshots the engine's weights as the ES centre, with the float32 master on `self.master_device`.

        When a `mirror_model` is attached, its weights are copied into the engine first (it is where `Trainer`
        loads resumed checkpoints), and its float32 parameters then share storage with the master. Only full-rank
        perturbations: low-rank members are evaluated in one batch by corrections inside the forward pass, which vLLM
        does not expose (see [`GenerationBackend.init_centre`] for the arguments).
        """
        if perturbation != "full":
            raise NotImplementedError(
                f"perturbation={perturbation!r} is not supported with vLLM (one batched pass needs per-row "
                "corrections inside the forward pass, which vLLM does not expose); use the transformers backend or "
                "perturbation='full'."
            )
        if self.mirror_model is not None:
            self.load_weights(dict(self.mirror_model.named_parameters()))
        if self._views is None and self.master_placement is not None:
            # The trainer measured gathered host copies; the ranks place their own masters from the request.
            placement = self.master_placement
        else:
            device = torch.device(master_device or self.master_device or "cpu")
            placement = "cpu" if device.type == "cpu" else "accelerator"
        self.centre = WorkerCentre(self.llm, noise, placement)
        self._sync_mirror(alias=True)
        self._weights_changed()
        return self.centre

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
        # Copying the master into a host mirror costs seconds per step at 7B; it is done when the mirror is read.
        self._mirror_stale = True
        return norm

    def sync_mirror(self) -> None:
        """Makes `mirror_model` equal the centre if an update moved the centre since the last sync."""
        if self._mirror_stale:
            self._sync_mirror()
            self._mirror_stale = False

    @torch.no_grad()
    def _sync_mirror(self, alias: bool = False) -> None:
        """Makes the mirror model equal the centre: shares the master's storage where dtype and device allow."""
        if self.mirror_model is None or self.centre is None:
            return
        masters = self.centre.state_dict()  # in-process: the master's own tensors; else gathered from the ranks
        for name, param in self.mirror_model.named_parameters():
            master = masters[name]
            if param.data.data_ptr() == master.data_ptr():
                continue
            if alias and param.dtype == master.dtype and param.device == master.device:
                param.data = master
            else:
                param.data.copy_(master)

    def _weights_changed(self) -> None:
        """Drops cached KV blocks: they were computed with other weights.

        A failed reset marks the cache stale (retried before the next generation, see [`_fresh_prefix_cache`]) and
        raises only when no exception is in flight: a `restore` in a `finally` after a failed `generate` must not
        replace that error with this one.
        """
        if not self.enable_prefix_caching:
            return
        self._prefix_cache_stale = not self.llm.reset_prefix_cache()
        if not self._prefix_cache_stale:
            return
        if sys.exc_info()[0] is None:
            raise RuntimeError(_RESET_FAILED)
        logger.warning(f"{_RESET_FAILED} Retrying before the next generation.")

    def _fresh_prefix_cache(self) -> None:
        """Retries a failed prefix-cache reset; raises rather than serve KV computed with other weights."""
        if self._prefix_cache_stale:
            if not self.llm.reset_prefix_cache():
                raise RuntimeError(f"{_RESET_FAILED} Refusing to generate from KV computed with other weights.")
            self._prefix_cache_stale = False

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

        self._fresh_prefix_cache()
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

    def _max_logprobs(self) -> int:
        # vLLM's engine cap on returned log-probabilities per position (-1: uncapped, then vLLM's default 20 is used).
        configured = self.llm.llm_engine.model_config.max_logprobs
        return configured if configured > 0 else 20

    @torch.no_grad()
    def completion_entropy(
        self, prompts: list[str], completion_ids: list[list[int]], num_generations: int = 1
    ) -> EntropySums:
        """A lower bound from the engine's top-k log-probabilities at each completion token (k = `max_logprobs`,
        default 20; [`~hf_es.generation.entropy.top_k_entropy_lower_bound`]): vLLM returns no full distribution.

        One scoring pass over prompt + completion (`prompt_logprobs`, one new token), with the current weights.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._fresh_prefix_cache()
        k = self._max_logprobs()
        encoded = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        rows = [(encoded[i // num_generations], list(ids)) for i, ids in enumerate(completion_ids) if ids]
        if not rows:
            return EntropySums(0.0, 0, k)
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=k, detokenize=False)
        requests = [TokensPrompt(prompt_token_ids=list(prompt) + completion) for prompt, completion in rows]
        outputs = self.llm.generate(requests, [params] * len(requests), use_tqdm=False)
        total, count = 0.0, 0
        for output, (prompt, completion) in zip(outputs, rows):
            # prompt_logprobs[t]: the distribution that produced token t (None at t = 0).
            for position in range(len(prompt), len(prompt) + len(completion)):
                top = output.prompt_logprobs[position]
                total += top_k_entropy_lower_bound(logprob.logprob for logprob in top.values())
                count += 1
        return EntropySums(total, count, k)

    @torch.no_grad()
    def prompt_logits(self, prompts: list[str]) -> torch.Tensor:
        """The engine's next-token log-probabilities after each prompt: its `max_logprobs` most likely tokens, `-inf`
        elsewhere (vLLM returns no full logits).

        Log-probabilities move with every logit, and the top tokens' values are bit-identical exactly when the engine
        computes with the same weights, which is what the start-up check ([`hf_es.trainer.probe`]) compares.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._fresh_prefix_cache()
        config = self.llm.llm_engine.model_config
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=self._max_logprobs(), detokenize=False)
        encoded = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        requests = [TokensPrompt(prompt_token_ids=list(ids)) for ids in encoded]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        logits = torch.full((len(prompts), config.get_vocab_size()), float("-inf"))
        for row, output in enumerate(outputs):
            for token, logprob in output.outputs[0].logprobs[0].items():
                logits[row, token] = logprob.logprob
        return logits

    # ----------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Shuts the engine down (call before destroying the process group)."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            self._views = None
            self.centre = None
            del self.llm
            import gc

            gc.collect()


_RESET_FAILED = "vLLM could not reset its prefix cache (requests still running?)."


def engine_folder(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> str:
    """The folder vLLM reads an in-memory model from: its config, generation config and tokenizer (no weights).

    Named by the hash of what is written, under `$HF_ES_CACHE/vllm_models/` (`~/.cache/hf_es` by default), so every
    process of a run and later runs of the same model get the same path, which vLLM's compile cache is keyed by.
    Written into a staging folder and renamed into place: concurrent processes never read a half-written folder.

    Args:
        model: The model whose config (and generation config) to write.
        tokenizer: Its tokenizer.

    Returns:
        The folder's path.
    """
    root = cache_dir() / "vllm_models"
    root.mkdir(parents=True, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=root)
    try:
        model.config.save_pretrained(staging)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(staging)
        _without_call_state(tokenizer).save_pretrained(staging)
        target = root / _folder_digest(staging)
        if not target.is_dir():
            os.chmod(staging, 0o755)  # mkdtemp's 0700 would hide a shared cache from other users
            try:
                os.rename(staging, target)
            except OSError:
                if not target.is_dir():  # not another process's identical folder winning the race
                    raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)


def _without_call_state(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """A copy of a fast tokenizer without the padding / truncation its last batched call left in `tokenizer.json`
    (vLLM never pads; kept, they would give one model several folders)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or (backend.padding is None and backend.truncation is None):
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.backend_tokenizer.no_padding()
    tokenizer.backend_tokenizer.no_truncation()
    return tokenizer


def _folder_digest(folder: str) -> str:
    """SHA-256 (first 16 hex digits) of a flat folder's file names and contents."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        digest.update(name.encode() + b"\0")
        with open(os.path.join(folder, name), "rb") as file:
            digest.update(hashlib.sha256(file.read()).digest())
    return digest.hexdigest()[:16]


def set_launcher_environment(process_index: int, local_process_index: int, num_processes: int) -> None:
    """Sets the variables vLLM's `"external_launcher"` executor initialises its process group from, as TRL does for
    its colocated engine: `RANK`, `LOCAL_RANK`, `WORLD_SIZE` from the accelerator, and `MASTER_ADDR`/`MASTER_PORT`
    (kept when set, e.g. by `accelerate launch`; else localhost and a free port).

    Args:
        process_index: Global rank of this process.
        local_process_index: Rank on this machine.
        num_processes: Number of processes.
    """
    from trl.trainer.utils import ensure_master_addr_port

    os.environ["RANK"] = str(process_index)
    os.environ["LOCAL_RANK"] = str(local_process_index)
    os.environ["WORLD_SIZE"] = str(num_processes)
    ensure_master_addr_port()


def _model_eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The ids that end a completion: the model's generation config's EOS, else the tokenizer's."""
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    eos = eos if eos is not None else tokenizer.eos_token_id
    return eos if isinstance(eos, list) else [eos]

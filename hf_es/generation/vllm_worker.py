"""ES inside vLLM's workers: a worker extension that holds each rank's shard of the centre, driven by seeds over RPC.

vLLM runs a model in one worker per tensor-parallel rank, in the calling process or in processes of their own
(`VLLM_ENABLE_V1_MULTIPROCESSING`, the `mp` or Ray executor). [`ESWorkerExtension`] is mixed into every worker
(`vllm.LLM(worker_extension_cls=...)`): each rank maps its parameters to Hugging Face names and the slice of the whole
tensor it holds ([`hf_es.generation.vllm_weights.hf_named_shards`]), keeps the float32 master of that slice (4 bytes x
parameters / TP), and perturbs, restores and updates it with the noise the whole tensor would get
([`hf_es.es.ShardedNoise`]). The driver ([`WorkerCentre`], the centre [`VLLMGenerationBackend`] uses) sends only seeds,
signs x sigma, coefficients and the learning rate through `LLM.collective_rpc`; whole tensors (checkpoints, the drift
analysis, the mirror model) travel as safetensors files (in `/dev/shm` where it exists), one per rank.

On CPU, vLLM repacks Linear weights into kernel layouts after loading and leaves empty parameters behind. Workers import
this module before they load the model (vLLM resolves the extension class first), so with `HF_ES_VLLM_LIVE_WEIGHTS=1`
in their environment (set by the backend) they load with live Linear weights
([`hf_es.generation.vllm_weights.install_live_cpu_weights`]).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..es import ESCentre, GaussianNoise, NoiseSource, NoiseTable
from ..es.centre import DIGEST_ELEMENTS, digest_noise
from ..es.placement import master_device_for
from ..es.sharding import ShardedNoise, ShardSpec, assemble_whole

if TYPE_CHECKING:
    from vllm import LLM

__all__ = [
    "EXTENSION",
    "LIVE_WEIGHTS_ENV",
    "ESWorkerExtension",
    "ShardCentre",
    "check_layout",
    "place_engine",
    "WorkerCentre",
    "gather_whole",
    "in_process",
    "load_whole",
    "noise_from_settings",
    "noise_settings",
    "prepare_worker_environment",
]

EXTENSION = f"{__name__}.ESWorkerExtension"
LIVE_WEIGHTS_ENV = "HF_ES_VLLM_LIVE_WEIGHTS"

if os.environ.get(LIVE_WEIGHTS_ENV) == "1":
    from .vllm_weights import install_live_cpu_weights

    install_live_cpu_weights()


def noise_settings(noise: NoiseSource) -> dict[str, Any]:
    """What rebuilds `noise` in another process (a few numbers; the table itself is redrawn from its seed)."""
    if isinstance(noise, NoiseTable):
        return {"type": "table", "size": noise.size, "table_seed": noise.table_seed, "chunk_size": noise.chunk_size}
    if isinstance(noise, GaussianNoise):
        return {"type": "gaussian", "chunk_size": noise.chunk_size}
    raise TypeError(f"{type(noise).__name__} cannot be rebuilt in vLLM's workers; use the table or Gaussian noise.")


def noise_from_settings(settings: Mapping[str, Any]) -> NoiseSource:
    """Rebuilds the noise source described by [`noise_settings`]."""
    if settings["type"] == "table":
        return NoiseTable(size=settings["size"], table_seed=settings["table_seed"], chunk_size=settings["chunk_size"])
    return GaussianNoise(chunk_size=settings["chunk_size"])


class ShardCentre(ESCentre):
    """One rank's part of the ES centre: an [`ESCentre`] over its shard tensors, with the whole tensors' noise.

    Args:
        shards: HF name -> (live shard tensor, its [`ShardSpec`]).
        noise: The noise source of the unsharded run.
        master_device: Device of the float32 master of the shard (`None`: next to the live weights).
    """

    def __init__(
        self,
        shards: Mapping[str, tuple[torch.Tensor, ShardSpec]],
        noise: NoiseSource,
        master_device: torch.device | str | None = None,
    ):
        self.specs = {name: spec for name, (_, spec) in shards.items()}
        self.whole_noise = noise
        super().__init__(
            {name: view for name, (view, _) in shards.items()}, ShardedNoise(noise, self.specs), master_device
        )

    def _update_tensor_(
        self, name: str, master: torch.Tensor, seeds: list[int], steps: list[float]
    ) -> torch.Tensor | float:
        squared_norm = super()._update_tensor_(name, master, seeds, steps)
        # Slices held by several ranks (norms, replicated KV heads) count once in the engine's update norm.
        return squared_norm if self.specs[name].owner else 0.0

    def noise_digest(self, seed: int, max_elements: int = DIGEST_ELEMENTS) -> str:
        """[`hf_es.es.noise_digest`] of the whole tensors (as an unsharded process computes it), on this rank's device."""
        tensors = {name: (math.prod(spec.shape), self.master[name].device) for name, spec in self.specs.items()}
        return digest_noise(self.whole_noise, tensors, seed, max_elements)


class ESWorkerExtension:
    """Methods vLLM mixes into each of its workers, called by [`WorkerCentre`] through `LLM.collective_rpc`.

    Every method runs on every tensor-parallel rank with the same arguments and works on that rank's shard only.
    Attribute names start with `es_` / `_es_` so that they cannot collide with the worker's own.
    """

    def _es_shards(self) -> dict[str, tuple[torch.Tensor, ShardSpec]]:
        shards = getattr(self, "_es_cached_shards", None)
        if shards is None:
            from .vllm_weights import hf_named_shards

            shards = self._es_cached_shards = hf_named_shards(self.model_runner.get_model())
        return shards

    def es_describe(self) -> dict[str, tuple[list[int], str, str]]:
        """HF name -> (whole shape, engine dtype, device) of every evolved tensor, as this rank sees them."""
        return {
            name: (list(spec.shape), str(view.dtype).removeprefix("torch."), str(view.device))
            for name, (view, spec) in self._es_shards().items()
        }

    def es_live(self) -> dict[str, torch.Tensor]:
        """HF name -> this rank's live shard tensor (the objects themselves only for an engine in the calling
        process)."""
        return {name: view for name, (view, _) in self._es_shards().items()}

    def es_quantization_check(self, quantization: str | None) -> None:
        """Raises before any perturbation when this rank's model holds quantized weights."""
        from .vllm_weights import refuse_quantized_engine

        refuse_quantized_engine(self.model_runner.get_model(), quantization)

    @torch.no_grad()
    def es_load(self, path: str) -> None:
        """Copies this rank's slices of the whole HF tensors in the safetensors file `path` into the engine (and into
        the master, when a centre exists: the centre becomes these weights)."""
        from safetensors import safe_open

        centre: ShardCentre | None = getattr(self, "_es_centre", None)
        with safe_open(path, framework="pt") as file:
            for name, (view, spec) in self._es_shards().items():
                whole = file.get_slice(name)
                if spec.dim is None:
                    values = whole[:]
                else:
                    index = [slice(None)] * len(spec.shape)
                    index[spec.dim] = slice(spec.start, spec.start + spec.size)
                    values = whole[tuple(index)]
                (centre.master[name] if centre is not None else view).copy_(values)
        if centre is not None:
            centre.restore_()

    def es_init(self, settings: Mapping[str, Any], placement: str) -> str:
        """Snapshots this rank's shard as its part of the centre, with its master placed by `placement`.

        Args:
            settings: The noise source ([`noise_settings`]).
            placement: `ESConfig.es_master_device` (`"auto"` measures this rank's free device memory).

        Returns:
            The master's device.
        """
        shards = self._es_shards()
        noise = noise_from_settings(settings)
        # Beside vLLM's share of the device when the master fits there (`"auto"`), as the trainer measures in-process.
        utilization = getattr(getattr(self, "cache_config", None), "gpu_memory_utilization", None)
        device = master_device_for(
            placement, {name: view for name, (view, _) in shards.items()}, noise, engine_utilization=utilization
        )
        self._es_centre = ShardCentre(shards, noise, device)
        return str(device)

    def es_perturb(self, seed: int, scale: float) -> None:
        """Writes `master + scale * eps(seed)` into this rank's shard."""
        self._es_centre.perturb_(seed, scale)

    def es_restore(self) -> None:
        """Copies the exact centre back into this rank's shard."""
        self._es_centre.restore_()

    def es_update(self, seeds: list[int], coefficients: list[float], learning_rate: float) -> float:
        """Moves this rank's master; returns the L2 norm of the update over the slices this rank owns."""
        return self._es_centre.update_(seeds, coefficients, learning_rate)

    def es_digest(self, seed: int, max_elements: int) -> str:
        """The noise digest of direction `seed` (whole tensors, this rank's device)."""
        return self._es_centre.noise_digest(seed, max_elements)

    @torch.no_grad()
    def es_gather(self, directory: str | None, live: bool) -> str | dict[str, tuple[ShardSpec, torch.Tensor]]:
        """This rank's owned slices, float32: the master (or the live weights with `live` or before `es_init`).

        Args:
            directory: Where to write them as `rank<r>.safetensors` (spec of each tensor in the metadata); `None`
                returns the tensors themselves (only for an engine in the calling process).
            live: Read the live weights rather than the master.

        Returns:
            The file's path, or HF name -> (spec, tensor).
        """
        from safetensors.torch import save_file

        centre: ShardCentre | None = getattr(self, "_es_centre", None)
        pieces = {
            name: (spec, view.float() if live or centre is None else centre.master[name])
            for name, (view, spec) in self._es_shards().items()
            if spec.owner
        }
        if directory is None:
            return pieces
        from vllm.distributed import get_tensor_model_parallel_rank

        path = os.path.join(directory, f"rank{get_tensor_model_parallel_rank()}.safetensors")
        metadata = {name: json.dumps(dataclasses.asdict(spec)) for name, (spec, _) in pieces.items()}
        # Copies: un-fused q/k/v views share storage, which safetensors refuses.
        save_file({name: tensor.detach().to("cpu", copy=True) for name, (_, tensor) in pieces.items()}, path, metadata)
        return path


class WorkerCentre:
    """The ES centre of a vLLM engine, held by its workers ([`ESWorkerExtension`]), with [`ESCentre`]'s interface.

    Perturbations, restores and updates are RPCs carrying seeds and numbers; `master` / `state_dict()` gather whole
    float32 HF tensors (from every rank's owned slices) each time they are read.

    Args:
        llm: The engine, created with `worker_extension_cls=EXTENSION`.
        noise: The noise source (rebuilt in each worker from its settings).
        placement: Where each rank keeps its master (`ESConfig.es_master_device`: `"auto"`, `"accelerator"`, `"cpu"`),
            decided by each rank for its own shard.
    """

    def __init__(self, llm: LLM, noise: NoiseSource, placement: str = "cpu"):
        self.llm, self.noise = llm, noise
        described = llm.collective_rpc("es_describe")[0]
        self.shapes = {name: tuple(shape) for name, (shape, _, _) in described.items()}
        self.dtypes = {name: getattr(torch, dtype) for name, (_, dtype, _) in described.items()}
        self.master_devices = [
            torch.device(d) for d in llm.collective_rpc("es_init", args=(noise_settings(noise), placement))
        ]

    @property
    def parameters(self) -> dict[str, torch.Tensor]:
        """The live weights ES writes: the worker's own tensors for an in-process single-rank engine, else meta
        tensors of their shapes and dtypes (the weights live in the workers)."""
        if in_process(self.llm):
            return self.llm.collective_rpc("es_live")[0]
        return {
            name: torch.empty(shape, dtype=self.dtypes[name], device="meta") for name, shape in self.shapes.items()
        }

    @property
    def master_device(self) -> torch.device:
        """Where rank 0 keeps its master (the others chose alike for their own devices)."""
        return self.master_devices[0]

    @property
    def num_parameters(self) -> int:
        """Number of evolved scalars (whole tensors)."""
        return sum(math.prod(shape) for shape in self.shapes.values())

    @property
    def master(self) -> dict[str, torch.Tensor]:
        """The whole float32 master, gathered from the workers."""
        return gather_whole(self.llm)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The whole float32 master, for checkpoints."""
        return gather_whole(self.llm)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Loads whole float32 master weights into every rank's master and shard."""
        load_whole(self.llm, state_dict, self.shapes)

    def perturb_(self, seed: int, scale: float) -> None:
        self.llm.collective_rpc("es_perturb", args=(seed, scale))

    def restore_(self) -> None:
        self.llm.collective_rpc("es_restore")

    def update_(self, seeds: list[int], coefficients: list[float], learning_rate: float) -> float:
        norms = self.llm.collective_rpc("es_update", args=(list(seeds), list(coefficients), learning_rate))
        return math.sqrt(sum(norm * norm for norm in norms))

    def noise_digest(self, seed: int, max_elements: int = DIGEST_ELEMENTS) -> str:
        """The noise digest of the engine's ranks (all must agree: they draw the whole tensors' noise alike)."""
        digests = self.llm.collective_rpc("es_digest", args=(seed, max_elements))
        if len(set(digests)) != 1:
            raise RuntimeError(
                f"The tensor-parallel ranks of one vLLM engine draw different ES noise for the same seed "
                f"({digests}); use noise_type='table' or GPUs of one model."
            )
        return digests[0]


def prepare_worker_environment() -> None:
    """Sets what vLLM's workers read when they start: live CPU weights, and the engine in this process unless
    `VLLM_ENABLE_V1_MULTIPROCESSING=1` asks for its own processes (in-process engines start 3-4x faster here).
    Call it right before creating each engine."""
    os.environ[LIVE_WEIGHTS_ENV] = "1"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import envs as vllm_envs

    # An earlier in-process engine froze vLLM's reads of the environment; this engine's settings (thread binding,
    # multiprocessing) must count.
    getattr(vllm_envs, "disable_envs_cache", lambda: None)()
    if not torch.cuda.is_available():
        from .vllm_weights import install_live_cpu_weights

        install_live_cpu_weights()  # for workers in this process, which may have imported this module already


def check_layout(local_processes: int, tensor_parallel_size: int, devices: int, kind: str = "GPUs") -> None:
    """Refuses a data x tensor-parallel layout that does not fit the node: P processes x TP T need P x T devices.

    Args:
        local_processes: Accelerate processes on this node (one engine each).
        tensor_parallel_size: Ranks per engine.
        devices: Devices (GPUs, or CPU cores) on this node.
        kind: What `devices` counts, for the message.

    Raises:
        ValueError: Naming the layouts that fit.
    """
    if tensor_parallel_size < 1:
        raise ValueError(f"vllm_tensor_parallel_size must be at least 1, got {tensor_parallel_size}.")
    needed = local_processes * tensor_parallel_size
    if needed > devices:
        fits = [f"{p} processes x TP {devices // p}" for p in range(1, devices + 1) if devices % p == 0]
        raise ValueError(
            f"{local_processes} processes x vllm_tensor_parallel_size={tensor_parallel_size} need {needed} {kind} "
            f"(one engine of {tensor_parallel_size} ranks per process), but this node has {devices}. Layouts that "
            f"fit: {', '.join(fits)} (`accelerate launch --num_processes P` with vllm_tensor_parallel_size=T)."
        )


def place_engine(local_index: int, local_processes: int, tensor_parallel_size: int) -> None:
    """Gives this process's engine its own devices: GPUs `[i*T, (i+1)*T)` on a GPU node, those CPU cores otherwise.

    Must run before the engine is created (its workers read the environment when they start).

    Args:
        local_index: This process's index on the node.
        local_processes: Accelerate processes on this node.
        tensor_parallel_size: Ranks per engine (T).
    """
    first, tp = local_index * tensor_parallel_size, tensor_parallel_size
    if torch.cuda.is_available():
        check_layout(local_processes, tp, torch.cuda.device_count())
        if tp > 1:  # the engine's spawned workers number their devices from 0 within what they see
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            ids = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[first : first + tp])
        return
    check_layout(local_processes, tp, os.cpu_count() or 1, kind="CPU cores")
    # One compute thread per rank, each on its own core (two engines would otherwise both pin to core 0).
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(first + r) for r in range(tp)))
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def in_process(llm: LLM) -> bool:
    """Whether the engine's only worker runs in this process (so RPC results are the worker's own objects)."""
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    return isinstance(getattr(llm.llm_engine, "model_executor", None), UniProcExecutor)


def _scratch_dir() -> str:
    return tempfile.mkdtemp(prefix="hf_es_tp_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


def gather_whole(llm: LLM, live: bool = False) -> dict[str, torch.Tensor]:
    """Whole float32 HF tensors from every rank's owned slices: the master, or the live weights with `live`.

    In-process single-rank engines return the master's own tensors (no copy; modify them only through the centre).

    Args:
        llm: The engine.
        live: Gather the live weights (also before a centre exists).

    Returns:
        HF name -> whole tensor (on the host unless the engine is in-process).
    """
    if in_process(llm):
        pieces = llm.collective_rpc("es_gather", args=(None, live))[0]
        return {name: tensor for name, (_, tensor) in pieces.items()}
    from safetensors import safe_open

    directory = _scratch_dir()
    try:
        by_name: dict[str, list[tuple[ShardSpec, torch.Tensor]]] = {}
        for path in llm.collective_rpc("es_gather", args=(directory, live)):
            with safe_open(path, framework="pt") as file:
                metadata = file.metadata()
                for name in file.keys():
                    spec = json.loads(metadata[name])
                    spec["shape"] = tuple(spec["shape"])
                    by_name.setdefault(name, []).append((ShardSpec(**spec), file.get_tensor(name)))
        return {name: assemble_whole(pieces) for name, pieces in by_name.items()}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def load_whole(llm: LLM, weights: Mapping[str, torch.Tensor], shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Writes whole HF tensors into every rank (its slices), through one safetensors file.

    Args:
        llm: The engine.
        weights: HF name -> whole tensor; every evolved tensor must be given, with its HF shape.
        shapes: HF name -> whole shape of the engine's tensors (`es_describe`).

    Raises:
        ValueError: If names or shapes differ from the engine's.
    """
    from safetensors.torch import save_file

    missing, unexpected = set(shapes) - set(weights), set(weights) - set(shapes)
    if missing or unexpected:
        raise ValueError(
            f"HF weights do not match the vLLM engine's: missing {sorted(missing)[:5]}, unexpected "
            f"{sorted(unexpected)[:5]}. Is this architecture's vLLM naming the same as transformers'?"
        )
    for name, shape in shapes.items():
        if tuple(weights[name].shape) != tuple(shape):
            raise ValueError(f"{name}: HF shape {tuple(weights[name].shape)} != engine shape {tuple(shape)}.")
    directory = _scratch_dir()
    try:
        path = os.path.join(directory, "weights.safetensors")
        save_file({name: tensor.detach().cpu().contiguous() for name, tensor in weights.items()}, path)
        llm.collective_rpc("es_load", args=(path,))
    finally:
        shutil.rmtree(directory, ignore_errors=True)

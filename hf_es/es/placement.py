"""Where the ES master and the noise live: next to the live weights when they fit there, else on the host.

Perturbing, restoring and updating read the fp32 master and the noise once per parameter. When both sit on the
accelerator that holds the live weights, each of these is a few device kernels; when they sit on the host, every
member costs host arithmetic over all parameters plus a host-to-device copy (seconds per member for a 0.5B model),
which at N=32 dominates the step. The host is the fallback for accelerators too small to hold the master.

The memory plan (all in bytes of the live weights' device, measured after the engine has taken its share):

    needed    = 4 * parameters (fp32 master) + 4 * (table size + chunk size) (noise table) + 8 * chunk size (scratch)
    available = free - headroom
    placed on the device  <=>  needed <= available

The headroom depends on who else allocates after the master is placed:

- **transformers** generates in this process's allocator, with a KV cache that grows with the batch: 10% of the
  device's total memory ([`DEFAULT_HEADROOM_FRACTION`]) stays free for it.
- **vLLM** has already reserved `gpu_memory_utilization * total` at creation, and that share holds its weights, KV
  cache, activations and CUDA graphs. Only a fixed amount ([`ENGINE_HEADROOM_BYTES`]) is kept beside it. With
  `free ~ (1 - utilization) * total`, the largest utilization at which the master fits is
  `utilization + (free - headroom - needed) / total`, which the log states.

Example (Qwen2.5-7B, 7.62e9 parameters, 28.4 GiB master + 0.13 GiB table, 80 GiB device, utilization 0.55):
free = 36 GiB, available = 34 GiB >= 28.5 GiB: the master is on the device, and would be up to utilization 0.61.
With 10% headroom instead (8 GiB) it would not fit above utilization 0.54.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from .noise import DEFAULT_CHUNK_SIZE, NoiseSource, NoiseTable

__all__ = [
    "ACCELERATOR_CHUNK_SIZE",
    "DEFAULT_HEADROOM_FRACTION",
    "ENGINE_HEADROOM_BYTES",
    "MASTER_DEVICES",
    "MasterPlacement",
    "choose_master_device",
    "largest_engine_utilization",
    "master_bytes_needed",
    "master_device_for",
    "noise_chunk_size_for",
    "plan_master_placement",
]

logger = logging.getLogger(__name__)

MASTER_DEVICES = ("auto", "accelerator", "cpu")
# Share of the device's total memory left free after the master and table when generation shares this process's
# allocator (transformers): it allocates activations and a KV cache that grows with the batch after the centre is placed.
DEFAULT_HEADROOM_FRACTION = 0.1
# Kept free beside an engine that reserved its own share (vLLM's gpu_memory_utilization already holds its weights, KV
# cache, activations and graphs): NCCL buffers created at the first collective, cuBLAS workspaces and allocator
# fragmentation outside that share. A fixed amount: 10% of an 80 GB GPU (8 GB) would push a 7B master to the host.
ENGINE_HEADROOM_BYTES = 2 << 30
# Noise chunk length on accelerators: every chunk is one kernel launch per operation (~5-10 us), so 2**20-element
# chunks cost ~1,500 launches per member at 1.5B, more than the memory traffic itself; 2**24 (64 MiB of fp32 scratch)
# makes launches negligible. The host keeps the default (chunks that stay in cache). The chunk size is part of the
# noise's identity (each chunk has its own stream), so it is fixed per run and the same on every process.
ACCELERATOR_CHUNK_SIZE = 1 << 24
# A table slice must stay well below the table size so that slices at different offsets rarely overlap.
_TABLE_CHUNKS = 16


@dataclass(frozen=True)
class MasterPlacement:
    """The chosen device of the fp32 master (and of the noise), with the reason and the numbers, for the log.

    Attributes:
        device: Where the master lives.
        reason: Why, in words (e.g. the bytes needed against the bytes free).
        max_engine_utilization: With an engine that reserved its own share, the largest
            `vllm_gpu_memory_utilization` at which the master fits on the device (`None` otherwise).
    """

    device: torch.device
    reason: str
    max_engine_utilization: float | None = None


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.2f} GiB"


def largest_engine_utilization(
    needed_bytes: int, free_bytes: int, headroom_bytes: int, total_bytes: int, engine_utilization: float
) -> float:
    """The largest engine share at which the master fits: every 1% less for the engine frees 1% of the device.

    Args:
        needed_bytes: Bytes the master and the noise need.
        free_bytes: Bytes free now, with the engine holding `engine_utilization * total_bytes`.
        headroom_bytes: Bytes to keep free beside the engine.
        total_bytes: The device's total memory.
        engine_utilization: The engine's current share.

    Returns:
        The utilization, rounded down to a hundredth (negative or zero when no share would leave room).
    """
    exact = engine_utilization + (free_bytes - headroom_bytes - needed_bytes) / total_bytes
    return math.floor(round(exact * 100, 6)) / 100


def choose_master_device(
    requested: str,
    live_device: torch.device | str,
    needed_bytes: int,
    free_bytes: int | None,
    headroom_bytes: int = 0,
    total_bytes: int | None = None,
    engine_utilization: float | None = None,
    engine_weight_bytes: int = 0,
) -> MasterPlacement:
    """Chooses the device of the fp32 master from the request and the memory of the live weights' device.

    Args:
        requested: `"auto"` (the live device if `needed_bytes` fit in `free_bytes - headroom_bytes`, else the host),
            `"accelerator"` (the live device, whatever the memory says) or `"cpu"` (the host).
        live_device: Device of the live weights.
        needed_bytes: Bytes the master and the noise need there ([`master_bytes_needed`]).
        free_bytes: Bytes still free on `live_device` (after the engine took its share); `None` when unknown.
        headroom_bytes: Bytes to leave free for generation.
        total_bytes: The device's total memory (needed to state the largest engine share that fits).
        engine_utilization: The share an engine reserved at creation (`vllm_gpu_memory_utilization`), if any.
        engine_weight_bytes: Bytes of the engine's own weights: a share smaller than this cannot run the engine.

    Returns:
        The [`MasterPlacement`].

    Raises:
        ValueError: `requested` is not one of `"auto"`, `"accelerator"`, `"cpu"`.
    """
    if requested not in MASTER_DEVICES:
        raise ValueError(f"es_master_device must be one of {MASTER_DEVICES}, got {requested!r}.")
    live_device = torch.device(live_device)
    host = torch.device("cpu")
    if live_device.type == "cpu":
        return MasterPlacement(host, "the live weights are on the host")
    if requested == "cpu":
        return MasterPlacement(host, "es_master_device='cpu'")
    if requested == "accelerator":
        return MasterPlacement(live_device, "es_master_device='accelerator'")
    need = f"{_gib(needed_bytes)} (fp32 master + noise)"
    if free_bytes is None:
        return MasterPlacement(host, f"free memory on {live_device} is unknown; {need} kept on the host")
    available = free_bytes - headroom_bytes
    room = f"{_gib(available)} free on {live_device} ({_gib(free_bytes)} free - {_gib(headroom_bytes)} headroom"
    largest = None
    if engine_utilization is not None and total_bytes:
        largest = largest_engine_utilization(needed_bytes, free_bytes, headroom_bytes, total_bytes, engine_utilization)
        room += f", beside vLLM's {engine_utilization:.2f} share of {_gib(total_bytes)}"
    room += ")"
    if needed_bytes <= available:
        reason = f"{need} fit in {room}"
        if largest is not None:
            reason += f"; they would up to vllm_gpu_memory_utilization={largest:.2f}"
        return MasterPlacement(live_device, reason, largest)
    reason = f"{need} do not fit in {room}; perturbations run on the host, which is much slower. "
    if largest is not None and largest * total_bytes > engine_weight_bytes:
        reason += f"They would fit at vllm_gpu_memory_utilization <= {largest:.2f}"
    elif largest is not None:
        reason += (
            f"They do not fit beside any vLLM share that holds the engine's {_gib(engine_weight_bytes)} of weights "
            f"on this device (largest share {largest:.2f}): use a larger device, or keep the master on the host"
        )
    else:
        reason += "Free memory for them"
    reason += ", or set es_master_device='accelerator' to force it"
    return MasterPlacement(host, reason, largest)


def master_bytes_needed(num_parameters: int, noise: NoiseSource) -> int:
    """Bytes the fp32 master, the noise table (if any) and the per-chunk scratch take on the master's device.

    Args:
        num_parameters: Number of evolved scalars.
        noise: The noise source.

    Returns:
        `4 * num_parameters + 4 * (table size + chunk size) + 8 * chunk size`.
    """
    table_bytes = 4 * (noise.size + noise.chunk_size) if isinstance(noise, NoiseTable) else 0
    # Per-chunk scratch: one delta buffer in updates plus the noise chunk a Gaussian source draws.
    return 4 * num_parameters + table_bytes + 8 * noise.chunk_size


def plan_master_placement(
    requested: str,
    live_device: torch.device | str,
    num_parameters: int,
    noise: NoiseSource,
    free_bytes: int | None,
    total_bytes: int | None,
    engine_utilization: float | None = None,
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
    engine_weight_bytes: int = 0,
) -> MasterPlacement:
    """The placement for a model of `num_parameters` on a device with the given memory (pure: no device queried).

    Args:
        requested: `ESConfig.es_master_device`.
        live_device: Device of the live weights.
        num_parameters: Number of evolved scalars.
        noise: The noise source.
        free_bytes: Free bytes on `live_device` (after the engine took its share), `None` when unknown.
        total_bytes: Total bytes of `live_device`, `None` when unknown.
        engine_utilization: `vllm_gpu_memory_utilization` when a vLLM engine reserved its share (fixed headroom
            [`ENGINE_HEADROOM_BYTES`]); `None` for transformers (headroom `headroom_fraction * total_bytes`).
        headroom_fraction: Share of the device's memory kept for transformers generation.
        engine_weight_bytes: Bytes of the live weights (the engine's own weights, inside its share).

    Returns:
        The [`MasterPlacement`].
    """
    if engine_utilization is not None:
        headroom = ENGINE_HEADROOM_BYTES
    else:
        headroom = int(headroom_fraction * total_bytes) if total_bytes is not None else 0
    needed = master_bytes_needed(num_parameters, noise)
    return choose_master_device(
        requested,
        live_device,
        needed,
        free_bytes,
        headroom,
        total_bytes=total_bytes,
        engine_utilization=engine_utilization,
        engine_weight_bytes=engine_weight_bytes,
    )


def _free_and_total_bytes(device: torch.device) -> tuple[int | None, int | None]:
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return free, total
    return None, None


def master_device_for(
    requested: str,
    live_weights: Mapping[str, torch.Tensor],
    noise: NoiseSource,
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
    engine_utilization: float | None = None,
    memory_info: Callable[[torch.device], tuple[int | None, int | None]] | None = None,
) -> torch.device:
    """Measures the live weights' device and logs and returns the master device [`plan_master_placement`] picks.

    Call it after the engine has allocated its own memory (a vLLM engine takes `gpu_memory_utilization` of the
    device at creation) and after any other copy of the model has left the device, so that the free memory measured
    is what ES may use.

    Args:
        requested: `ESConfig.es_master_device`.
        live_weights: The tensors generation reads (all on one device).
        noise: The noise source (a table needs 4 bytes per entry on the master's device).
        headroom_fraction: Share of the device's total memory to leave free for transformers generation.
        engine_utilization: `vllm_gpu_memory_utilization` when the weights belong to a vLLM engine (the headroom is
            then [`ENGINE_HEADROOM_BYTES`]).
        memory_info: Returns `(free, total)` bytes of a device (default: `torch.cuda.mem_get_info` on CUDA, unknown
            elsewhere); tests pass simulated memory.

    Returns:
        The device for `ESCentre(master_device=...)`.
    """
    devices = {tensor.device for tensor in live_weights.values()}
    if len(devices) != 1:
        raise ValueError(f"The live weights span several devices {sorted(map(str, devices))}; ES needs one.")
    live_device = devices.pop()
    num_parameters = sum(tensor.numel() for tensor in live_weights.values())
    weight_bytes = sum(tensor.numel() * tensor.element_size() for tensor in live_weights.values())
    free, total = (memory_info or _free_and_total_bytes)(live_device)
    placement = plan_master_placement(
        requested, live_device, num_parameters, noise, free, total, engine_utilization, headroom_fraction, weight_bytes
    )
    logger.info(f"ES master and noise on {placement.device}: {placement.reason}.")
    if placement.device.type == "cpu" and live_device.type != "cpu" and requested == "auto":
        logger.warning(f"ES master falls back to the host: {placement.reason}.")
    return placement.device


def noise_chunk_size_for(device: torch.device | str, noise_type: str, table_size: int) -> int:
    """The noise chunk length for live weights on `device` (see [`ACCELERATOR_CHUNK_SIZE`]).

    Args:
        device: Device of the live weights.
        noise_type: `"table"` or `"gaussian"`.
        table_size: Size of the noise table (a table chunk stays at most 1/16 of it).

    Returns:
        [`hf_es.es.noise.DEFAULT_CHUNK_SIZE`] on the host; on accelerators [`ACCELERATOR_CHUNK_SIZE`], capped for
        tables at `table_size // 16`, never below the default.
    """
    if torch.device(device).type == "cpu":
        return DEFAULT_CHUNK_SIZE
    if noise_type == "table":
        return max(DEFAULT_CHUNK_SIZE, min(ACCELERATOR_CHUNK_SIZE, table_size // _TABLE_CHUNKS))
    return ACCELERATOR_CHUNK_SIZE

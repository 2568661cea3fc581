"""Where the ES master and the noise live: next to the live weights when they fit there, else on the host.

Perturbing, restoring and updating read the fp32 master and the noise once per parameter. When both sit on the
accelerator that holds the live weights, each of these is a few device kernels; when they sit on the host, every
member costs host arithmetic over all parameters plus a host-to-device copy (seconds per member for a 0.5B model),
which at N=32 dominates the step. The host is the fallback for accelerators too small to hold the master.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .noise import NoiseSource, NoiseTable

__all__ = ["MASTER_DEVICES", "MasterPlacement", "choose_master_device", "master_device_for"]

logger = logging.getLogger(__name__)

MASTER_DEVICES = ("auto", "accelerator", "cpu")
# Share of the device's total memory left free after the master and table: generation allocates activations (and,
# with transformers, a KV cache that grows with the batch) after the centre is placed.
DEFAULT_HEADROOM_FRACTION = 0.1


@dataclass(frozen=True)
class MasterPlacement:
    """The chosen device of the fp32 master (and of the noise), with the reason, for the log.

    Attributes:
        device: Where the master lives.
        reason: Why, in words (e.g. the bytes needed against the bytes free).
    """

    device: torch.device
    reason: str


def choose_master_device(
    requested: str,
    live_device: torch.device | str,
    needed_bytes: int,
    free_bytes: int | None,
    headroom_bytes: int = 0,
) -> MasterPlacement:
    """Chooses the device of the fp32 master from the request and the memory of the live weights' device.

    Args:
        requested: `"auto"` (the live device if `needed_bytes` fit in `free_bytes - headroom_bytes`, else the host),
            `"accelerator"` (the live device, whatever the memory says) or `"cpu"` (the host).
        live_device: Device of the live weights.
        needed_bytes: Bytes the master and the noise need there (4 per parameter + the noise table).
        free_bytes: Bytes still free on `live_device` (after the engine took its share); `None` when unknown.
        headroom_bytes: Bytes to leave free for generation.

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
    need = f"{needed_bytes / 2**30:.2f} GiB (fp32 master + noise)"
    if free_bytes is None:
        return MasterPlacement(host, f"free memory on {live_device} is unknown; {need} kept on the host")
    available = free_bytes - headroom_bytes
    if needed_bytes <= available:
        return MasterPlacement(live_device, f"{need} fit in {available / 2**30:.2f} GiB free on {live_device}")
    return MasterPlacement(
        host,
        f"{need} do not fit in {available / 2**30:.2f} GiB free on {live_device} (after "
        f"{headroom_bytes / 2**30:.2f} GiB headroom for generation); perturbations run on the host, which is much "
        "slower. Lower vllm_gpu_memory_utilization to leave room, or set es_master_device='accelerator' to force it.",
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
) -> torch.device:
    """Measures the live weights' device and logs and returns the master device [`choose_master_device`] picks.

    Call it after the engine has allocated its own memory (a vLLM engine takes `gpu_memory_utilization` of the
    device at creation), so that the free memory measured is what ES may use.

    Args:
        requested: `ESConfig.es_master_device`.
        live_weights: The tensors generation reads (all on one device).
        noise: The noise source (a table needs 4 bytes per entry on the master's device).
        headroom_fraction: Share of the device's total memory to leave free for generation.

    Returns:
        The device for `ESCentre(master_device=...)`.
    """
    devices = {tensor.device for tensor in live_weights.values()}
    if len(devices) != 1:
        raise ValueError(f"The live weights span several devices {sorted(map(str, devices))}; ES needs one.")
    live_device = devices.pop()
    num_parameters = sum(tensor.numel() for tensor in live_weights.values())
    table_bytes = 4 * (noise.size + noise.chunk_size) if isinstance(noise, NoiseTable) else 0
    # Per-chunk scratch: one delta buffer in updates plus the noise chunk a Gaussian source draws.
    needed = 4 * num_parameters + table_bytes + 8 * noise.chunk_size
    free, total = _free_and_total_bytes(live_device)
    headroom = int(headroom_fraction * total) if total is not None else 0
    placement = choose_master_device(requested, live_device, needed, free, headroom)
    logger.info(f"ES master and noise on {placement.device}: {placement.reason}.")
    if placement.device.type == "cpu" and live_device.type != "cpu" and requested == "auto":
        logger.warning(f"ES master falls back to the host: {placement.reason}")
    return placement.device

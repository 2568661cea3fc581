"""The ES centre: live model weights plus an fp32 master copy, perturbed, restored and updated in place."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence

import torch

from .noise import NoiseSource

__all__ = [
    "ESCentre",
    "check_same_noise_on_every_process",
    "digest_noise",
    "find_disagreeing_processes",
    "noise_digest",
]

# Enough elements to cover full chunks and partial ones (different kernel launch shapes) of several tensors.
DIGEST_ELEMENTS = 1 << 22


class ESCentre:
    """Holds the centre theta of the search distribution and moves the live weights around it.

    The master copy (float32) is the truth: members are written as `master + scale * eps` straight into the live
    tensors (whatever their dtype), and restoring copies the master back, so any number of perturb/restore cycles
    leaves the centre bit-identical, in bf16 or fp16 as in fp32. Updates accumulate in the master, where steps far
    below bf16 resolution (alpha/N ~ 1e-5) are not lost.

    Args:
        parameters: Live tensors to evolve, keyed by stable name (Hugging Face parameter names). Each must be
            contiguous; tied weights must appear once.
        noise: Where directions come from.
        master_device: Device of the master copy (defaults to each tensor's device; `"cpu"` saves accelerator
            memory at the cost of a host-to-device copy per perturbation).
    """

    def __init__(
        self,
        parameters: Mapping[str, torch.Tensor],
        noise: NoiseSource,
        master_device: torch.device | str | None = None,
    ):
        self.parameters = dict(parameters)
        self.noise = noise
        for name, tensor in self.parameters.items():
            if not tensor.is_contiguous():
                raise ValueError(f"Parameter {name} is not contiguous; ES perturbs flat views in place.")
            if not tensor.is_floating_point():
                raise ValueError(f"Parameter {name} has dtype {tensor.dtype}; only floating-point tensors evolve.")
        with torch.no_grad():
            self.master = {
                name: tensor.detach().to(device=master_device or tensor.device, dtype=torch.float32, copy=True)
                for name, tensor in self.parameters.items()
            }
        for device in {master.device for master in self.master.values()}:
            noise.prepare(device)

    @property
    def master_device(self) -> torch.device:
        """Device of the fp32 master (and of the noise it is perturbed with)."""
        return next(iter(self.master.values())).device

    @property
    def num_parameters(self) -> int:
        """Number of evolved scalars."""
        return sum(t.numel() for t in self.master.values())

    @torch.no_grad()
    def perturb_(self, seed: int, scale: float) -> None:
        """Writes `master + scale * eps(seed)` into the live weights (no need to restore in between members).

        Args:
            seed: Seed of the direction.
            scale: `sign * sigma`.
        """
        # One code path for every placement: the member is computed in fp32 where the master lives, then cast into
        # the live tensor, so a master on the host and one next to the weights give bit-identical members.
        for name, live in self.parameters.items():
            self._perturb_tensor_(name, live, seed, scale)

    def _perturb_tensor_(self, name: str, live: torch.Tensor, seed: int, scale: float) -> None:
        """Writes one tensor of `master + scale * eps(seed)`; subclasses change the direction (see `low_rank`)."""
        flat_live, flat_master = live.view(-1), self.master[name].view(-1)
        chunks = self.noise.chunks(seed, name, flat_live.numel(), flat_master.device)
        if flat_live.device == flat_master.device:
            # One kernel per chunk: the sum is computed in fp32 (the inputs' dtype) and rounded once on the store into
            # the live dtype, exactly as an fp32 add followed by a cast copy (tested bit-identical in bf16/fp16/fp32).
            for start, end, eps in chunks:
                torch.add(flat_master[start:end], eps, alpha=scale, out=flat_live[start:end])
            return
        scratch = self._scratch(flat_master.device)
        for start, end, eps in chunks:
            member = torch.add(flat_master[start:end], eps, alpha=scale, out=scratch[: end - start])
            flat_live[start:end].copy_(member)

    def _scratch(self, device: torch.device) -> torch.Tensor:
        """One fp32 chunk-sized buffer per device, reused by every perturbation."""
        buffers = self.__dict__.setdefault("_scratch_buffers", {})
        if device not in buffers:
            buffers[device] = torch.empty(self.noise.chunk_size, dtype=torch.float32, device=device)
        return buffers[device]

    @torch.no_grad()
    def restore_(self) -> None:
        """Copies the exact centre back into the live weights."""
        for name, live in self.parameters.items():
            live.copy_(self.master[name])

    @torch.no_grad()
    def update_(self, seeds: list[int], coefficients: list[float], learning_rate: float) -> float:
        """Moves the centre: `theta += learning_rate * sum_j coefficients[j] * eps(seeds[j])`, then restores.

        Args:
            seeds: Seeds of the directions.
            coefficients: Weight of each direction (from [`estimate_update`]).
            learning_rate: alpha.

        Returns:
            The L2 norm of the applied update (computed in float64 over all evolved scalars).

        Raises:
            `FloatingPointError`: a coefficient or the learning rate is not finite (or would overflow float32); the
                centre is left unchanged.
        """
        if len(seeds) != len(coefficients):
            raise ValueError(f"Got {len(seeds)} seeds but {len(coefficients)} coefficients.")
        # Checked before the master is touched, so a bad update never reaches the weights.
        # A step of 1e30 per unit of noise would overflow float32 weights: as bad as NaN.
        bad = [i for i, c in enumerate(coefficients) if not (math.isfinite(c) and abs(learning_rate * c) < 1e30)]
        if bad or not math.isfinite(learning_rate):
            raise FloatingPointError(
                f"Refusing a non-finite ES update: learning_rate={learning_rate}, non-finite or overflowing "
                f"coefficients at {bad[:5]} (e.g. {[coefficients[i] for i in bad[:3]]}). The centre is unchanged."
            )
        squared_norm = 0.0
        if seeds and learning_rate != 0.0:
            steps = [learning_rate * coefficient for coefficient in coefficients]
            # Accumulated on the master's device, read once at the end: a host sync per chunk (~1,800 per step at
            # 1.5B) would stall the device queue every time.
            total = torch.zeros((), dtype=torch.float64, device=self.master_device)
            for name, master in self.master.items():
                total += self._update_tensor_(name, master, seeds, steps)
            squared_norm = float(total)
        self.restore_()
        if not math.isfinite(squared_norm):
            raise FloatingPointError(
                f"The ES update overflowed (squared norm {squared_norm}); the centre is not finite."
            )
        return math.sqrt(squared_norm)

    def _update_tensor_(
        self, name: str, master: torch.Tensor, seeds: list[int], steps: list[float]
    ) -> torch.Tensor | float:
        """Adds `sum_j steps[j] * eps(seeds[j])` to one master tensor; returns the squared norm of what was added.

        The norm is a float64 tensor on the master's device (no host sync), or `0.0` when nothing was added.
        """
        flat_master = master.view(-1)
        buffer = torch.empty(
            min(self.noise.chunk_size, flat_master.numel()), dtype=torch.float32, device=master.device
        )
        squared_norm = torch.zeros((), dtype=torch.float64, device=master.device)
        streams = [self.noise.chunks(seed, name, flat_master.numel(), flat_master.device) for seed in seeds]
        # Pull one direction's chunk at a time: with Gaussian noise each chunk is freshly drawn, so holding all N at
        # once would cost N chunks of extra memory.
        for start, end, eps in streams[0]:
            delta = buffer[: end - start]
            torch.mul(eps, steps[0], out=delta)
            for stream, step in zip(streams[1:], steps[1:]):
                eps = next(stream)[2]
                delta.add_(eps, alpha=step)
            del eps
            flat_master[start:end] += delta
            # The fp32 norm squared in float64: the same numbers the host computed before, summed in the same order.
            squared_norm += torch.linalg.vector_norm(delta).double().square()
        return squared_norm

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The float32 master weights, for checkpoints."""
        return self.master

    @torch.no_grad()
    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Loads master weights (e.g. from a checkpoint) and writes them into the live weights.

        Args:
            state_dict: Float32 tensors keyed by the same names as `parameters`.
        """
        missing = set(self.master) - set(state_dict)
        unexpected = set(state_dict) - set(self.master)
        if missing or unexpected:
            raise ValueError(
                f"ES master weights do not match the model: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}."
            )
        for name, master in self.master.items():
            master.copy_(state_dict[name])
        self.restore_()


@torch.no_grad()
def noise_digest(centre: ESCentre, seed: int, max_elements: int = DIGEST_ELEMENTS) -> str:
    """Hashes the first `max_elements` noise values of direction `seed`, as drawn on the master's device.

    Two processes that would apply different noise for the same seed (e.g. `torch.randn` on CUDA GPUs of different
    models, whose launch grid follows the SM count) get different digests. Each tensor contributes its first chunk
    (so tensors shorter than a chunk, drawn with other launch shapes, are covered too) until `max_elements` is reached.
    A centre whose tensors live elsewhere (a tensor-parallel engine's workers) provides its own `noise_digest(seed)`.

    Args:
        centre: The centre whose noise source and master device to use.
        seed: The direction, e.g. the first member's seed.
        max_elements: How many noise values to hash (the bits of each float32 value).

    Returns:
        A hex digest.
    """
    own = getattr(centre, "noise_digest", None)
    if own is not None:
        return own(seed, max_elements)
    return digest_noise(
        centre.noise,
        {name: (master.numel(), master.device) for name, master in centre.master.items()},
        seed,
        max_elements,
    )


@torch.no_grad()
def digest_noise(
    noise: NoiseSource,
    tensors: Mapping[str, tuple[int, torch.device]],
    seed: int,
    max_elements: int = DIGEST_ELEMENTS,
) -> str:
    """[`noise_digest`] for whole tensors given by name, number of elements and the device their noise is drawn on.

    Args:
        noise: The noise source.
        tensors: HF name -> (number of elements of the whole tensor, device), in the centre's order.
        seed: The direction.
        max_elements: How many noise values to hash.

    Returns:
        A hex digest.
    """
    digest = hashlib.blake2b(digest_size=16)
    remaining = max_elements
    for name, (numel, device) in tensors.items():
        if remaining <= 0:
            break
        _, end, eps = noise.chunk(seed, name, numel, 0, device)
        values = eps[: min(end, remaining)].cpu().contiguous()
        digest.update(name.encode("utf-8"))
        digest.update(values.view(torch.int32).numpy().tobytes())
        remaining -= values.numel()
    return digest.hexdigest()


def find_disagreeing_processes(digests: Sequence[str]) -> list[int]:
    """Indices of the processes whose digest differs from process 0's (empty when all agree).

    Args:
        digests: One digest per process, in process order.

    Returns:
        The disagreeing process indices.
    """
    return [rank for rank, digest in enumerate(digests) if digest != digests[0]]


def check_same_noise_on_every_process(
    centre: ESCentre, seed: int, gather: Callable[[list[str]], list[str]], devices: Sequence[str] | None = None
) -> None:
    """Stops the run when processes would draw different noise for the same seed (and so drift apart silently).

    Every process applies every update itself, so all must regenerate bit-identical noise. The noise table is
    immune (drawn on the host from a fixed seed by torch's CPU generator, then copied); `GaussianNoise` is not: on
    CUDA its values depend on the GPU model, and on the host on which vectorised kernel torch picks for the CPU.

    Args:
        centre: This process's centre.
        seed: The direction to compare (e.g. the first member's seed).
        gather: All-gathers a list of objects from every process (e.g. `accelerate.utils.gather_object`).
        devices: Optional description of each process's device, for the error message (gathered the same way
            when `None`).

    Raises:
        RuntimeError: Naming the processes whose noise differs from process 0's.
    """
    digests = gather([noise_digest(centre, seed)])
    bad = find_disagreeing_processes(digests)
    if not bad:
        return
    where = devices if devices is not None else gather([_device_name(centre.master_device)])
    raise RuntimeError(
        f"Processes {bad} draw different ES noise than process 0 for the same seed (devices: "
        f"{dict(enumerate(where))}), so they would apply different updates and their centres would drift apart. "
        "torch.randn on CUDA depends on the GPU model: use noise_type='table' (drawn on the host, identical "
        "everywhere), or run every process on the same GPU model."
    )


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)

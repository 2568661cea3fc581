"""Seed-regenerated Gaussian noise for ES perturbations.

Noise is never stored: every direction is regenerated on demand from a 64-bit seed and the stable name of the
parameter it applies to. Two implementations share one interface, [`NoiseSource.chunks`]:

- [`GaussianNoise`]: exact i.i.d. N(0, 1), drawn with `torch.randn` from a generator seeded per (seed, name, chunk).
  Cheap on CUDA; on a small CPU it costs ~1-2 s for a 135M-parameter model. CUDA's `randn` output depends on the GPU
  model (its launch grid follows the SM count), so processes on different GPU models draw different noise.
- [`NoiseTable`]: the shared noise table of Salimans et al. (2017). One table of N(0, 1) values is drawn once
  per process on the host from a fixed seed (identical on every machine), standardised, and copied once to each
  device; a direction is a set of slices of that table at offsets derived from (seed, name, chunk). Perturbing is
  then a memory-bound `add`, with no random number generation in the step.

Both split a tensor into chunks of at most `chunk_size` elements, so memory stays bounded for any model size, and
give each chunk its own stream, so noise is independent across tensors and members.
"""

from __future__ import annotations

import hashlib
import math
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

import torch

from .registry import Registry

__all__ = [
    "NOISE_SOURCES",
    "GaussianNoise",
    "NoiseSource",
    "NoiseTable",
    "make_noise_source",
    "stable_seed",
    "table_size_for_model",
]

DEFAULT_CHUNK_SIZE = 1 << 20
DEFAULT_TABLE_SIZE = 1 << 25
# Auto-sized tables hold about 1/16 of the model's parameter count (1/16 of the fp32 master's bytes), within
# [MIN_TABLE_SIZE, DEFAULT_TABLE_SIZE]. The floor keeps 4 chunks per table, so slices at different offsets rarely
# coincide and the noise statistics (mean, variance, correlation between tensors and members) hold as tested.
MIN_TABLE_SIZE = 1 << 22
TABLE_FRACTION_OF_PARAMETERS = 16


def table_size_for_model(num_parameters: int) -> int:
    """The noise-table size for a model: a power of two near 1/16 of its parameter count, in [2**22, 2**25].

    A fixed 2**25 table (128 MiB) costs 24% of a 135M-parameter model's fp32 master, enough to break "ES peak memory
    <= inference peak + one copy of the weights"; sized this way it costs at most ~1/16 of the master (plus the
    16 MiB floor for models under ~67M parameters).

    Args:
        num_parameters: Number of evolved scalars.

    Returns:
        Number of float32 values for [`NoiseTable`].
    """
    target = max(1, num_parameters // TABLE_FRACTION_OF_PARAMETERS)
    return min(DEFAULT_TABLE_SIZE, max(MIN_TABLE_SIZE, 1 << (target.bit_length() - 1)))


def stable_seed(*parts: int | str) -> int:
    """Hashes integers and strings into a 63-bit seed that is identical across processes, machines and runs.

    Python's `hash()` is salted per process for strings, so it must never key the noise; BLAKE2b is stable.

    Args:
        *parts: Integers and strings to combine, e.g. `(noise_seed, step, member)` or `(member_seed, name, chunk)`.

    Returns:
        A non-negative integer below 2**63 (a valid `torch.Generator.manual_seed` value).
    """
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        # Type-tag each part so that (1, "2") and ("1", 2) never collide.
        if isinstance(part, str):
            digest.update(b"s" + struct.pack("<Q", len(part)) + part.encode("utf-8"))
        else:
            digest.update(b"i" + struct.pack("<q", int(part)))
    return int.from_bytes(digest.digest(), "little") >> 1


class NoiseSource(ABC):
    """Regenerates the N(0, I) direction of one member, tensor by tensor, in bounded chunks.

    Args:
        chunk_size: Largest number of elements produced at once.
    """

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE):
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}.")
        self.chunk_size = chunk_size

    def chunks(
        self, seed: int, name: str, numel: int, device: torch.device | str = "cpu"
    ) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Yields the direction for one flattened tensor.

        Args:
            seed: The member's seed (see [`member_seed`]).
            name: Stable parameter name (the Hugging Face name, e.g. `model.layers.0.mlp.up_proj.weight`).
            numel: Number of elements of the tensor.
            device: Where the noise should live.

        Returns:
            An iterator of `(start, end, noise)` with `noise` a float32 tensor of `end - start` elements. The tensor
            may be a view of shared storage: read it, never modify it.
        """
        for index in range(self.num_chunks(numel)):
            yield self.chunk(seed, name, numel, index, device)

    def num_chunks(self, numel: int) -> int:
        """Number of chunks a flattened tensor of `numel` elements is split into."""
        return -(-numel // self.chunk_size)

    def chunk(
        self, seed: int, name: str, numel: int, index: int, device: torch.device | str = "cpu"
    ) -> tuple[int, int, torch.Tensor]:
        """Regenerates chunk `index` of the direction of one flattened tensor alone (what [`chunks`] yields).

        Tensor-parallel shards use it to draw only the chunks that overlap their slice ([`hf_es.es.sharding`]).

        Args:
            seed: The member's seed.
            name: Stable parameter name.
            numel: Number of elements of the whole tensor.
            index: Which chunk, in `[0, num_chunks(numel))`.
            device: Where the noise should live.

        Returns:
            `(start, end, noise)` as yielded by [`chunks`].
        """
        start = index * self.chunk_size
        end = min(start + self.chunk_size, numel)
        return start, end, self._chunk(stable_seed(seed, name, index), end - start, torch.device(device))

    def full(self, seed: int, name: str, shape: torch.Size | tuple[int, ...], device: torch.device | str = "cpu"):
        """Materialises the whole direction of one tensor (tests and small tensors; the hot path uses `chunks`).

        Args:
            seed: The member's seed.
            name: Stable parameter name.
            shape: Shape of the tensor.
            device: Where the noise should live.

        Returns:
            A float32 tensor of the given shape.
        """
        numel = torch.Size(shape).numel()
        out = torch.empty(numel, dtype=torch.float32, device=device)
        for start, end, noise in self.chunks(seed, name, numel, device):
            out[start:end] = noise
        return out.view(shape)

    def prepare(self, device: torch.device | str = "cpu") -> None:  # noqa: B027 (optional hook, no-op by default)
        """Does any one-off set-up for `device` now, so that it is not billed to the first perturbation."""

    @abstractmethod
    def _chunk(self, chunk_seed: int, length: int, device: torch.device) -> torch.Tensor: ...


class GaussianNoise(NoiseSource):
    """Exact i.i.d. standard normal noise from `torch.randn`, one generator seed per chunk.

    Args:
        chunk_size: Largest number of elements produced at once.
    """

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE):
        super().__init__(chunk_size)
        self._generators: dict[torch.device, torch.Generator] = {}

    def _chunk(self, chunk_seed: int, length: int, device: torch.device) -> torch.Tensor:
        generator = self._generators.get(device)
        if generator is None:
            generator = self._generators[device] = torch.Generator(device=device)
        generator.manual_seed(chunk_seed)
        return torch.randn(length, generator=generator, device=device, dtype=torch.float32)


_TABLES: dict[tuple[int, int, int, str], torch.Tensor] = {}


class NoiseTable(NoiseSource):
    """Salimans et al.'s shared noise table: directions are slices of one fixed table of N(0, 1) values.

    The table is drawn on CPU from `table_seed` (so every process and machine holds the same values, whatever its
    accelerator), standardised to zero mean and unit variance over the whole table, cached per process, and copied
    once to each device that asks for it. Each chunk of each tensor reads a slice at an offset uniformly derived from
    (member seed, name, chunk); the table is read circularly (its first `chunk_size` values are repeated after its
    end), so every table value is equally likely at every coordinate. Together these make the noise unbiased:
    every member reads the same table, so a non-zero table mean (-1.6e-4 for a raw 2**25 draw) or under-sampled
    table ends would be a bias shared by all directions, which z-score and rank shaping cancel but
    `estimator="antithetic"` with `fitness_shaping="none"` turns into drift along the all-equal direction
    (sum(eps) / sqrt(D) ~ -1.6e-4 * sqrt(D), about -7 at D = 2e9). Marginals are N(0, 1) and slices at different
    offsets are uncorrelated, but a table smaller than the model means coordinates can share values, so this is an
    approximation of i.i.d. noise that trades exactness for speed. Use [`GaussianNoise`] when that matters.

    Args:
        size: Number of float32 values in the table (memory: 4 * (size + chunk_size) bytes per device).
        table_seed: Seed of the table itself.
        chunk_size: Largest slice length; must be smaller than `size`.
    """

    def __init__(self, size: int = DEFAULT_TABLE_SIZE, table_seed: int = 0, chunk_size: int = DEFAULT_CHUNK_SIZE):
        super().__init__(chunk_size)
        if size <= chunk_size:
            raise ValueError(
                f"noise_table_size ({size}) must be larger than the chunk size ({chunk_size}); use at least "
                f"{chunk_size * 16} so that slices rarely overlap."
            )
        self.size = size
        self.table_seed = table_seed

    def table(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """Returns the (circularly padded) table on `device`, drawing it on the host and copying it on first use."""
        device = torch.device(device)
        key = (self.size, self.table_seed, self.chunk_size, str(device))
        if key not in _TABLES:
            cpu_key = (self.size, self.table_seed, self.chunk_size, "cpu")
            if cpu_key not in _TABLES:
                generator = torch.Generator().manual_seed(self.table_seed)
                padded = torch.empty(self.size + self.chunk_size, dtype=torch.float32)
                _standardised_(torch.randn(self.size, generator=generator, out=padded[: self.size]))
                # Circular padding: a slice starting anywhere in [0, size) is contiguous, no wrap-around copy.
                padded[self.size :] = padded[: self.chunk_size]
                _TABLES[cpu_key] = padded
            _TABLES[key] = _TABLES[cpu_key].to(device)
        return _TABLES[key]

    def prepare(self, device: torch.device | str = "cpu") -> None:
        self.table(device)

    def _chunk(self, chunk_seed: int, length: int, device: torch.device) -> torch.Tensor:
        offset = chunk_seed % self.size
        return self.table(device)[offset : offset + length]


def _standardised_(values: torch.Tensor) -> torch.Tensor:
    """Shifts and scales `values` in place to zero mean and unit (population) variance (moments in float64)."""
    mean = float(values.sum(dtype=torch.float64)) / values.numel()
    values.sub_(mean)
    std = math.sqrt(float(values.square().sum(dtype=torch.float64)) / values.numel())
    return values.div_(std)


NOISE_SOURCES: Registry[Callable[..., NoiseSource]] = Registry("noise_type")
"""`ESConfig.noise_type` -> `factory(table_size, chunk_size, num_parameters)` returning a [`NoiseSource`]."""


@NOISE_SOURCES.register("table")
def _noise_table(table_size: int | None, chunk_size: int, num_parameters: int | None) -> NoiseTable:
    if table_size is None:
        if num_parameters is None:
            raise ValueError("make_noise_source(table_size=None) sizes the table to the model: pass num_parameters.")
        table_size = table_size_for_model(num_parameters)
    return NoiseTable(size=table_size, chunk_size=chunk_size)


@NOISE_SOURCES.register("gaussian")
def _gaussian_noise(table_size: int | None, chunk_size: int, num_parameters: int | None) -> GaussianNoise:
    return GaussianNoise(chunk_size=chunk_size)  # no table: its size and the model's do not matter


def make_noise_source(
    noise_type: str,
    table_size: int | None = DEFAULT_TABLE_SIZE,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    num_parameters: int | None = None,
) -> NoiseSource:
    """Builds the noise source named by `ESConfig.noise_type` (a key of [`NOISE_SOURCES`]).

    Args:
        noise_type: `"table"`, `"gaussian"` or any registered name.
        table_size: Size of the noise table (only for `"table"`); `None` sizes it to the model with
            [`table_size_for_model`].
        chunk_size: Largest number of elements produced at once.
        num_parameters: Number of evolved scalars (needed when `table_size` is `None`).

    Returns:
        The [`NoiseSource`].
    """
    return NOISE_SOURCES.resolve(noise_type)(table_size, chunk_size, num_parameters)

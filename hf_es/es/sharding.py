"""Tensor-parallel shards of the ES noise: each rank regenerates exactly its slice of the whole tensor's direction.

A tensor-parallel engine splits a Hugging Face tensor of shape `shape` across ranks; each rank holds
`whole.narrow(dim, start, size)` (a [`ShardSpec`]). For ES to be the same whatever the TP size, the rank must add the
values that the *whole* tensor would get from [`NoiseSource.chunks`], so noise stays keyed by (seed, HF name, chunk of
the flattened whole tensor). [`shard_chunks`] yields those values in the shard's own flat order, in pieces of at most
one chunk, and [`ShardedNoise`] wraps a noise source so that an unmodified [`ESCentre`] over shard tensors perturbs,
restores and updates each shard as the unsharded centre would.

Cost of a shard's noise (what [`drawn_elements`] counts). The whole tensor is viewed as `[outer, C]` with
`outer = prod(shape[:dim])`; the shard is the column block `[c0, c1)` of every row.

- Column-parallel slices (`dim=0`: q/k/v, gate/up, vocab-parallel embeddings and LM head) are one contiguous range of
  the flattened tensor: a rank draws only the chunks that overlap it (at most two partial chunks more than its share)
  and, with the noise table, reads them as views with no copy.
- Row-parallel slices (`dim=1`: o_proj, down_proj) are strided: every chunk of the whole tensor holds a piece of the
  shard. With [`NoiseTable`] a chunk is a view of the table, so the extra cost is one strided copy of the shard's own
  elements; with [`GaussianNoise`] `torch.randn` cannot skip values, so each rank draws the whole tensor's noise and
  keeps 1/TP of it (TP times the random numbers of an unsharded rank for these layers, e.g. 1.3x the shard's noise
  for a Llama-7B layer at TP 2, 3.1x at TP 8). Prefer `noise_type="table"` with TP > 1.
- Replicated tensors (norms, row-parallel biases) are drawn whole on every rank, as they are stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from .noise import NoiseSource

__all__ = [
    "ShardSpec",
    "ShardedNoise",
    "assemble_whole",
    "column_parallel_spec",
    "drawn_elements",
    "replicated_spec",
    "row_parallel_spec",
    "shard_chunks",
    "vocab_parallel_spec",
]

# vLLM pads vocab-parallel embeddings and LM heads to a multiple of this many rows before splitting them.
VOCAB_PADDING = 64


@dataclass(frozen=True)
class ShardSpec:
    """Which part of a whole Hugging Face tensor a rank holds: `whole.narrow(dim, start, size)`.

    Args:
        shape: Shape of the whole tensor.
        dim: The split dimension (`None`: the rank holds the whole tensor, replicated).
        start: First index of the slice along `dim`.
        size: Length of the slice along `dim` (`None`: up to the end).
        owner: Whether this rank is the one that reports this slice (update norms, gathers). Slices held by several
            ranks (replicated tensors, KV heads replicated when TP exceeds their count) have one owner.
    """

    shape: tuple[int, ...]
    dim: int | None = None
    start: int = 0
    size: int | None = None
    owner: bool = True

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        if self.dim is None:
            object.__setattr__(self, "start", 0)
            object.__setattr__(self, "size", None)
            return
        if not 0 <= self.dim < len(self.shape):
            raise ValueError(f"Shard dim {self.dim} is out of range for shape {self.shape}.")
        size = self.shape[self.dim] - self.start if self.size is None else self.size
        if self.start < 0 or size < 0 or self.start + size > self.shape[self.dim]:
            raise ValueError(f"Shard [{self.start}, {self.start + size}) exceeds dim {self.dim} of {self.shape}.")
        object.__setattr__(self, "size", size)

    @property
    def shard_shape(self) -> tuple[int, ...]:
        """Shape of the rank's slice."""
        if self.dim is None:
            return self.shape
        return self.shape[: self.dim] + (self.size,) + self.shape[self.dim + 1 :]

    @property
    def numel(self) -> int:
        """Number of elements of the rank's slice."""
        return math.prod(self.shard_shape)

    def columns(self) -> tuple[int, int, int]:
        """The whole tensor as `[outer, row]` rows: `(row, c0, c1)`, the shard being columns `[c0, c1)` of each."""
        if self.dim is None:
            row = math.prod(self.shape)
            return row, 0, row
        inner = math.prod(self.shape[self.dim + 1 :])
        return self.shape[self.dim] * inner, self.start * inner, (self.start + self.size) * inner

    def slice_of(self, whole: torch.Tensor) -> torch.Tensor:
        """The rank's slice of a whole tensor (a view)."""
        if tuple(whole.shape) != self.shape:
            raise ValueError(f"Expected a tensor of shape {self.shape}, got {tuple(whole.shape)}.")
        return whole if self.dim is None else whole.narrow(self.dim, self.start, self.size)


def replicated_spec(shape: Sequence[int], rank: int) -> ShardSpec:
    """A tensor every rank holds whole (norms, row-parallel biases); rank 0 reports it."""
    return ShardSpec(tuple(shape), owner=rank == 0)


def column_parallel_spec(shape: Sequence[int], rank: int, tp_size: int, replicas: int = 1) -> ShardSpec:
    """Rank `rank`'s block of rows of a column-parallel weight or bias (one component of a fused layer).

    Args:
        shape: Whole shape of the component (e.g. `k_proj.weight`).
        rank: Tensor-parallel rank.
        tp_size: Tensor-parallel size.
        replicas: How many consecutive ranks hold the same block (vLLM's `num_kv_head_replicas` when the TP size
            exceeds the number of KV heads; 1 otherwise).

    Returns:
        The [`ShardSpec`] along dim 0; the first of the replicas owns it.
    """
    blocks = tp_size // replicas
    if blocks * replicas != tp_size or shape[0] % blocks:
        raise ValueError(f"Cannot split {shape[0]} rows across {tp_size} ranks with {replicas} replicas each.")
    size = shape[0] // blocks
    return ShardSpec(tuple(shape), 0, (rank // replicas) * size, size, owner=rank % replicas == 0)


def row_parallel_spec(shape: Sequence[int], rank: int, tp_size: int) -> ShardSpec:
    """Rank `rank`'s block of input columns of a row-parallel weight (o_proj, down_proj)."""
    if shape[1] % tp_size:
        raise ValueError(f"Cannot split {shape[1]} input columns across {tp_size} ranks.")
    size = shape[1] // tp_size
    return ShardSpec(tuple(shape), 1, rank * size, size)


def vocab_parallel_spec(shape: Sequence[int], rank: int, tp_size: int, padding: int = VOCAB_PADDING) -> ShardSpec:
    """Rank `rank`'s real rows of a vocab-parallel embedding or LM head (vLLM's `VocabParallelEmbedding`).

    vLLM pads the vocabulary to a multiple of `padding`, splits the padded rows evenly, and each rank's padding rows
    (past the real vocabulary) are not part of the Hugging Face tensor: the spec covers the real rows only, which
    are the first rows of the rank's parameter.
    """
    padded = -(-shape[0] // padding) * padding
    if padded % tp_size:
        raise ValueError(f"Cannot split a vocabulary padded to {padded} rows across {tp_size} ranks.")
    per_rank = padded // tp_size
    start = min(rank * per_rank, shape[0])
    return ShardSpec(tuple(shape), 0, start, min(per_rank, shape[0] - start))


def _chunk_range(spec: ShardSpec, chunk_size: int) -> range:
    """Indices of the whole tensor's chunks that hold part of the shard (all of them for strided slices)."""
    row, c0, c1 = spec.columns()
    outer = math.prod(spec.shape) // row if row else 0
    if c1 == c0 or outer == 0:
        return range(0)
    if outer == 1 or c1 - c0 == row:
        first, last = c0, (outer - 1) * row + c1  # one contiguous range of the flattened tensor
        return range(first // chunk_size, -(-last // chunk_size))
    return range(-(-outer * row // chunk_size))


def drawn_elements(spec: ShardSpec, chunk_size: int) -> int:
    """How many noise values a rank draws for its shard with [`GaussianNoise`] (whole chunks; the table only reads).

    Args:
        spec: The shard.
        chunk_size: The noise source's chunk size.

    Returns:
        The number of values in the chunks [`shard_chunks`] regenerates.
    """
    numel = math.prod(spec.shape)
    return sum(min(chunk_size, numel - index * chunk_size) for index in _chunk_range(spec, chunk_size))


def _shard_index(position: int, row: int, c0: int, c1: int) -> int:
    """Number of shard elements before flat position `position` of the whole tensor."""
    return (position // row) * (c1 - c0) + min(max(position % row - c0, 0), c1 - c0)


def _strided_piece(values: torch.Tensor, start: int, row: int, c0: int, c1: int) -> torch.Tensor:
    """The shard's elements (columns `[c0, c1)` of rows of length `row`) among `values` = whole[start:start+len]."""
    end = start + values.numel()
    pieces = []
    head_end = min(end, -(-start // row) * row)  # end of the partial first row
    if head_end > start:
        offset = start % row
        lo, hi = max(c0, offset), min(c1, offset + head_end - start)
        if hi > lo:
            pieces.append(values[lo - offset : hi - offset])
    full_rows = (end - head_end) // row
    if full_rows:
        body = values[head_end - start : head_end - start + full_rows * row].view(full_rows, row)
        pieces.append(body[:, c0:c1].reshape(-1))
    tail_start = head_end + full_rows * row
    if end > tail_start:
        hi = min(c1, end - tail_start)
        if hi > c0:
            pieces.append(values[tail_start - start + c0 : tail_start - start + hi])
    return pieces[0].contiguous() if len(pieces) == 1 else torch.cat(pieces)


def shard_chunks(
    noise: NoiseSource, seed: int, name: str, spec: ShardSpec, device: torch.device | str = "cpu"
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Yields the shard's part of the whole tensor's direction, equal to the matching slice of `noise.full(...)`.

    Args:
        noise: The noise source of the unsharded run.
        seed: The member's seed.
        name: The whole tensor's Hugging Face name (the noise key).
        spec: Which slice this rank holds.
        device: Where the noise should live.

    Returns:
        An iterator of `(start, end, values)` over the shard's flattened elements (row-major in the shard's shape),
        in pieces of at most `noise.chunk_size` values; `values` may be a view of shared storage: never modify it.
    """
    numel = math.prod(spec.shape)
    row, c0, c1 = spec.columns()
    contiguous = numel == row or c1 - c0 == row
    for index in _chunk_range(spec, noise.chunk_size):
        start, end, values = noise.chunk(seed, name, numel, index, device)
        first, last = _shard_index(start, row, c0, c1), _shard_index(end, row, c0, c1)
        if last == first:
            continue
        if contiguous:
            lo = max(start, c0 if numel == row else 0)
            yield first, last, values[lo - start : lo - start + last - first]
        else:
            yield first, last, _strided_piece(values, start, row, c0, c1)


class ShardedNoise(NoiseSource):
    """A noise source for shard tensors: `chunks(seed, name, ...)` yields the shard's slice of the whole direction.

    An [`ESCentre`] built on a rank's shard tensors (keyed by the whole tensors' HF names) with this source perturbs,
    restores and updates them exactly as the unsharded centre does its slices.

    Args:
        noise: The noise source of the unsharded run.
        specs: HF name -> the rank's [`ShardSpec`] of that tensor.
    """

    def __init__(self, noise: NoiseSource, specs: Mapping[str, ShardSpec]):
        super().__init__(noise.chunk_size)
        self.noise = noise
        self.specs = dict(specs)

    def chunks(
        self, seed: int, name: str, numel: int, device: torch.device | str = "cpu"
    ) -> Iterator[tuple[int, int, torch.Tensor]]:
        spec = self.specs[name]
        if numel != spec.numel:
            raise ValueError(f"{name}: the shard has {spec.numel} elements, not {numel}.")
        return shard_chunks(self.noise, seed, name, spec, device)

    def chunk(
        self, seed: int, name: str, numel: int, index: int, device: torch.device | str = "cpu"
    ) -> tuple[int, int, torch.Tensor]:
        raise NotImplementedError("A shard's noise comes in shard pieces: use chunks().")

    def prepare(self, device: torch.device | str = "cpu") -> None:
        self.noise.prepare(device)

    def _chunk(self, chunk_seed: int, length: int, device: torch.device) -> torch.Tensor:
        raise NotImplementedError("A shard's noise comes in shard pieces: use chunks().")


def assemble_whole(pieces: Sequence[tuple[ShardSpec, torch.Tensor]]) -> torch.Tensor:
    """Concatenates ranks' shards of one tensor back into the whole tensor (checkpoints, drift analysis).

    Args:
        pieces: `(spec, shard)` of every rank (replicated slices may appear several times; any copy is taken).

    Returns:
        The whole float32 tensor.

    Raises:
        ValueError: If the shards do not cover the whole tensor.
    """
    shape = pieces[0][0].shape
    whole = torch.empty(shape, dtype=torch.float32)
    covered = torch.zeros(shape, dtype=torch.bool)
    for spec, shard in pieces:
        if spec.shape != shape or tuple(shard.shape) != spec.shard_shape:
            raise ValueError(f"Shard of shape {tuple(shard.shape)} does not match {spec}.")
        spec.slice_of(whole).copy_(shard)
        spec.slice_of(covered).fill_(True)
    if not bool(covered.all()):
        raise ValueError(f"The shards of a tensor of shape {shape} do not cover it.")
    return whole

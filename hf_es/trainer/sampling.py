"""The training data order of ES: every process reads the *same* batch (ES shards members, not prompts), in an order
that depends only on (seed, epoch), so a resumed run sees the batches an uninterrupted one would.

accelerate's `SeedableRandomSampler` draws the same kind of order but is built to be sharded by `prepare()`; ES keeps
its own small sampler so that nothing shards it and the order stays the one recorded runs were trained on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler

from ..es import stable_seed

__all__ = [
    "check_prompt_dataset",
    "named_datasets",
    "EpochBatchSampler",
    "EpochShuffleSampler",
    "SharedBatchDataLoader",
    "identity_collator",
    "shared_dataloader",
]


def identity_collator(features: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Batches stay lists of dataset rows: prompts are formatted and tokenized by the generation backend."""
    return features


class EpochShuffleSampler(Sampler[int]):
    """Shuffles with a generator seeded by (seed, epoch): every process draws the same order, and a resumed run
    draws the same order as an uninterrupted one."""

    def __init__(self, num_samples: int, seed: int, shuffle: bool):
        self.num_samples, self.seed, self.shuffle, self.epoch = num_samples, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.num_samples))
        generator = torch.Generator().manual_seed(stable_seed(self.seed, self.epoch, "data"))
        return iter(torch.randperm(self.num_samples, generator=generator).tolist())

    def __len__(self) -> int:
        return self.num_samples


class EpochBatchSampler(BatchSampler):
    """Batches of [`EpochShuffleSampler`] that forward `set_epoch`: when Trainer resumes mid-epoch it wraps the batch
    sampler to skip the batches already trained on, and sets the epoch through `batch_sampler.batch_sampler`."""

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)


class SharedBatchDataLoader(DataLoader):
    """A DataLoader that is *not* sharded across processes: in ES every process evaluates the same prompts."""

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)


def shared_dataloader(dataset: Any, batch_size: int, *, seed: int, shuffle: bool, drop_last: bool) -> DataLoader:
    """The ES training dataloader: batches of `batch_size` rows, the same on every process, ordered by (seed, epoch).

    Args:
        dataset: A map-style dataset.
        batch_size: Rows (prompts) per ES step.
        seed: Seed of the order.
        shuffle: Shuffle each epoch (else dataset order).
        drop_last: Drop a last, smaller batch.

    Returns:
        `torch.utils.data.DataLoader` whose `set_epoch` reorders.
    """
    sampler = EpochShuffleSampler(len(dataset), seed, shuffle)
    batch_sampler = EpochBatchSampler(sampler, batch_size=batch_size, drop_last=drop_last)
    return SharedBatchDataLoader(dataset, batch_sampler=batch_sampler, collate_fn=identity_collator)


def check_prompt_dataset(dataset: Any, name: str) -> None:
    """A clear error unless `dataset` is a non-empty map-style dataset with a `prompt` column."""
    from datasets import IterableDataset

    if isinstance(dataset, IterableDataset):
        raise NotImplementedError(f"{name} is an IterableDataset; ESTrainer needs a map-style Dataset.")
    columns = getattr(dataset, "column_names", None)
    if columns is not None and "prompt" not in columns:
        raise ValueError(
            f"{name} has no 'prompt' column (columns: {columns}). Rename the column holding the prompts, e.g. "
            f"`{name} = {name}.rename_column('question', 'prompt')`."
        )
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty.")


def named_datasets(train_dataset: Any, eval_dataset: Any) -> list[tuple[str, Any]]:
    """`[(name used in error messages, dataset)]` of the given train and evaluation datasets."""
    named = [("train_dataset", train_dataset)]
    if isinstance(eval_dataset, dict):
        named += [(f"eval_dataset[{key!r}]", ds) for key, ds in eval_dataset.items()]
    else:
        named.append(("eval_dataset", eval_dataset))
    return [(name, ds) for name, ds in named if ds is not None]

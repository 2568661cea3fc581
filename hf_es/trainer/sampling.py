"""The training data order of ES: every process reads the *same* batch (ES shards members, not prompts), in an order
that depends only on (seed, epoch), so a resumed run sees the batches an uninterrupted one would.

Streaming data (a `datasets.IterableDataset`) is read the same way: every process reads the whole stream (nothing is
split by node), pass e of the stream is shuffled by `datasets` with the seed `stable_seed(seed, e, "data")` through a
buffer of `STREAM_SHUFFLE_BUFFER` rows, and the passes follow each other without an epoch boundary, so a resumed run
skips exactly the `global_step` batches it already trained on and continues with the next one.

accelerate's `SeedableRandomSampler` draws the same kind of order but is built to be sharded by `prepare()`; ES keeps
its own small sampler so that nothing shards it and the order stays the one recorded runs were trained on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler

from ..es import stable_seed

STREAM_SHUFFLE_BUFFER = 1000
"""Rows in the shuffle buffer of a streamed training dataset (`datasets.IterableDataset.shuffle`)."""

__all__ = [
    "check_prompt_dataset",
    "named_datasets",
    "EpochBatchSampler",
    "EpochShuffleSampler",
    "SharedBatchDataLoader",
    "SharedStreamBatches",
    "dataset_columns",
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
        dataset: A map-style dataset, or a `datasets.IterableDataset` (streaming; see the module docstring).
        batch_size: Rows (prompts) per ES step.
        seed: Seed of the order.
        shuffle: Shuffle each epoch (else dataset order).
        drop_last: Drop a last, smaller batch.

    Returns:
        `torch.utils.data.DataLoader` whose `set_epoch` reorders.
    """
    if is_streamed(dataset):
        batches = SharedStreamBatches(dataset, batch_size, seed=seed, shuffle=shuffle, drop_last=drop_last)
        return DataLoader(batches, batch_size=None, collate_fn=identity_collator)
    sampler = EpochShuffleSampler(len(dataset), seed, shuffle)
    batch_sampler = EpochBatchSampler(sampler, batch_size=batch_size, drop_last=drop_last)
    return SharedBatchDataLoader(dataset, batch_sampler=batch_sampler, collate_fn=identity_collator)


def check_prompt_dataset(dataset: Any, name: str) -> None:
    """A clear error unless `dataset` is a non-empty map-style dataset with a `prompt` column."""
    if is_streamed(dataset):
        columns = dataset_columns(dataset, name)
    else:
        columns = getattr(dataset, "column_names", None)
    if columns is not None and "prompt" not in columns:
        raise ValueError(
            f"{name} has no 'prompt' column (columns: {columns}). Rename the column holding the prompts, e.g. "
            f"`{name} = {name}.rename_column('question', 'prompt')`."
        )
    if not is_streamed(dataset) and len(dataset) == 0:
        raise ValueError(f"{name} is empty.")


def is_streamed(dataset: Any) -> bool:
    """Whether `dataset` is read as a stream (a `torch.utils.data.IterableDataset`, which `datasets`' is)."""
    return isinstance(dataset, torch.utils.data.IterableDataset)


def dataset_columns(dataset: Any, name: str = "dataset") -> list[str] | None:
    """The column names of a map-style or streamed dataset; a stream whose features are unknown is peeked at.

    Raises:
        ValueError: When a streamed dataset yields no row.
    """
    columns = getattr(dataset, "column_names", None)
    if columns is not None or not is_streamed(dataset):
        return columns
    first = next(iter(dataset), None)
    if first is None:
        raise ValueError(f"{name} is empty (the stream yielded no row).")
    return list(first)


class SharedStreamBatches(torch.utils.data.IterableDataset):
    """Endless batches of a streamed dataset, identical on every process: pass after pass of the stream, pass `e`
    shuffled with the seed `stable_seed(seed, e, "data")`.

    Args:
        dataset: A `datasets.IterableDataset` (or any iterable of rows when `shuffle=False`).
        batch_size: Rows per batch.
        seed: Seed of the order.
        shuffle: Shuffle each pass through a buffer of `STREAM_SHUFFLE_BUFFER` rows.
        drop_last: Drop the last, smaller batch of each pass.
    """

    def __init__(self, dataset: Any, batch_size: int, *, seed: int, shuffle: bool, drop_last: bool):
        if shuffle and not hasattr(dataset, "shuffle"):
            raise TypeError(
                f"A streamed {type(dataset).__name__} cannot be shuffled: pass a datasets.IterableDataset, or set "
                "shuffle_dataset=False."
            )
        self.dataset, self.batch_size, self.seed, self.shuffle, self.drop_last = (
            dataset, batch_size, seed, shuffle, drop_last
        )  # fmt: skip

    def passes(self) -> Iterator[Any]:
        """The stream's passes, each in its own seeded order."""
        epoch = 0
        while True:
            if self.shuffle:
                seed = stable_seed(self.seed, epoch, "data") % 2**32
                yield self.dataset.shuffle(seed=seed, buffer_size=STREAM_SHUFFLE_BUFFER)
            else:
                yield self.dataset
            epoch += 1

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        for stream in self.passes():
            batch, rows = [], 0
            for row in stream:
                rows += 1
                batch.append(row)
                if len(batch) == self.batch_size:
                    yield batch
                    batch = []
            if batch and not self.drop_last:
                yield batch
            if rows < (self.batch_size if self.drop_last else 1):
                raise ValueError(
                    f"The streamed train_dataset yielded {rows} row(s) in a pass, fewer than one batch of "
                    f"{self.batch_size}: lower per_device_train_batch_size or set dataloader_drop_last=False."
                )


def named_datasets(train_dataset: Any, eval_dataset: Any) -> list[tuple[str, Any]]:
    """`[(name used in error messages, dataset)]` of the given train and evaluation datasets."""
    named = [("train_dataset", train_dataset)]
    if isinstance(eval_dataset, dict):
        named += [(f"eval_dataset[{key!r}]", ds) for key, ds in eval_dataset.items()]
    else:
        named.append(("eval_dataset", eval_dataset))
    return [(name, ds) for name, ds in named if ds is not None]

"""DeepScaleR-Preview (the paper's hard setting): Hub id by default, or a local JSONL/parquet with `problem`/`answer`."""

from __future__ import annotations

from datasets import Dataset

from ._common import BOXED_SYSTEM_PROMPT, finalize, load_source

__all__ = ["DEEPSCALER_HUB_ID", "load_deepscaler"]

DEEPSCALER_HUB_ID = "agentica-org/DeepScaleR-Preview-Dataset"


def load_deepscaler(
    split: str = "train",
    *,
    name_or_path: str = DEEPSCALER_HUB_ID,
    system_prompt: str | None = BOXED_SYSTEM_PROMPT,
    num_samples: int | None = None,
    seed: int | None = None,
) -> Dataset:
    """Loads DeepScaleR-Preview (the paper's hard setting: ~40k competition problems) as prompt/solution rows.

    The dataset is not shipped with hf_es. Without network access, download it once elsewhere and point
    `name_or_path` (`dataset_path` in a recipe) at a local `.jsonl`/`.json`/`.parquet` file or a folder holding
    `train.jsonl`, with the Hub dataset's columns `problem` and `answer`.

    Args:
        split: Split name (`"train"`, the only split on the Hub).
        name_or_path: Hub id or local path.
        system_prompt: System message (defaults to the boxed-answer prompt shared with GSM8K and MATH-500; `None`
            omits it).
        num_samples: Keep this many rows (after shuffling with `seed` if given).
        seed: Shuffle seed for `num_samples`.

    Returns:
        `datasets.Dataset` with `prompt` (chat messages), `solution` (the final answer) and the original columns.
    """
    rows = load_source(name_or_path, split=split, hub_id=DEEPSCALER_HUB_ID, packaged_name="deepscaler")
    return finalize(
        rows,
        to_user_text=lambda row: row["problem"],
        to_solution=lambda row: str(row["answer"]),
        system_prompt=system_prompt,
        num_samples=num_samples,
        seed=seed,
    )

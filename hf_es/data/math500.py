"""MATH-500 (the 500-problem PRM800K test subset of MATH) as prompt/solution rows."""

from __future__ import annotations

import os
from collections.abc import Sequence

from datasets import Dataset

from ._common import BOXED_SYSTEM_PROMPT, finalize, load_source

__all__ = ["MATH500_HUB_ID", "load_math500"]

MATH500_HUB_ID = "HuggingFaceH4/MATH-500"


def load_math500(
    split: str = "test",
    *,
    name_or_path: str | os.PathLike = MATH500_HUB_ID,
    system_prompt: str | None = BOXED_SYSTEM_PROMPT,
    instruction: str | None = None,
    conversational: bool = True,
    levels: Sequence[int] | None = None,
    subjects: Sequence[str] | None = None,
    num_samples: int | None = None,
    seed: int | None = None,
    offline: bool | None = None,
) -> Dataset:
    """Loads MATH-500 with the columns the ES trainer and `accuracy_reward` expect.

    By default the Hub dataset `HuggingFaceH4/MATH-500` is used; offline, or if the Hub cannot be reached, the
    identical copy shipped in the package (`hf_es/data/files/math500/`, MIT licence) is read instead. A local
    `.jsonl`/`.json`/`.parquet` file, or a folder holding `<split>.jsonl`, works too.

    Args:
        split (`str`, *optional*, defaults to `"test"`): the only split of MATH-500.
        name_or_path (`str` or `os.PathLike`, *optional*, defaults to `"HuggingFaceH4/MATH-500"`): Hub id or path.
        system_prompt (`str`, *optional*, defaults to [`BOXED_SYSTEM_PROMPT`]): system message; `None` omits it.
        instruction (`str`, *optional*): text appended to each problem.
        conversational (`bool`, *optional*, defaults to `True`): `prompt` as chat messages; `False` gives a string.
        levels (`Sequence[int]`, *optional*): keep only these difficulty levels (1-5).
        subjects (`Sequence[str]`, *optional*): keep only these subjects (e.g. `"Algebra"`).
        num_samples (`int`, *optional*): keep this many rows (after filtering, and shuffling with `seed` if given).
        seed (`int`, *optional*): shuffle seed for `num_samples`.
        offline (`bool`, *optional*): never contact the Hub; `None` follows `HF_HUB_OFFLINE`/`HF_DATASETS_OFFLINE`.

    Returns:
        `datasets.Dataset` with columns `prompt` (chat messages), `solution` (the gold answer in LaTeX, e.g.
        `"\\frac{14}{3}"`), `problem`, `answer` (same as `solution`), `reference_solution` (the worked solution with
        `\\boxed{}`), `subject`, `level` and `unique_id`.
    """
    ds = load_source(name_or_path, split=split, hub_id=MATH500_HUB_ID, packaged_name="math500", offline=offline)
    if levels is not None or subjects is not None:
        level_set = None if levels is None else {int(x) for x in levels}
        subject_set = None if subjects is None else set(subjects)
        ds = ds.filter(
            lambda row: (
                (level_set is None or int(row["level"]) in level_set)
                and (subject_set is None or row["subject"] in subject_set)
            )
        )
    return finalize(
        ds,
        to_user_text=lambda row: row["problem"],
        to_solution=lambda row: row["answer"],
        system_prompt=system_prompt,
        instruction=instruction,
        conversational=conversational,
        num_samples=num_samples,
        seed=seed,
        extra=lambda row: {"reference_solution": row["solution"]},
    )

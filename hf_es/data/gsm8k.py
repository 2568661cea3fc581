"""GSM8K (grade-school math word problems) as prompt/solution rows."""

from __future__ import annotations

import os

from datasets import Dataset

from ._common import BOXED_SYSTEM_PROMPT, finalize, load_source

__all__ = ["GSM8K_HUB_ID", "gsm8k_final_answer", "load_gsm8k"]

GSM8K_HUB_ID = "openai/gsm8k"


def gsm8k_final_answer(answer: str) -> str:
    """The gold final answer of a GSM8K worked solution: the text after the last `####`, e.g. `"70,000"`."""
    return answer.rsplit("####", 1)[-1].strip()


def load_gsm8k(
    split: str = "test",
    *,
    name_or_path: str | os.PathLike = GSM8K_HUB_ID,
    config_name: str = "main",
    system_prompt: str | None = BOXED_SYSTEM_PROMPT,
    instruction: str | None = None,
    conversational: bool = True,
    num_samples: int | None = None,
    seed: int | None = None,
    offline: bool | None = None,
) -> Dataset:
    """Loads GSM8K with the columns the ES trainer and `accuracy_reward` expect.

    By default the Hub dataset `openai/gsm8k` (config `main`) is used; offline, or if the Hub cannot be reached, the
    identical copy shipped in the package (`hf_es/data/files/gsm8k/`, MIT licence) is read instead. A local
    `.jsonl`/`.json`/`.parquet` file, or a folder holding `<split>.jsonl`, works too.

    Args:
        split (`str`, *optional*, defaults to `"test"`): `"train"` (7,473 rows) or `"test"` (1,319 rows).
        name_or_path (`str` or `os.PathLike`, *optional*, defaults to `"openai/gsm8k"`): Hub id or local path.
        config_name (`str`, *optional*, defaults to `"main"`): Hub config.
        system_prompt (`str`, *optional*, defaults to [`BOXED_SYSTEM_PROMPT`]): system message; `None` omits it.
        instruction (`str`, *optional*): text appended to each question (format instruction for models without a
            system role).
        conversational (`bool`, *optional*, defaults to `True`): `prompt` as chat messages; `False` gives a string.
        num_samples (`int`, *optional*): keep this many rows (after shuffling with `seed` if given).
        seed (`int`, *optional*): shuffle seed for `num_samples`.
        offline (`bool`, *optional*): never contact the Hub; `None` follows `HF_HUB_OFFLINE`/`HF_DATASETS_OFFLINE`.

    Returns:
        `datasets.Dataset` with columns `prompt` (chat messages), `solution` (gold final answer, e.g. `"18"`),
        `question` and `answer` (the original worked solution ending in `#### 18`).
    """
    ds = load_source(
        name_or_path, split=split, hub_id=GSM8K_HUB_ID, packaged_name="gsm8k", hub_config=config_name, offline=offline
    )
    return finalize(
        ds,
        to_user_text=lambda row: row["question"],
        to_solution=lambda row: gsm8k_final_answer(row["answer"]),
        system_prompt=system_prompt,
        instruction=instruction,
        conversational=conversational,
        num_samples=num_samples,
        seed=seed,
    )

"""Reasoning datasets in the columns the ES trainer and `hf_es.rewards` expect.

Every loader returns a `datasets.Dataset` with a `prompt` column (chat messages with a configurable system prompt
and/or format instruction) and a `solution` column (the gold that the reward functions read):

- [`load_gsm8k`]: GSM8K (`openai/gsm8k`, config `main`); `solution` is the final answer after `####`.
- [`load_math500`]: MATH-500 (`HuggingFaceH4/MATH-500`); `solution` is the LaTeX answer.
- [`load_arithmetic`]: generated `a <op> b` problems (the CPU demo task); `solution` is the exact result.
- [`load_countdown`]: generated, seeded Countdown problems with disjoint train/held-out splits; `nums`, `target`.

GSM8K and MATH-500 are shipped in the package (`hf_es/data/files/`, with their MIT licences), so the loaders work
offline; the Hub ids stay the default source when the Hub is reachable.
"""

from ._common import BOXED_SYSTEM_PROMPT, PACKAGED_DATA_DIR, build_messages, is_offline, packaged_path, read_jsonl
from .arithmetic import load_arithmetic
from .countdown import (
    COUNTDOWN_DIFFICULTIES,
    COUNTDOWN_INSTRUCTION,
    CountdownDifficulty,
    countdown_split_of,
    generate_countdown_problems,
    load_countdown,
)
from .deepscaler import DEEPSCALER_HUB_ID, load_deepscaler
from .gsm8k import GSM8K_HUB_ID, gsm8k_final_answer, load_gsm8k
from .math500 import MATH500_HUB_ID, load_math500

__all__ = [
    "BOXED_SYSTEM_PROMPT",
    "COUNTDOWN_DIFFICULTIES",
    "COUNTDOWN_INSTRUCTION",
    "DEEPSCALER_HUB_ID",
    "GSM8K_HUB_ID",
    "MATH500_HUB_ID",
    "PACKAGED_DATA_DIR",
    "CountdownDifficulty",
    "build_messages",
    "countdown_split_of",
    "generate_countdown_problems",
    "gsm8k_final_answer",
    "is_offline",
    "load_arithmetic",
    "load_countdown",
    "load_deepscaler",
    "load_gsm8k",
    "load_math500",
    "packaged_path",
    "read_jsonl",
]

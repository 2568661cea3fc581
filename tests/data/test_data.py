"""Tests for hf_es.data: packaged GSM8K / MATH-500, source resolution, Countdown generation."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from pathlib import Path

import datasets
import pytest

from hf_es.data import (
    BOXED_SYSTEM_PROMPT,
    COUNTDOWN_DIFFICULTIES,
    PACKAGED_DATA_DIR,
    CountdownDifficulty,
    countdown_split_of,
    generate_countdown_problems,
    gsm8k_final_answer,
    load_countdown,
    load_gsm8k,
    load_math500,
)
from hf_es.rewards import accuracy_reward, countdown_reward

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_packaged_files_and_licences():
    for rel in ("gsm8k/train.jsonl", "gsm8k/test.jsonl", "gsm8k/LICENSE", "math500/test.jsonl", "math500/LICENSE"):
        assert (PACKAGED_DATA_DIR / rel).is_file(), rel
    assert "MIT License" in (PACKAGED_DATA_DIR / "gsm8k" / "LICENSE").read_text()
    assert "MIT License" in (PACKAGED_DATA_DIR / "math500" / "LICENSE").read_text()
    if SHARED.is_dir():  # the shipped copies are the reference data, byte for byte
        for rel in ("gsm8k/train.jsonl", "gsm8k/test.jsonl", "math500/test.jsonl"):
            assert _sha(PACKAGED_DATA_DIR / rel) == _sha(SHARED / rel), rel


# ------------------------------------------------------------------------------------------------------ GSM8K


def test_load_gsm8k_offline_columns():
    test = load_gsm8k("test", offline=True)
    train = load_gsm8k("train", offline=True)
    assert len(test) == 1319 and len(train) == 7473
    assert {"prompt", "solution", "question", "answer"} <= set(test.column_names)
    row = test[0]
    assert row["prompt"] == [
        {"role": "system", "content": BOXED_SYSTEM_PROMPT},
        {"role": "user", "content": row["question"]},
    ]
    assert row["question"].startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert row["solution"] == "18"
    assert row["answer"].endswith("#### 18")
    assert all(s == gsm8k_final_answer(a) for s, a in zip(test["solution"], test["answer"]))
    assert sum("," in s for s in test["solution"]) == 14  # e.g. "1,450,000": kept as written


def test_gsm8k_golds_score_one_through_the_loader_columns():
    ds = load_gsm8k("test", offline=True, num_samples=300, seed=1)
    completions = [[{"role": "assistant", "content": f"Reasoning.\n\\boxed{{{s}}}"}] for s in ds["solution"]]
    assert accuracy_reward(prompts=ds["prompt"], completions=completions, solution=ds["solution"]) == [1.0] * 300
    assert accuracy_reward(completions=completions, solution=ds["answer"]) == [1.0] * 300


def test_gsm8k_prompt_options_and_subsampling():
    ds = load_gsm8k("test", offline=True, system_prompt=None, instruction="End with #### <answer>.", num_samples=5)
    assert len(ds) == 5
    assert ds[0]["prompt"] == [{"role": "user", "content": ds[0]["question"] + "\n\nEnd with #### <answer>."}]
    text = load_gsm8k("test", offline=True, conversational=False, num_samples=2)
    assert isinstance(text[0]["prompt"], str) and text[0]["prompt"].startswith(BOXED_SYSTEM_PROMPT)
    a = load_gsm8k("train", offline=True, num_samples=20, seed=3)
    b = load_gsm8k("train", offline=True, num_samples=20, seed=3)
    c = load_gsm8k("train", offline=True, num_samples=20, seed=4)
    assert a["question"] == b["question"] != c["question"]
    assert (
        load_gsm8k("train", offline=True, num_samples=3)["question"]
        == load_gsm8k("train", offline=True)[:3]["question"]
    )


def test_local_jsonl_file_and_folder(tmp_path):
    rows = [{"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}, {"question": "1+1?", "answer": "#### 2"}]
    path = tmp_path / "test.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    from_file = load_gsm8k("test", name_or_path=path)
    from_dir = load_gsm8k("test", name_or_path=str(tmp_path))
    assert from_file["solution"] == from_dir["solution"] == ["5", "2"]
    with pytest.raises(FileNotFoundError):
        load_gsm8k("train", name_or_path=str(tmp_path))
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "train.parquet"))
    assert load_gsm8k("train", name_or_path=str(tmp_path))["solution"] == ["5", "2"]


def test_hub_is_the_default_source(monkeypatch):
    calls = []

    def fake_load_dataset(name, config=None, split=None, **kwargs):
        calls.append((name, config, split))
        return datasets.Dataset.from_list([{"question": "q?", "answer": "#### 7"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_gsm8k("train", offline=False)
    assert calls == [("openai/gsm8k", "main", "train")]
    assert ds["solution"] == ["7"]


def test_hub_failure_falls_back_to_packaged_copy(monkeypatch, caplog):
    def no_network(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    with caplog.at_level(logging.WARNING):
        ds = load_math500(offline=False)
    assert len(ds) == 500
    assert "shipped with hf_es" in caplog.text
    with pytest.raises(ConnectionError):  # another Hub id has no packaged copy
        load_gsm8k("test", name_or_path="someone/else", offline=False)
    with pytest.raises(FileNotFoundError):
        load_gsm8k("test", name_or_path="someone/else", offline=True)
    with pytest.raises(FileNotFoundError):
        load_math500("train", offline=True)  # MATH-500 has only a test split


def test_offline_environment_variable_avoids_the_hub(monkeypatch):
    def must_not_be_called(*args, **kwargs):
        raise AssertionError("the Hub was contacted")

    monkeypatch.setattr(datasets, "load_dataset", must_not_be_called)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert len(load_gsm8k("test")) == 1319


# --------------------------------------------------------------------------------------------------- MATH-500


def test_load_math500_columns_and_filters():
    ds = load_math500(offline=True)
    assert len(ds) == 500
    assert {"prompt", "solution", "problem", "answer", "reference_solution", "subject", "level", "unique_id"} <= set(
        ds.column_names
    )
    row = ds[0]
    assert row["solution"] == row["answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert "\\boxed" in row["reference_solution"]
    assert row["prompt"][-1] == {"role": "user", "content": row["problem"]}
    levels = Counter(ds["level"])
    assert sum(levels.values()) == 500 and set(levels) == {1, 2, 3, 4, 5}
    hard = load_math500(offline=True, levels=[5])
    assert len(hard) == levels[5] and set(hard["level"]) == {5}
    algebra = load_math500(offline=True, subjects=["Algebra"], levels=[1, 2])
    assert len(algebra) > 0 and set(algebra["subject"]) == {"Algebra"} and set(algebra["level"]) <= {1, 2}


# --------------------------------------------------------------------------------------------------- Countdown


def test_countdown_generation_is_seeded_solvable_and_within_difficulty():
    a = generate_countdown_problems(300, difficulty="medium", seed=7)
    b = generate_countdown_problems(300, difficulty="medium", seed=7)
    c = generate_countdown_problems(300, difficulty="medium", seed=8)
    assert a == b and a != c
    spec = COUNTDOWN_DIFFICULTIES["medium"]
    keys = set()
    for row in a:
        assert spec.num_numbers[0] <= len(row["nums"]) <= spec.num_numbers[1]
        assert all(spec.number_range[0] <= n <= spec.number_range[1] for n in row["nums"])
        assert spec.target_range[0] <= row["target"] <= spec.target_range[1]
        keys.add((tuple(sorted(row["nums"])), row["target"]))
    assert len(keys) == 300  # distinct problems
    scores = countdown_reward(
        completions=[f"<answer>{r['solution']}</answer>" for r in a],
        target=[r["target"] for r in a],
        nums=[r["nums"] for r in a],
    )
    assert scores == [1.0] * 300
    hard = generate_countdown_problems(50, difficulty="hard", seed=0)
    assert all(5 <= len(r["nums"]) <= 6 for r in hard)
    custom = CountdownDifficulty(num_numbers=(2, 2), number_range=(1, 9), target_range=(10, 20))
    assert all(
        len(r["nums"]) == 2 and 10 <= r["target"] <= 20 for r in generate_countdown_problems(20, difficulty=custom)
    )
    with pytest.raises(ValueError):
        generate_countdown_problems(1, difficulty="impossible")


def test_countdown_splits_are_disjoint_and_loadable():
    train = load_countdown("train", num_samples=2000, seed=0)
    test = load_countdown("test", num_samples=200, seed=0)
    assert len(train) == 2000 and len(test) == 200
    key = lambda r: (tuple(sorted(r["nums"])), r["target"])  # noqa: E731
    assert not {key(r) for r in train} & {key(r) for r in test}
    assert all(countdown_split_of(r["nums"], r["target"], 0) == "test" for r in test)
    # the held-out split does not depend on how much training data is asked for
    assert load_countdown("test", num_samples=50, seed=0)["target"] == test["target"][:50]
    row = train[0]
    assert {"prompt", "nums", "target", "solution"} <= set(train.column_names)
    assert row["prompt"][-1]["role"] == "user"
    assert str(row["target"]) in row["prompt"][-1]["content"] and "<answer>" in row["prompt"][-1]["content"]
    scores = countdown_reward(
        completions=[f"<answer>{s}</answer>" for s in test["solution"]], target=test["target"], nums=test["nums"]
    )
    assert scores == [1.0] * 200
    # about `held_out_fraction` of generated problems land in the held-out split
    pool = generate_countdown_problems(2000, seed=3)
    share = sum(countdown_split_of(r["nums"], r["target"], 3) == "test" for r in pool) / len(pool)
    assert 0.07 < share < 0.13

"""Streaming training data (`datasets.IterableDataset`): the same prompts on every process, seeded passes, and a
resume that continues with the batch an uninterrupted run would have drawn next."""

from __future__ import annotations

import os

import pytest
from datasets import Dataset, IterableDataset
from transformers import TrainerCallback
from utils import make_trainer, prompt_dataset

from hf_es.trainer.sampling import SharedStreamBatches, check_prompt_dataset


def stream(num: int = 6):
    return prompt_dataset(num).to_iterable_dataset(num_shards=2)


def prompts_of(batches, count):
    iterator = iter(batches)
    return [[row["prompt"] for row in next(iterator)] for _ in range(count)]


def test_every_process_draws_the_same_batches_and_each_pass_its_own_order():
    first = prompts_of(SharedStreamBatches(stream(), 2, seed=7, shuffle=True, drop_last=False), 9)
    second = prompts_of(SharedStreamBatches(stream(), 2, seed=7, shuffle=True, drop_last=False), 9)
    assert first == second  # two processes, same seed: same prompts at every step
    passes = [sorted(sum(first[i : i + 3], [])) for i in (0, 3, 6)]
    assert passes[0] == passes[1] == passes[2] == sorted(prompt_dataset(6)["prompt"])  # every row once per pass
    assert sum(first[0:3], []) != sum(first[3:6], []) or sum(first[3:6], []) != sum(first[6:9], [])
    other_seed = prompts_of(SharedStreamBatches(stream(), 2, seed=8, shuffle=True, drop_last=False), 9)
    assert other_seed != first
    in_order = prompts_of(SharedStreamBatches(stream(), 4, seed=7, shuffle=False, drop_last=False), 3)
    assert [len(b) for b in in_order] == [4, 2, 4]  # a pass's last, smaller batch is kept unless drop_last


def empty_rows():
    yield from ()


def test_a_stream_shorter_than_one_batch_is_an_error():
    with pytest.raises(ValueError, match="fewer than one batch"):
        prompts_of(SharedStreamBatches(stream(3), 4, seed=0, shuffle=True, drop_last=True), 1)
    with pytest.raises(ValueError, match="no row"):
        check_prompt_dataset(IterableDataset.from_generator(empty_rows), "train_dataset")
    with pytest.raises(ValueError, match="no 'prompt' column"):
        check_prompt_dataset(Dataset.from_dict({"question": ["a"]}).to_iterable_dataset(), "train_dataset")


class PromptLog:
    """A reward function that records the prompts of each step (one call per member; the first is kept)."""

    __name__ = "prompt_log"

    def __init__(self):
        self.by_step: dict[int, list[str]] = {}

    def __call__(self, prompts, completion_ids, trainer_state, **kwargs):
        self.by_step.setdefault(trainer_state.global_step, list(prompts))
        return [len(ids) / 10 for ids in completion_ids]


def test_training_on_a_stream_resumes_where_it_stopped(tmp_path):
    settings = dict(max_steps=5, per_device_train_batch_size=4, population_size=4, save_strategy="steps", save_steps=2)
    full_log = PromptLog()
    full = make_trainer(tmp_path / "full", reward_funcs=full_log, dataset=stream(6), **settings)
    full.train()
    assert sorted(full_log.by_step) == [0, 1, 2, 3, 4]
    assert full_log.by_step[0] != full_log.by_step[1]

    class StopAt2(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == 2

    first = make_trainer(tmp_path / "half", reward_funcs=PromptLog(), dataset=stream(6), **settings)
    first.add_callback(StopAt2())
    first.train()
    resumed_log = PromptLog()
    resumed = make_trainer(tmp_path / "half", reward_funcs=resumed_log, dataset=stream(6), **settings)
    resumed.train(resume_from_checkpoint=os.path.join(first.args.output_dir, "checkpoint-2"))
    assert resumed_log.by_step == {step: full_log.by_step[step] for step in (2, 3, 4)}
    for name, tensor in full.backend.centre.master.items():
        assert resumed.backend.centre.master[name].equal(tensor), name


def test_a_streamed_eval_dataset_is_evaluated_like_a_map_style_one(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=1)
    as_map = trainer.evaluate(prompt_dataset(4))
    as_stream = trainer.evaluate(prompt_dataset(4).to_iterable_dataset())
    assert as_stream["eval_reward"] == as_map["eval_reward"]

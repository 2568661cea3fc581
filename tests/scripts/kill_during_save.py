"""SIGKILLs real training processes at chosen points of a `save_steps` checkpoint (used by tests/trainer/test_reliability.py).

Usage: python kill_during_save.py OUTPUT_ROOT POINT[,POINT...]

Imports once, then forks one child per point; each child trains with a checkpoint every step and is killed with
SIGKILL while saving the checkpoint of step 2 (by itself at an exact point, or by the parent for `external`, as soon
as the staging folder appears). Writes `OUTPUT_ROOT/killed.json`: point -> how the child ended.
"""

import inspect
import json
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
from utils import prompt_dataset, tiny_llama, tiny_tokenizer  # noqa: E402

from hf_es import ESConfig, ESTrainer  # noqa: E402

KILL_STEP = 2


def reward(completion_ids, **kwargs):
    return [sum(t % 3 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def build_trainer(output_dir: str, max_steps: int = 3) -> ESTrainer:
    """The run every test of this scenario uses (bf16 model, so the fp32 master file is part of the checkpoint)."""
    args = ESConfig(
        output_dir=output_dir,
        population_size=4,
        sigma=0.05,
        learning_rate=0.05,
        per_device_train_batch_size=2,
        max_completion_length=4,
        temperature=0.8,
        max_steps=max_steps,
        save_strategy="steps",
        save_steps=1,
        save_total_limit=1,
        report_to="none",
        seed=0,
        disable_tqdm=True,
        use_cpu=True,
        model_card_drift=False,
    )
    return ESTrainer(
        model=tiny_llama(seed=1).to(torch.bfloat16),
        reward_funcs=reward,
        args=args,
        train_dataset=prompt_dataset(6),
        processing_class=tiny_tokenizer(),
    )


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install_kill(point: str, trainer: ESTrainer) -> None:
    from transformers.trainer_callback import TrainerState

    from hf_es.trainer import checkpoint_files

    def at_kill_step() -> bool:
        return trainer.state.global_step == KILL_STEP

    def wrap(owner, name, before=True, after=False):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            if before and at_kill_step():
                die()
            result = original(*args, **kwargs)
            if after and at_kill_step():
                die()
            return result

        is_static = isinstance(inspect.getattr_static(owner, name), staticmethod)
        setattr(owner, name, staticmethod(wrapper) if is_static else wrapper)

    if point == "after_model_weights":  # model.safetensors written, fp32 master and ES state not yet
        wrap(ESTrainer, "_save_es_state")
    elif point == "after_es_state":  # everything but trainer_state.json
        wrap(TrainerState, "save_to_json")
    elif point == "before_rename":  # complete staging folder, not renamed yet
        wrap(checkpoint_files, "commit_checkpoint")
    elif point == "after_rename":  # new checkpoint in place, old one not rotated away yet
        wrap(checkpoint_files, "rotate_checkpoints")
    elif point == "mid_rotation":  # the old checkpoint half deleted
        original_rmtree = shutil.rmtree

        def half_rmtree(path, *args, **kwargs):
            if at_kill_step() and os.path.basename(str(path)).startswith("_old-checkpoint-") and os.path.isdir(path):
                files = sorted(os.listdir(path))
                for name in files[: len(files) // 2]:
                    os.remove(os.path.join(path, name))
                die()
            return original_rmtree(path, *args, **kwargs)

        shutil.rmtree = half_rmtree
    elif point != "external":
        raise ValueError(point)


def child(root: str, point: str) -> None:
    trainer = build_trainer(os.path.join(root, point))
    install_kill(point, trainer)
    trainer.train()


def main(root: str, points: list[str]) -> None:
    os.makedirs(root, exist_ok=True)
    outcome = {}
    for point in points:
        pid = os.fork()
        if pid == 0:
            try:
                child(root, point)
            finally:
                os._exit(3)  # not killed: the parent reports it
        if point == "external":
            staging = os.path.join(root, point, f"_tmp-checkpoint-{KILL_STEP}")
            deadline = time.time() + 300
            while not os.path.exists(staging) and time.time() < deadline:
                time.sleep(0.001)
            time.sleep(0.02)  # somewhere inside the save
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        outcome[point] = (
            f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        )
    with open(os.path.join(root, "killed.json"), "w") as f:
        json.dump(outcome, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))

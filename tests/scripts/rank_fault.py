"""Two-process ES run in which process 1 fails at step 1 (used by tests/trainer/test_reliability.py).

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml --num_processes 2 rank_fault.py OUT MODE
MODE `raise`: process 1's reward function raises; `die`: process 1 SIGKILLs itself inside its reward function.
Writes `OUT/fault_time` (time.time() of the fault) just before it.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from utils import prompt_dataset, tiny_llama, tiny_tokenizer  # noqa: E402

from hf_es import ESConfig, ESTrainer  # noqa: E402


def main(output_dir: str, mode: str) -> None:
    rank = int(os.environ.get("RANK", "0"))

    def reward(completion_ids, trainer_state, **kwargs):
        if rank == 1 and trainer_state.global_step == 1:
            with open(os.path.join(output_dir, "fault_time"), "w") as f:
                f.write(str(time.time()))
            if mode == "raise":
                raise ValueError("injected fault on process 1")
            os.kill(os.getpid(), signal.SIGKILL)
        return [len(ids) % 3 for ids in completion_ids]

    args = ESConfig(
        output_dir=output_dir,
        population_size=4,
        sigma=0.05,
        learning_rate=0.05,
        per_device_train_batch_size=2,
        max_completion_length=4,
        max_steps=3,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
    )
    trainer = ESTrainer(
        model=tiny_llama(),
        reward_funcs=reward,
        args=args,
        train_dataset=prompt_dataset(8),
        processing_class=tiny_tokenizer(),
    )
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

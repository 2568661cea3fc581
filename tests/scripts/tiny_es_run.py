"""Trains a tiny random Llama with ES and writes a digest of the final weights (used by the multi-process test)."""

import hashlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from utils import prompt_dataset, tiny_llama, tiny_tokenizer  # noqa: E402

from hf_es import ESConfig, ESTrainer  # noqa: E402


def target_token_reward(completion_ids, **kwargs):
    return [sum(t % 3 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def main(output_dir: str, max_steps: int = 3, **overrides) -> None:
    args = ESConfig(
        output_dir=output_dir,
        population_size=6,
        sigma=0.05,
        learning_rate=0.05,
        per_device_train_batch_size=4,
        max_completion_length=6,
        max_steps=max_steps,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        use_cpu=True,
        **overrides,
    )
    trainer = ESTrainer(
        model=tiny_llama(),
        reward_funcs=target_token_reward,
        args=args,
        train_dataset=prompt_dataset(16),
        processing_class=tiny_tokenizer(),
    )
    trainer.train()
    digest = hashlib.sha256()
    for name, tensor in sorted(trainer.backend.centre.master.items()):
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    rank = trainer.accelerator.process_index
    with open(os.path.join(output_dir, f"result-rank{rank}.json"), "w") as f:
        json.dump(
            {
                "digest": digest.hexdigest(),
                "rewards": rewards,
                "world": trainer.accelerator.num_processes,
                "torch_threads": torch.get_num_threads(),
            },
            f,
        )


if __name__ == "__main__":
    # argv: output_dir [max_steps [ESConfig overrides as JSON]]
    main(
        sys.argv[1],
        int(sys.argv[2]) if len(sys.argv) > 2 else 3,
        **json.loads(sys.argv[3] if len(sys.argv) > 3 else "{}"),
    )

"""The GRPO baseline: TRL's GRPOTrainer on exactly the data, prompts, rewards, evaluation and logging of train_es.py.

    accelerate launch scripts/train_grpo.py --config recipes/smollm2_cpu_arithmetic_grpo.yaml
    accelerate launch --config_file accelerate_configs/deepspeed_zero2.yaml scripts/train_grpo.py \
        --config recipes/qwen2.5-1.5b-instruct_gsm8k_grpo.yaml

The command line of `hf_es.recipes.train_grpo` (also `python -m hf_es.recipes.train_grpo`, from an installed
package); the trainer and its card are `hf_es.grpo`.
"""

from hf_es.recipes.train_grpo import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    main(*build_parser().parse_args_and_config())

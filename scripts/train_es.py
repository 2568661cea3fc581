"""Evolution Strategies post-training from the command line, with TRL-style YAML recipes and CLI overrides.

    accelerate launch scripts/train_es.py --config recipes/smollm2_cpu_arithmetic.yaml
    accelerate launch --config_file accelerate_configs/cpu.yaml --num_processes 2 scripts/train_es.py \
        --config recipes/smollm2_cpu_arithmetic.yaml --max_steps 10

The command line of `hf_es.recipes.train_es` (also `python -m hf_es.recipes.train_es`, from an installed package).
"""

from hf_es.recipes.train_es import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    main(*build_parser().parse_args_and_config())

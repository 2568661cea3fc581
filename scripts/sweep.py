"""Population-size and sigma sweeps of ES (paper, section 4): one reward trajectory per setting, and which N is enough.

    python scripts/sweep.py --config recipes/smollm2_cpu_arithmetic.yaml --output_dir outputs/sweep-N \
        --population_sizes 8 16 32 64 --max_steps 30

The command line of `hf_es.recipes.sweep` (also `python -m hf_es.recipes.sweep`); its docstring has the details.
"""

from hf_es.recipes.sweep import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    main(*build_parser().parse_args_and_config())

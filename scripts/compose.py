"""Sequential composition of ES and GRPO (paper, section 4): ES->GRPO and GRPO->ES, half the updates each.

    python scripts/compose.py --order es_grpo grpo_es --total_steps 30 --output_dir outputs/compose \
        --es_config recipes/smollm2_cpu_arithmetic.yaml --grpo_config recipes/smollm2_cpu_arithmetic_grpo.yaml

The command line of `hf_es.recipes.compose` (also `python -m hf_es.recipes.compose`); its docstring has the details.
"""

from hf_es.recipes.compose import main, run_stage, weights_checksum

__all__ = ["main", "run_stage", "weights_checksum"]

if __name__ == "__main__":
    main()

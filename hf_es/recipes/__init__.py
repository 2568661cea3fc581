"""Running a recipe: the shipped YAML recipes (`configs/`), one function that trains and evaluates a method
([`run.train_and_evaluate`]), and the command lines on top of it, as modules so that an installed package runs them
without a checkout:

    python -m hf_es.recipes.train_es --config smollm2_cpu_arithmetic --max_steps 10
    python -m hf_es.recipes.train_grpo --config smollm2_cpu_arithmetic_grpo
    python -m hf_es.recipes.sweep --config smollm2_cpu_arithmetic --output_dir outputs/sweep-N
    python -m hf_es.recipes.compose --es_config smollm2_cpu_arithmetic --grpo_config smollm2_cpu_arithmetic_grpo ...

`scripts/train_es.py`, `scripts/train_grpo.py`, `scripts/sweep.py` and `scripts/compose.py` wrap these modules.
"""

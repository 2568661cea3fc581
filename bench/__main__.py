"""`python -m bench`: runs the benchmarks and prints their ratios (see bench/es_step.py)."""

from .es_step import main

main()

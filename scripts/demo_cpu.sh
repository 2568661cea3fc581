#!/usr/bin/env bash
# Sets up the environment and runs the CPU demo: ES on the bundled SmolLM2-135M-Instruct (single-digit
# multiplication), ~15 minutes on 2 cores. Extra arguments override the recipe (e.g. --max_steps 10).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
"$VENV/bin/accelerate" launch --num_processes 1 --cpu scripts/train_es.py \
  --config recipes/smollm2_cpu_arithmetic.yaml "$@"

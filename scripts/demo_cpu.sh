#!/usr/bin/env bash
# Sets up the environment and runs the CPU demo: ES on the bundled SmolLM2-135M-Instruct (single-digit
# multiplication), printing accuracy on the held-out problems and the population coverage. Extra arguments override
# the recipe (e.g. --max_steps 10). Times and numbers: README.md, raw output: docs/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
# Every launcher value is explicit, so accelerate prints no "defaults used instead" warning; --quiet turns a
# failing script into its own message (exit 1) instead of adding accelerate's CalledProcessError traceback.
"$VENV/bin/accelerate" launch --quiet --cpu --num_processes 1 --num_machines 1 --mixed_precision no \
  --dynamo_backend no --num_cpu_threads_per_process "${OMP_NUM_THREADS:-$(nproc)}" \
  scripts/train_es.py --config recipes/smollm2_cpu_arithmetic.yaml "$@"

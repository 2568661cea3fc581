#!/usr/bin/env bash
# Creates (or reuses) the virtual environment $VENV (default .venv) with CPU torch and hf_es[dev].
# Sourced by scripts/run_tests.sh and scripts/demo_cpu.sh.
set -euo pipefail
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip
# Pin the CPU build first: an unpinned torch would pull a multi-GB CUDA build.
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q -e ".[dev]"
# Two cores: OpenMP busy-waiting slows PyTorch 10-25x under any other load.
export OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

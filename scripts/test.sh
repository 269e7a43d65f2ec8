#!/usr/bin/env bash
# Runs the test suite. CUDA kernels run under Numba's CUDA simulator unless a GPU run is asked
# for (NUMBA_ENABLE_CUDASIM=0); the variable must be set before Python starts.
set -euo pipefail
cd "$(dirname "$0")/.."
export NUMBA_ENABLE_CUDASIM=${NUMBA_ENABLE_CUDASIM:-1}
# Tests marked `slow` (the CUDA simulator's long kernels, every Atari game, the memory sweeps,
# the learning runs) are left out unless asked for: `./scripts/test.sh -m slow` runs them alone
# (a later -m wins), `-m ""` everything. CI (.ci/run) runs both.
exec .venv/bin/python -m pytest -q -m "not slow" "$@"

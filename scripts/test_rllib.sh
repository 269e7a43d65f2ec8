#!/usr/bin/env bash
# RLlib on envfleet's native envs, in its own venv (.venv-rllib): ray[rllib] 2.60 pins
# gymnasium 1.2.2, while the main venv tests envfleet on the newest Gymnasium.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv-rllib/bin/python ] || "$python" -m venv .venv-rllib
.venv-rllib/bin/python -m pip install --quiet --upgrade uv
find_links=$(.venv-rllib/bin/python -m pip config get global.find-links 2>/dev/null || true)
.venv-rllib/bin/uv pip install --quiet --compile-bytecode --python .venv-rllib/bin/python \
    ${find_links:+--find-links "$find_links"} "torch==2.13.0" -e ".[rllib]" "pytest>=8"
exec .venv-rllib/bin/python -m pytest -q tests/rllib "$@"

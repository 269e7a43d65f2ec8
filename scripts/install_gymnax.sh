#!/usr/bin/env bash
# Installs the gymnax peer of `envfleet bench --env MinAtar/<Game>-vN` (gymnax's own JAX MinAtar
# games on JAX's CPU backend) into .venv: the `minatar-bench` extra (jax[cpu], flax, and what
# gymnax imports: six, seaborn), then gymnax 1.0.1 itself with --no-deps. gymnax 1.0.1 pins
# gymnasium<1.4, which would downgrade envfleet's gymnasium; gymnax's games only use gymnasium's
# `spaces`, which work with 1.4. Not part of scripts/setup.sh (~600 MB; the bench and the tests
# skip the peer when it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "run scripts/setup.sh first" >&2; exit 1; }
find_links=$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)
.venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python \
    ${find_links:+--find-links "$find_links"} -e ".[minatar-bench]"
.venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python \
    ${find_links:+--find-links "$find_links"} --no-deps "gymnax==1.0.1"

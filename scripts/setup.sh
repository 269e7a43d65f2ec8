#!/usr/bin/env bash
# Creates .venv and installs envfleet (editable) with torch, numba-cuda, the benchmark peers and
# the test tools. torch is pinned to the local CPU wheel: an unpinned torch pulls GBs of CUDA.
# --compile-bytecode: every process (tests, pool workers, bench points) imports numba & co. from
# .pyc files even where PYTHONDONTWRITEBYTECODE is set (import numba: ~0.45 s instead of ~1.2 s).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade uv
# uv does not read pip's configuration: hand it pip's find-links (where the torch wheel lies).
find_links=$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)
.venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python \
    ${find_links:+--find-links "$find_links"} "torch==2.13.0" -e ".[all]"
# minatar (the MinAtar reference the native MinAtar/* families are tested and benchmarked
# against) without its declared dependencies: its game logic needs only NumPy, and its
# requirements would pull pandas, scipy, seaborn and matplotlib pins. --no-deps keeps them out;
# minatar.gym imports seaborn inside try/except (only its rgb_array render needs it).
.venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python \
    ${find_links:+--find-links "$find_links"} --no-deps "minatar==1.0.15"

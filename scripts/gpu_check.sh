#!/usr/bin/env bash
# The GPU check, 6-10 minutes on one GPU (GPU_CHECK_SCALE < 1 shortens the sweep): the cuda
# tests on the real GPU (agreement with the numba backend, which matches Gymnasium bit for bit;
# rollouts; chess), the per-call sweep of cuda and torch with gymnax as a peer (python -m
# benchmarks.gpu; pgx on request), the tpb study (python -m benchmarks --study tpb) and the
# numba threads sweep of the host (python -m benchmarks.scripts.threads_check); on request
# (GPU_CHECK_PARTS=minatar, ~1-2 minutes a game) MinAtar per call on cuda with gymnax on JAX's
# GPU backend as the peer; on request (GPU_CHECK_PARTS=fma,
# ~1 minute) CartPole's cuda per call at 10^6 envs and its float64 state's max ulp from numba
# after 30 steps, FMA contraction on and off (ENVFLEET_CUDA_FMA). Writes JSON lines, Markdown
# naming the card and each part's log into $OUT/gpu-check (default ./gpu-check).
#
# Needs: torch with CUDA, numba-cuda with a numpy it imports with, gymnasium, python-chess and
# pytest (gymnax, pgx: optional peers). On a machine with no package index, bring wheels:
# see docs/gpu/README.md. Each part has its own time limit; a part that fails does not stop the
# others.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD}/gpu-check
mkdir -p "$out"
py=${PYTHON:-python3}
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
export ENVFLEET_CACHE_DIR=${ENVFLEET_CACHE_DIR:-$(mktemp -d)/envfleet-cache}
scale=${GPU_CHECK_SCALE:-1}

part() {  # part NAME SECONDS COMMAND...: run it under a time limit, log it, say how it ended
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "=== $name (limit ${limit}s): $*"
    timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "$name: rc=$rc in $(($(date +%s) - start)) s" | tee -a "$out/parts.txt"
    tail -n 8 "$out/$name.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/card.txt" 2>&1
"$py" - >>"$out/card.txt" 2>&1 <<'EOF'
import numba, numpy, torch
from numba import cuda
print("torch", torch.__version__, "numba", numba.__version__, "numpy", numpy.__version__,
      "cuda available", cuda.is_available())
EOF
cat "$out/card.txt"
parts=${GPU_CHECK_PARTS:-tests,sweep,tpb,threads}
for p in ${parts//,/ }; do
    case $p in
    tests) part tests 230 "$py" -m pytest -q -rf -p no:cacheprovider \
        tests/native/test_cuda_backend.py tests/envs/test_classic_cuda.py \
        tests/native/test_rollout.py tests/native/test_torch_backend.py \
        tests/envs/chess/test_cuda_chess.py \
        tests/envs/chess/test_packed.py::test_cuda_packed_matches_numba ;;
    sweep) part sweep "$(awk "BEGIN{print int(450*$scale)}")" \
        "$py" -m benchmarks.gpu --out "$out" --scale "$scale" ;;
    tpb) part tpb 75 "$py" -m benchmarks --study tpb --block-sizes 64,256,1024 \
        --num-envs 1000,100000,1000000,10000000 --repeats 1 --seconds 0.3 --out "$out/tpb" ;;
    threads) part threads 100 "$py" -m benchmarks.scripts.threads_check --seconds 0.4 \
        --out "$out/threads_check.jsonl" ;;
    minatar) for game in Breakout Asterix Freeway SpaceInvaders Seaquest; do
        JAX_PLATFORMS=${JAX_PLATFORMS:-cuda} part "minatar-$game" 120 "$py" -m envfleet bench \
            --env "MinAtar/$game-v1" --backends "${MINATAR_BACKENDS:-cuda,gymnax}" \
            --num-envs "${MINATAR_NUM_ENVS:-4096,65536,1048576}" --seconds 1 \
            --out "$out/minatar"
    done ;;
    fma) part fma 120 "$py" -m benchmarks.gpu --out "$out/fma" --parts fma ;;
    *) echo "unknown part $p (parts: tests, sweep, tpb, threads, minatar, fma)"; exit 2 ;;
    esac
done
cat "$out/parts.txt"

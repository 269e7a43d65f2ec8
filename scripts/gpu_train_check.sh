#!/usr/bin/env bash
# envfleet train CartPole-v1 on the GPU end to end (--backend cuda --device cuda: observations,
# actions and rewards stay on the device; then --backend torch --device cuda, its steps replayed
# CUDA graphs) against the CPU trainer (--backend numba --device cpu) on the same host, each
# under a time limit (LIMIT seconds of training, default 25; about 100 s in all with startup and
# compiling). Writes each run's --json summary and log to
# $OUT/gpu-train (default ./gpu-train) and prints env-only / ideal / end-to-end steps/s, the
# time to solve and the compile time of each, with the card and the host CPU.
#
# Needs torch with CUDA and numba-cuda; no envfleet install (runs python -m envfleet from src/).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD}/gpu-train
mkdir -p "$out"
py=${PYTHON:-python3}
limit=${LIMIT:-25}
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export ENVFLEET_CACHE_DIR=${ENVFLEET_CACHE_DIR:-$(mktemp -d)/envfleet-cache}

run() {  # run NAME FLAGS...: one training run under a hard limit, its log and summary kept
    local name=$1 start rc
    shift
    start=$(date +%s)
    echo "=== $name: envfleet train CartPole-v1 $* --time-limit $limit"
    timeout -k 5 $((limit + 40)) "$py" -m envfleet train CartPole-v1 "$@" --time-limit "$limit" \
        --json "$out/$name.json" --plot "$out/$name.png" >"$out/$name.log" 2>&1
    rc=$?
    echo "$name: rc=$rc in $(($(date +%s) - start)) s"
    tail -n 4 "$out/$name.log"
}

run cuda --backend cuda --device cuda
run torch --backend torch --device cuda
run numba --backend numba --device cpu

"$py" - "$out" <<'EOF'
import json, pathlib, platform, subprocess, sys

out = pathlib.Path(sys.argv[1])
try:
    import torch
    card = torch.cuda.get_device_name(0)
except Exception as error:  # noqa: BLE001 - say why, keep the table
    card = f"? ({error})"
cpu = next((line.split(":", 1)[1].strip() for line in subprocess.run(
    ["lscpu"], capture_output=True, text=True).stdout.splitlines()
    if line.startswith("Model name")), platform.processor())
print(f"\nCartPole-v1 preset (8 envs x 32 steps); GPU {card}; host CPU {cpu}")
print(f"{'run':<6} {'env-only':>10} {'ideal':>10} {'end-to-end':>10} {'solved at':>10} "
      f"{'steps':>8} {'compile':>8} {'stop':>10}")
for name in ("cuda", "torch", "numba"):
    path = out / f"{name}.json"
    if not path.exists():
        print(f"{name:<6} (no summary: see {name}.log)")
        continue
    s = json.loads(path.read_text())
    solved = "-" if s["solved_at_s"] is None else f"{s['solved_at_s']:.1f} s"
    steps = "-" if s["solved_at_steps"] is None else f"{s['solved_at_steps']:,}"
    print(f"{name:<6} {s['sps_env']:>10,.0f} {s['sps_ideal']:>10,.0f} "
          f"{s['sps_end_to_end']:>10,.0f} {solved:>10} {steps:>8} {s['compile_s']:>6.1f} s "
          f"{s['stop_reason']:>10}")
    print(f"       time per phase: " + ", ".join(f"{k} {v:.2f} s" for k, v in s["times"].items()))
EOF

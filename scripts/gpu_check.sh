#!/usr/bin/env bash
# One command that checks a CUDA machine and measures seqssm there, from the repository root:
#
#     bash scripts/gpu_check.sh [OUT]      # OUT: logs, JSON and markdown (default runs/gpu_check)
#
# Made for a short lent GPU session (docs/gpu.md, "The one command"): it needs no package index when the
# machine already has torch with CUDA, and each step has its own time limit, so the whole check ends within
# BUDGET_S seconds (default 480: a lent session allows one prepared run of 8 minutes) and a slow step loses its
# own results only; steps past the budget are skipped, so the last (the SSD bench) is the first to go. Environment:
#   PYTHON                python with torch (default python3)
#   WHEELS                wheels installed first, without an index: mamba_ssm and causal_conv1d from
#                         scripts/build_cuda_peers.sh (default build/cuda-peers/wheels when it exists)
#   STEPS                 the steps to run (default all) among compile-check, bench-scan, gpu-tests, bench-models,
#                         profile, graph-breaks, bench-compile, bench-ssd: STEPS="gpu-tests bench-models" reruns
#                         those two
#   TRITON_CACHE_ARCHIVE  a .tar.xz of a Triton cache to start from (default .gpu/triton-cache.tar.xz when it
#                         exists), made under the GPU machine's triton release: python -m seqssm.ops.triton_aot
#                         --tier bench --arch 90 --cache .gpu/triton-cache && tar -C .gpu -cJf
#                         .gpu/triton-cache.tar.xz triton-cache
#
# Steps; every step (of STEPS) runs, and the exit status is 1 if one failed or timed out, or a benchmark missed a target:
# 1. torch sees a GPU (without an NVIDIA driver: exit 2, nothing done); versions printed.
# 2. The wheels installed; seqssm runs from the source tree (PYTHONPATH).
# 3. In the background, the compile check with this machine's triton (CPU only).
# 4. bench_scan.py --device cuda: the scans beside mamba_ssm and their hardware limits -> OUT/bench_scan.*
# 5. The GPU tests, except the stress shapes (slow): pytest -m "gpu and not slow", Triton autotuning off
#    (each config of each small variant would be a compile).
# 6. bench_models.py --device cuda: whole models beside the peers -> OUT/bench_models/
# 7. One profiled training step of the mamba-130m-sized model (seqssm auto, seqssm on Triton, mamba_ssm: device
#    time by kernel category side by side, then each one's top kernels) and of each S4D stack; and the kernels of
#    one decoding step -> OUT/profile/
# 8. bench_compile.py --device cuda --breaks-only: graph breaks of every model family and RL core on CUDA, where the
#    ops take the Triton and CUDA peers' custom ops -> OUT/graph_breaks/
# 9. bench_compile.py --device cuda on mamba-s6: compiled vs eager -> OUT/bench_compile/
# 10. bench_ssd.py --device cuda: Mamba-2's SSD scan, triton and chunked beside mamba_ssm -> OUT/bench_ssd.*
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/gpu_check}"
PYTHON="${PYTHON:-python3}"
BUDGET_S="${BUDGET_S:-480}"
mkdir -p "$OUT"
start=$(date +%s)
status=0
say() { echo "gpu_check [$(( $(date +%s) - start ))s]: $*"; }
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
        say "no NVIDIA GPU here (nvidia-smi finds no driver): nothing to check on this machine"
        exit 2
    fi
    say "torch does not see the GPU: this check needs a torch built with CUDA (pip install torch)"
    exit 1
fi
"$PYTHON" -c "import torch, triton; print(f'gpu_check: torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__} (ptxas {triton.knobs.nvidia.ptxas.path}) on', torch.cuda.get_device_name())" | tee "$OUT/versions.txt"

WHEELS="${WHEELS:-build/cuda-peers/wheels}"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    if "$PYTHON" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl >"$OUT/wheels.log" 2>&1; then
        say "installed $(cd "$WHEELS" && ls ./*.whl | tr '\n' ' ')"
    else
        say "the wheels in $WHEELS did not install: $(tail -n 1 "$OUT/wheels.log")"
        status=1
    fi
fi
"$PYTHON" -c "import mamba_ssm, causal_conv1d; print('gpu_check: mamba_ssm', mamba_ssm.__version__, '| causal_conv1d', causal_conv1d.__version__)" 2>&1 | tail -n 1 | tee -a "$OUT/versions.txt"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET  # the gpu tests compile; the interpreted variants set it per test

ARCHIVE="${TRITON_CACHE_ARCHIVE:-.gpu/triton-cache.tar.xz}"
if [ -f "$ARCHIVE" ]; then
    export TRITON_CACHE_DIR="${TMPDIR:-/tmp}/seqssm-triton-cache"
    mkdir -p "$TRITON_CACHE_DIR"
    tar -xJf "$ARCHIVE" -C "$TRITON_CACHE_DIR" --strip-components=1
    say "Triton cache from $ARCHIVE: $(ls "$TRITON_CACHE_DIR" | wc -l) kernels"
fi

wanted() { [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $1 "* ]]; }

run() {  # name seconds command...: run with a time limit (capped by what is left of the budget), log to OUT
    local name=$1 limit=$2
    shift 2
    if ! wanted "$name"; then say "$name: not in STEPS"; return; fi
    local budget
    budget=$(left)
    [ "$limit" -gt "$budget" ] && limit=$budget
    if [ "$limit" -le 5 ]; then
        say "$name: skipped, the budget is spent"
        status=1
        return
    fi
    say "$name (at most ${limit}s)"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$OUT/$name.log"
    if [ "$rc" = 124 ]; then say "$name TIMED OUT after ${limit}s"; status=1
    elif [ "$rc" != 0 ]; then say "$name FAILED (exit $rc, log: $OUT/$name.log)"; status=1
    else say "$name passed"; fi
}

# The compile check runs on the CPU beside the GPU steps; its threads are the few left to it.
check_pid=
if wanted compile-check; then
    (timeout 300 "$PYTHON" -m seqssm.ops.triton_aot --tier quick >"$OUT/compile-check.log" 2>&1
     echo $? >"$OUT/compile-check.rc") &
    check_pid=$!
fi

xdist=()
"$PYTHON" -c "import xdist" 2>/dev/null && xdist=(-n 8)
run bench-scan 150 "$PYTHON" scripts/bench_scan.py --device cuda --repeats 5 --chunks --out "$OUT/bench_scan.json"
run gpu-tests 75 env SEQSSM_TRITON_AUTOTUNE=0 "$PYTHON" -m pytest -q -rs -p no:cacheprovider "${xdist[@]}" \
    -m "gpu and not slow" tests
run bench-models 150 "$PYTHON" scripts/bench_models.py --device cuda --rounds 2 --out "$OUT/bench_models"
run profile 60 "$PYTHON" scripts/bench_models.py --device cuda --profile --out "$OUT/profile"
run graph-breaks 40 "$PYTHON" scripts/bench_compile.py --device cuda --breaks-only --out "$OUT/graph_breaks"
run bench-compile 60 "$PYTHON" scripts/bench_compile.py --device cuda --families mamba-s6 --repeats 5 \
    --out "$OUT/bench_compile"
run bench-ssd 90 "$PYTHON" scripts/bench_ssd.py --device cuda --repeats 5 --warmup-max 6 --out "$OUT/bench_ssd.json"
[ -n "${TRITON_CACHE_DIR:-}" ] && say "Triton cache: $(ls "$TRITON_CACHE_DIR" | wc -l) kernels after the run"

if [ -z "$check_pid" ]; then
    say "compile-check: not in STEPS"
elif wait "$check_pid" && [ "$(cat "$OUT/compile-check.rc")" = 0 ]; then
    say "compile-check passed: $(tail -n 1 "$OUT/compile-check.log")"
else
    say "compile-check FAILED: $(tail -n 3 "$OUT/compile-check.log")"
    status=1
fi
if [ "$status" = 0 ]; then say "all checks passed"; else say "some checks failed: see above"; fi
exit "$status"

#!/usr/bin/env bash
# One command that checks a CUDA machine, from the repository root:
#
#     bash scripts/gpu_check.sh                 # PYTHON=/path/to/python to choose the interpreter
#
# 1. torch with CUDA: kept when the current one sees a GPU, else installed from the package index (whose
#    Linux wheels carry CUDA). Without an NVIDIA driver it stops at once: exit 2, nothing installed.
# 2. seqssm with its [test,triton] extras; if the index cannot be reached, the source tree is used as is.
# 3. The [cuda] extra (mamba-ssm, causal-conv1d), built the way they build: against the installed torch,
#    --no-build-isolation. When that cannot finish (no network beyond the package index, no nvcc), one
#    line says so and the check goes on without them; the benchmark then reports their targets unmeasured.
# 4. The GPU tests: first Triton's reverse scan and the selective gradients against the torch path
#    (tests/ops/test_triton_gpu.py), then every gpu-marked test.
# 5. The ahead-of-time compile check (python -m seqssm.ops.triton_aot) with this machine's triton.
# 6. The CUDA benchmark: runs/bench_scan_cuda.json and .md, each backend's failure recorded, targets judged.
#
# Every step runs; the exit status is 1 if any failed or a benchmark target was missed or unmeasured.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
LOGS=runs/gpu_check
mkdir -p "$LOGS"
status=0
say() { echo "gpu_check: $*"; }
last_line() { grep -v '^\s*$' "$1" | tail -n 1; }

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
        say "no NVIDIA GPU here (nvidia-smi finds no driver): nothing to check on this machine"
        exit 2
    fi
    say "torch does not see the GPU: installing torch with CUDA from the package index"
    if ! "$PYTHON" -m pip install -q --upgrade torch >"$LOGS/torch.log" 2>&1; then
        say "could not install torch with CUDA: $(last_line "$LOGS/torch.log")"
        exit 1
    fi
fi
"$PYTHON" -c "import torch; print(f'gpu_check: torch {torch.__version__} (CUDA {torch.version.cuda}) on', torch.cuda.get_device_name())"

if ! "$PYTHON" -m pip install -q -e ".[test,triton]" >"$LOGS/seqssm.log" 2>&1; then
    say "could not install seqssm's extras ($(last_line "$LOGS/seqssm.log")); testing the source tree with what is installed"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

if "$PYTHON" -c "import mamba_ssm, causal_conv1d" >/dev/null 2>&1; then
    say "the [cuda] extra is installed"
elif ! "$PYTHON" -m pip install -q --no-build-isolation "mamba-ssm>=2.0" "causal-conv1d>=1.2" >"$LOGS/cuda_extra.log" 2>&1; then
    say "the [cuda] extra did not build ($(last_line "$LOGS/cuda_extra.log")); going on without mamba-ssm and causal-conv1d"
fi

unset TRITON_INTERPRET  # the gpu tests compile; the interpreted variants set it per test
run() {
    local name=$1; shift
    say "$name"
    if ! "$@" 2>&1 | tee "$LOGS/$name.log"; then
        say "$name FAILED (log: $LOGS/$name.log)"
        status=1
    fi
}
run reverse-scan-and-gradients "$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/ops/test_triton_gpu.py -k "not past_2_31"
run gpu-tests "$PYTHON" -m pytest -q -rs -p no:cacheprovider -m gpu tests
run compile-check "$PYTHON" -m seqssm.ops.triton_aot --tier quick
run benchmark "$PYTHON" scripts/bench_scan.py --device cuda --out runs/bench_scan_cuda.json
if [ "$status" = 0 ]; then say "all checks passed"; else say "some checks failed: see above"; fi
exit "$status"

#!/usr/bin/env bash
# One command for a CUDA machine: install seqssm with its test and Triton extras into the current Python
# (which must already have a CUDA build of torch), run the GPU-marked tests (the Triton kernels compiled,
# and mamba_ssm where installed), then the CUDA benchmark, whose JSON lands in runs/bench_scan_cuda.json.
#
#     bash scripts/gpu_check.sh            # from the repository root
#     PYTHON=/path/to/python bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"

"$PYTHON" - <<'PY'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"gpu_check: torch {torch.__version__} sees no CUDA device; install a CUDA build of torch first")
print(f"gpu_check: torch {torch.__version__} on {torch.cuda.get_device_name()}")
PY
"$PYTHON" -m pip install -q -e ".[test,triton]"
# TRITON_INTERPRET must be unset so that the gpu variants compile; the interpreted ones set it per test.
unset TRITON_INTERPRET
"$PYTHON" -m pytest -q -m gpu -rs tests
mkdir -p runs
"$PYTHON" scripts/bench_scan.py --device cuda --out runs/bench_scan_cuda.json

#!/usr/bin/env bash
# Builds mamba_ssm's and causal_conv1d's CUDA extensions as wheels on a machine without a GPU, for a GPU
# machine that has no package index of its own (the lent H100 / H200: torch 2.11.0+cu130, Python 3.12):
#
#     bash scripts/build_cuda_peers.sh          # -> build/cuda-peers/wheels/*.whl, build/cuda-peers/build.json
#     bash scripts/build_cuda_peers.sh --strip-only   # strip the host debug sections of wheels built before
#
# Everything comes from the package index: torch at the GPU machine's version (its libraries, to link
# against), and the CUDA toolchain as wheels (nvcc, cicc, cccl, crt, runtime headers) of torch's CUDA
# version. Nothing prebuilt is downloaded (MAMBA_FORCE_BUILD / CAUSAL_CONV1D_FORCE_BUILD): both setup
# scripts otherwise fetch a wheel from GitHub. Their setup scripts list their own -gencode targets
# (sm_75 .. sm_121), which would build every kernel ten times over; the copy built here keeps only the
# targets in CUDA_ARCHS. The wheels stay out of git (build/ is ignored) and travel with the GPU check:
# `scripts/gpu_check.sh` installs build/cuda-peers/wheels/*.whl when that folder exists.
#
# Settings (environment): TORCH_VERSION (2.11.0), CUDA_VERSION (13.0, torch's), PYTHON_VERSION (3.12),
# CUDA_ARCHS ("90"), MAMBA_SSM_VERSION (2.3.2.post1), CAUSAL_CONV1D_VERSION (1.7.0), MAX_JOBS (nproc),
# OUT (build/cuda-peers).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION="${TORCH_VERSION:-2.11.0}"
CUDA_VERSION="${CUDA_VERSION:-13.0}"
PYTHON_VERSION="${PYTHON_VERSION:-3.12}"
CUDA_ARCHS="${CUDA_ARCHS:-90}"
MAMBA_SSM_VERSION="${MAMBA_SSM_VERSION:-2.3.2.post1}"
CAUSAL_CONV1D_VERSION="${CAUSAL_CONV1D_VERSION:-1.7.0}"
OUT="${OUT:-build/cuda-peers}"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
say() { echo "build_cuda_peers: $*"; }

python_bin=""
for candidate in "$HOME/.pyenv/versions/$PYTHON_VERSION"*/bin/python"$PYTHON_VERSION" "python$PYTHON_VERSION"; do
    # A pyenv shim is on PATH even where that version is not selected: ask each candidate to run.
    if "$candidate" -c "import venv" >/dev/null 2>&1; then python_bin=$(command -v "$candidate"); break; fi
done
if [ -z "$python_bin" ]; then
    say "no python$PYTHON_VERSION here: the extensions must be built for the GPU machine's Python; install it (pyenv install $PYTHON_VERSION) or set PYTHON_VERSION"
    exit 2
fi

mkdir -p "$OUT/src" "$OUT/wheels"
OUT=$(cd "$OUT" && pwd)
venv="$OUT/venv"
start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
    say "making a Python $PYTHON_VERSION environment with torch $TORCH_VERSION and the CUDA $CUDA_VERSION toolchain wheels"
    "$python_bin" -m venv "$venv"
fi
# torch with its CUDA libraries (the extensions link against libtorch_cuda and libcudart); the toolchain
# wheels pinned to torch's CUDA release, nvvm (cicc) included, which nvcc's wheel leaves unpinned.
"$venv/bin/pip" install -q "torch==$TORCH_VERSION" "nvidia-cuda-nvcc==$CUDA_VERSION.*" "nvidia-nvvm==$CUDA_VERSION.*" \
    "nvidia-cuda-cccl==$CUDA_VERSION.*" "nvidia-cuda-crt==$CUDA_VERSION.*" "nvidia-cuda-runtime==$CUDA_VERSION.*" \
    ninja packaging wheel setuptools numpy 2>&1 | grep -v '^WARNING: Location' || true
torch_cuda=$("$venv/bin/python" -c "import torch; print(torch.version.cuda)")
if [ "${torch_cuda%%.*}" != "${CUDA_VERSION%%.*}" ]; then
    say "torch $TORCH_VERSION is built for CUDA $torch_cuda, not $CUDA_VERSION: set CUDA_VERSION=$torch_cuda"
    exit 2
fi

# A CUDA_HOME laid out as torch.utils.cpp_extension expects (bin/nvcc, include, lib64/libcudart.so),
# made of links into the toolchain wheels.
cu=$("$venv/bin/python" -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu${CUDA_VERSION%%.*}'))")
cuda_home="$OUT/cuda"
rm -rf "$cuda_home"
mkdir -p "$cuda_home/lib64"
ln -s "$cu/bin" "$cuda_home/bin"
ln -s "$cu/include" "$cuda_home/include"
ln -s "$cu/nvvm" "$cuda_home/nvvm"
for lib in "$cu"/lib/*; do ln -s "$lib" "$cuda_home/lib64/"; done
ln -sf "$cu/lib/libcudart.so.${CUDA_VERSION%%.*}" "$cuda_home/lib64/libcudart.so"
export CUDA_HOME="$cuda_home" PATH="$cuda_home/bin:$venv/bin:$PATH"
export TORCH_CUDA_ARCH_LIST
TORCH_CUDA_ARCH_LIST=$(echo "$CUDA_ARCHS" | sed -E 's/([0-9]+)([0-9])/\1.\2/g')
"$cuda_home/bin/nvcc" --version | tail -n 1

# The sdists, by their index address (pip download would run their setup scripts, which import torch).
fetch_sdist() {  # name version -> path of the unpacked source
    local name=$1 version=$2 file url
    file="${name//-/_}-$version.tar.gz"
    if [ ! -f "$OUT/src/$file" ]; then
        url=$(curl -fsSL "https://pypi.org/simple/$name/" | grep -o "https://[^\"#]*/$file#sha256=[0-9a-f]*" | head -n 1)
        [ -n "$url" ] || { say "$file is not on the package index"; exit 1; }
        curl -fsSL -o "$OUT/src/$file" "${url%%#*}"
        echo "${url##*=}  $OUT/src/$file" | sha256sum -c --quiet
    fi
    rm -rf "$OUT/src/${file%.tar.gz}"
    tar -xzf "$OUT/src/$file" -C "$OUT/src"
    echo "$OUT/src/${file%.tar.gz}"
}

# Keep only the -gencode targets in CUDA_ARCHS: the setup scripts append theirs unconditionally.
keep_archs() {  # setup.py
    "$venv/bin/python" - "$1" "$CUDA_ARCHS" <<'EOF'
import re, sys
path, archs = sys.argv[1], sys.argv[2].split()
text = open(path).read()
pattern = re.compile(r'cc_flag\.append\("-gencode"\)\s*\n\s*cc_flag\.append\("arch=compute_(\d+),code=sm_\d+"\)')
found = pattern.findall(text)
if not found:
    sys.exit(f"{path}: no -gencode lines found; the setup script changed")
text = pattern.sub(lambda m: m.group(0) if m.group(1) in archs else "pass", text)
open(path, "w").write(text)
print(f"{path}: kept sm_{', sm_'.join(a for a in found if a in archs)} of sm_{', sm_'.join(found)}")
EOF
}

build() {  # name version force-variable
    local src
    src=$(fetch_sdist "$1" "$2")
    keep_archs "$src/setup.py"
    local t0
    t0=$(date +%s)
    say "building $1 $2 for sm_$CUDA_ARCHS with $MAX_JOBS jobs"
    (cd "$src" && env "$3=TRUE" "$venv/bin/pip" wheel -q --no-deps --no-build-isolation -w "$OUT/wheels" . \
        >"$OUT/$1.log" 2>&1) || { say "$1 failed: see $OUT/$1.log"; tail -n 20 "$OUT/$1.log"; exit 1; }
    say "$1 built in $(( $(date +%s) - t0 )) s"
}

# The host code's debug sections (a third of causal_conv1d's library) go: what a GPU session carries is capped
# at 64 MiB. `wheel pack` writes the RECORD of the stripped files.
strip_wheels() {
    local tmp whl
    tmp=$(mktemp -d)
    for whl in "$OUT"/wheels/*.whl; do
        "$venv/bin/python" -m wheel unpack -d "$tmp" "$whl" >/dev/null
        find "$tmp" -name '*.so' -exec strip --strip-debug {} +
        rm "$whl"
        "$venv/bin/python" -m wheel pack -d "$OUT/wheels" "$tmp"/* >/dev/null
        rm -rf "${tmp:?}"/*
    done
    rmdir "$tmp"
}

if [ "${1:-}" = "--strip-only" ]; then strip_wheels; exit 0; fi
rm -f "$OUT"/wheels/*.whl
build causal-conv1d "$CAUSAL_CONV1D_VERSION" CAUSAL_CONV1D_FORCE_BUILD
build mamba-ssm "$MAMBA_SSM_VERSION" MAMBA_FORCE_BUILD
strip_wheels

"$venv/bin/python" - "$OUT" "$(( $(date +%s) - start ))" "$TORCH_VERSION" "$torch_cuda" "$CUDA_ARCHS" "$PYTHON_VERSION" <<'EOF'
import glob, json, os, sys
out, seconds, torch_version, cuda, archs, python = sys.argv[1:]
wheels = {os.path.basename(p): os.path.getsize(p) for p in sorted(glob.glob(os.path.join(out, "wheels", "*.whl")))}
info = {"wheels_bytes": wheels, "build_seconds": int(seconds), "torch": torch_version, "cuda": cuda,
        "archs": archs.split(), "python": python, "max_jobs": int(os.environ["MAX_JOBS"])}
json.dump(info, open(os.path.join(out, "build.json"), "w"), indent=1)
for name, size in wheels.items():
    print(f"build_cuda_peers: {name}: {size / 2**20:.1f} MiB")
print(f"build_cuda_peers: {seconds} s in all -> {out}/wheels")
EOF

#!/usr/bin/env bash
# The GPU suite on a GPU machine without network (the `device` tool's H200: CUDA 13 driver, Python 3.12 with
# torch cu130, jax-cuda13, cupy-cuda13x, numba-cuda, triton), from the repository root, in one command:
#     bash tests/gpu/run.sh
# Carry .whl/: sparkfleet's wheel and every wheel it needs beside what the machine has, for its Python, made here
#     pip wheel --no-deps -w .whl . && pip download -d .whl --platform manylinux_2_28_x86_64 --python-version 3.12 \
#         --only-binary=:all: ansible-core ansible-runner rich pytest transformers==5.13.1 peft==0.19.1 \
#         torchao==0.17.0 accelerate trl==1.16.0 datasets==5.2.0 onnxruntime-gpu==1.31.1 cuda-python \
#         bitsandbytes==0.50.2 numba-cuda==0.30.4
# and .whl12/: a CUDA 12 build, to be failed by its probe and the ABI scan
#     pip download -d .whl12 --no-deps --platform manylinux2014_x86_64 --python-version 3.12 --only-binary=:all: \
#         cupy-cuda12x==14.2.0
# (trl and datasets: the smoke step runs through trl's trainer where trl is installed; every framework of
# FRAMEWORKS with a probe is then on the machine or carried)
# Everything it prints lands in $OUT/gpu-suite.log when OUT is set (the device tool's output folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$(mktemp -d)}"
site=/tmp/sparkfleet-site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl 2>&1 | tail -3
export PYTHONPATH="$site" PATH="$site/bin:$PATH" SPARKFLEET_GPU_PYTHON="$(command -v python3)"
if ls .whl12/*.whl >/dev/null 2>&1; then
    export SPARKFLEET_GPU_CUDA12_SITE=/tmp/sparkfleet-cuda12-site
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SPARKFLEET_GPU_CUDA12_SITE" .whl12/*.whl \
        2>&1 | tail -3
fi
{
    echo "== $(uname -m), $(python3 --version), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    python3 -m pytest -p no:cacheprovider -s -v tests/gpu/test_gpu.py
} 2>&1 | tee "$out/gpu-suite.log"

#!/usr/bin/env bash
# The GPU suite on a GPU machine without network (the `device` tool's H200: CUDA 13 driver, Python 3.12 with
# torch cu130, jax-cuda13, cupy-cuda13x, numba-cuda, triton), from the repository root, in one command:
#     bash tests/gpu/run.sh
# Carry .whl/: sparkfleet's wheel and every wheel it needs beside what the machine has (its image holds torch
# cu130, jax-cuda13, cupy-cuda13x, numba-cuda, triton, transformers, peft, accelerate, rich, pyyaml, jinja2,
# prometheus-client and pytest), for its Python, made here (the device tool takes 64 MiB in all):
#     pip wheel --no-deps -w .whl . && pip download -d .whl --no-deps --platform manylinux_2_28_x86_64 \
#         --platform manylinux_2_24_x86_64 --platform manylinux2014_x86_64 --python-version 3.12 \
#         --implementation cp --only-binary=:all: ansible-core==2.19.4 ansible-runner pexpect ptyprocess \
#         python-daemon lockfile resolvelib cryptography cffi pycparser shtab bitsandbytes==0.50.2
# and, where the size allows, .whl12/: a CUDA 12 build, to be failed by its probe and the ABI scan
#     pip download -d .whl12 --no-deps --platform manylinux2014_x86_64 --python-version 3.12 --only-binary=:all: \
#         cupy-cuda12x==14.2.0
# (onnxruntime-gpu, 256 MB, and cupy-cuda12x, 136 MB, are over the device tool's limit: the image's onnxruntime is
# its CPU build, which the suite expects to be failed as such; trl needs datasets, which the image lacks)
# Everything it prints lands in $OUT/gpu-suite.log when OUT is set (the device tool's output folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$(mktemp -d)}"
# Into the box's own Python (a venv there, /opt/torch/.venv), as an owner installs sparkfleet beside the
# frameworks: sparkfleet keeps PYTHONPATH out of the runs it starts, so a --target site would not reach Ansible.
python3 -m pip install -q --no-index --no-deps --no-compile .whl/*.whl 2>&1 | tail -3
export PATH="$(dirname "$(command -v python3)"):$PATH" SPARKFLEET_GPU_PYTHON="$(command -v python3)"
if ls .whl12/*.whl >/dev/null 2>&1; then
    export SPARKFLEET_GPU_CUDA12_SITE=/tmp/sparkfleet-cuda12-site
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SPARKFLEET_GPU_CUDA12_SITE" .whl12/*.whl \
        2>&1 | tail -3
fi
# What a real nvidia-smi answers to the questions sparkfleet's health metrics ask (temperature, clock-event
# reasons, memory), recorded for the stand-in nvidia-smi (testbed/doubles) to answer as it does; first, so that a suite cut
# off at its limit still brings them back.
{
    nvidia-smi --query-gpu=name,driver_version,temperature.gpu,clocks_event_reasons.active,memory.total,memory.used \
        --format=csv
    nvidia-smi --query-gpu=clocks_event_reasons.active,clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,clocks_event_reasons.sw_power_cap,temperature.gpu,temperature.memory --format=csv,noheader,nounits
    nvidia-smi --query-gpu=clocks_throttle_reasons.active --format=csv,noheader; echo "rc=$?"
    nvidia-smi --query-gpu=no.such.field --format=csv; echo "rc=$?"
} >"$out/nvidia-smi-query.txt" 2>&1
nvidia-smi -q -d PERFORMANCE,TEMPERATURE,MEMORY >"$out/nvidia-smi-q.txt" 2>&1
nvidia-smi --help-query-gpu >"$out/nvidia-smi-help-query-gpu.txt" 2>&1
nvidia-smi -q >"$out/nvidia-smi-q-all.txt" 2>&1
{
    echo "== $(uname -m), $(python3 --version), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    python3 -m pip list 2>/dev/null | grep -iE '^(torch|jax|cupy|numba|triton|cuda|onnxruntime|bitsandbytes|transformers|peft|accelerate|ansible) '
    python3 -m pytest -p no:cacheprovider -s -v tests/gpu/test_gpu.py
} 2>&1 | tee "$out/gpu-suite.log"

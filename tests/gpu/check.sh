#!/usr/bin/env bash
# The GPU machine check (the `device` tool: an x86_64 H200, CUDA 13, a real
# torch). Run from the repository root in one short command:
#     bash tests/gpu/check.sh
# It runs both modules against the real GPU and the real torch, natively
# (no Ansible controller setup beyond a venv; that machine reaches no index,
# so carry .cache/gpu-wheels made with `pip download -d .cache/gpu-wheels
# "ansible-core>=2.19,<2.20"`). Expected there: GPU
# verification ok with CUDA 13 and capability (9, 0) reported as "not a
# Spark"; the ABI scan of torch's site-packages clean for CUDA 13 (triton's private
# libcupti.so.12 listed as a bundle, not a finding); and the
# preflight classifying the box as not-spark (x86_64, H200).
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-$(command -v python3)}"
echo "== machine: $(uname -m), $("$py" --version), torch from: $("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>&1)"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader || true
work="$(mktemp -d)"
"$py" -m venv --system-site-packages "$work/venv" >/dev/null
if [ -d .cache/gpu-wheels ]; then  # that machine reaches no index: never wait on one
    "$work/venv/bin/pip" install -q --no-index --find-links .cache/gpu-wheels "ansible-core>=2.19,<2.20"
else
    "$work/venv/bin/pip" install -q "ansible-core>=2.19,<2.20"
fi
export ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_NOCOLOR=1 ANSIBLE_LOAD_CALLBACK_PLUGINS=1 \
    ANSIBLE_CALLBACKS_ENABLED=ansible.builtin.tree ANSIBLE_CALLBACK_TREE_DIR="$work/tree"
run() {  # run MODULE JSON-ARGS PYTHON-EXPRESSION-OVER-d
    rm -rf "$work/tree"
    local args=(); [ "$2" = "{}" ] || args=(-a "$2")  # 2.19 reads a bare '{}' as raw params
    "$work/venv/bin/ansible" localhost -c local -i localhost, -m "$1" "${args[@]}" \
        -e "ansible_python_interpreter=$work/venv/bin/python" >/dev/null 2>&1 || true
    "$work/venv/bin/python" -c "import json, sys; d = json.load(open('$work/tree/localhost')); print($3)"
}
echo "== spark_preflight_facts"
run spark_preflight_facts '{}' 'd.get("msg") or [d["ansible_facts"]["spark_preflight"][k] for k in ("platform", "gpus", "cuda_driver_version", "reasons")]'
echo "== spark_gpu_verify (python: $py, spark=false): expected ok, True 13.x, capability (9, 0) not a Spark"
run spark_gpu_verify "{\"python\": \"$py\", \"spark\": false, \"timeout\": 300}" \
    'd.get("msg") or json.dumps({k: d.get(k) for k in ("verdict", "line", "torch_version", "torch_cuda", "device", "notes", "hypothesis", "evidence")}, indent=1)'
echo "== spark_gpu_verify (spark=true): expected to refuse the H200 as not a Spark GPU"
run spark_gpu_verify "{\"python\": \"$py\", \"timeout\": 300}" 'd.get("msg") or (d["verdict"], d["hypothesis"], d["evidence"])'
echo "== spark_abi_scan (python: $py): expected ok for CUDA 13"
run spark_abi_scan "{\"python\": \"$py\"}" \
    'd.get("msg") or (d["verdict"], d["findings"], "scanned", d["shared_objects_scanned"], "unreadable", len(d["unreadable"]), "system cudart", d["system"]["cudart_majors"], [(x["name"], x["version"], x["cuda_majors"]) for x in d["distributions"]])'
rm -rf "$work"

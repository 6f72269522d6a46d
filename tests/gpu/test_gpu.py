"""The GPU suite: sparkfleet on a machine with a real NVIDIA GPU and a CUDA 13 driver, driven locally through the
CLI, as an owner runs it on a single box (tests/gpu/run.sh runs it there, without network). Skipped elsewhere.

What it proves there: `sparkfleet verify` says True 13.x of the box's Python truthfully, with every GPU framework
that Python holds probed by its own GPU operation (torch, jax, cupy, numba-cuda, triton, cuda-python: each ok);
`verify --smoke` trains the tiny Llama on the GPU and it learns (where transformers and peft are there);
CUDA_VISIBLE_DEVICES='' is diagnosed as device visibility, in the user's order.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The box's Python with its frameworks (torch cu130, jax-cuda13, ...): the one under test.
PYTHON = os.environ.get("SPARKFLEET_GPU_PYTHON") or shutil.which("python3") or sys.executable
SPARKFLEET = shutil.which("sparkfleet") or str(REPO / ".venv" / "bin" / "sparkfleet")


def _gpu() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30,
                              check=False).stdout.startswith("GPU ")
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _gpu(), reason="no NVIDIA GPU here (nvidia-smi -L lists none)")]


def verify(tmp_path: Path, *extra: str, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`sparkfleet verify` of this box, driven locally, from a directory of the user's own: its exit code and its
    one host's verification as report.json has it."""
    inventory = tmp_path / "inventory"
    inventory.mkdir(exist_ok=True)
    (inventory / "hosts.yml").write_text(json.dumps({"all": {"children": {"sparks": {"hosts": {"gpu-box": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "spark_preflight_require_spark": False, "spark_images_catalog": [],
        "spark_verify_pythons": [PYTHON]}}}}}}))
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}"
    proc = subprocess.run([SPARKFLEET, "verify", "-i", str(inventory), "--plain", "--report-dir", str(report), *extra],
                          cwd=tmp_path, capture_output=True, text=True, timeout=1500, check=False,
                          env={**os.environ, **env})
    sys.stdout.write(proc.stdout[-8000:] + proc.stderr[-2000:])  # the screen, for the suite's log
    (host,) = json.loads((report / "report.json").read_text())["hosts"].values()
    return proc, host["verification"]


def test_verify_says_true_13_and_every_framework_installed_is_ok(tmp_path):
    proc, verification = verify(tmp_path)
    (gpu,) = verification["gpu"]
    assert gpu["line"].startswith("True 13."), gpu
    assert (proc.returncode, verification["verdict"]) == (0, "ok"), verification["failures"]
    exercised = {f["name"]: f["verdict"] for f in gpu["frameworks"]}
    print("frameworks exercised:", exercised)
    assert exercised and set(exercised.values()) <= {"ok", "not exercised"}, exercised


def test_the_smoke_step_learns_on_the_gpu(tmp_path):
    if subprocess.run([PYTHON, "-c", "import transformers, peft"], capture_output=True, check=False).returncode:
        pytest.skip(f"{PYTHON} has no transformers and peft (tests/gpu/run.sh carries them)")
    proc, verification = verify(tmp_path, "--smoke")
    (smoke,) = verification["smoke"]
    print("smoke:", smoke)
    assert (smoke["verdict"], smoke["device"], smoke["gpu_verified"]) == ("ok", "cuda", True), verification
    assert smoke["last_loss"] < smoke["first_loss"] and smoke["peak_gpu_memory_mb"] > 0
    assert proc.returncode == 0, verification["failures"]


def test_an_empty_cuda_visible_devices_is_diagnosed_as_device_visibility(tmp_path):
    proc, verification = verify(tmp_path, CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 2
    assert any("device visibility" in line for line in verification["lines"]), verification["lines"]

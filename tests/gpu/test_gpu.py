"""The GPU suite: sparkfleet on a machine with a real NVIDIA GPU and a CUDA 13 driver, driven locally through the
CLI, as an owner runs it on a single box (tests/gpu/run.sh runs it there, without network). Skipped elsewhere.

What it proves there: `sparkfleet verify` says True 13.x of the box's Python truthfully, with every GPU framework
that Python holds probed by its own GPU operation (torch, jax, cupy, numba-cuda, triton, cuda-python, onnxruntime,
bitsandbytes: each ok with its value); a CUDA 12 build (cupy-cuda12x) fails by its probe and by the ABI scan;
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
sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (  # noqa: E402
    _program_gpu_probe,
    _program_probe_base,
    _program_probe_frameworks,
)

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


def cpu_builds() -> dict[str, str]:
    """The frameworks the box's Python holds only as their CPU build (the GPU machine's image has onnxruntime, not
    onnxruntime-gpu), by the probe's own table, with the sentence it says: what verify must fail, and nothing more."""
    listing = subprocess.run([PYTHON, "-c", "import json\nfrom importlib import metadata\nprint(json.dumps(sorted("
                              "'%s %s' % (d.metadata['Name'], d.version) for d in metadata.distributions() "
                              "if d.metadata['Name'])))"],
                             capture_output=True, text=True, timeout=120, check=True)
    import re
    names = [re.sub(r"[-_.]+", "-", d.split(" ", 1)[0]).lower() for d in json.loads(listing.stdout)]
    found = {}
    for framework in _program_probe_frameworks.FRAMEWORKS:
        dists = [n for n in names if re.match(framework.pattern, n)]
        sentence = framework.probe and dists and _program_gpu_probe.cpu_build(framework.name, dists)
        if sentence:
            found[framework.name] = sentence
    return found


def docker_answers() -> bool:
    return bool(shutil.which("docker")) and subprocess.run(["docker", "info"], capture_output=True, timeout=60,
                                                           check=False).returncode == 0


def assert_only_expected_failures(proc: subprocess.CompletedProcess, verification: dict, cpu_only: dict) -> None:
    """verify passes, or fails for what this machine truly lacks and nothing else: a framework there only as its CPU
    build, a release its numpy broke (the image's numba-cuda 0.30.4 beside numpy 2.5.2, seen 2026-12-06), each
    named with its fix, and Docker where it does not answer (the GPU machine has none: named as such, the GPU
    still proved)."""
    broken = [f["name"] for g in verification["gpu"] for f in g["frameworks"] if f.get("cause") == "numpy"]
    expected = [*cpu_only, *broken, *([] if docker_answers() else ["Docker did not answer"])]
    if not expected:
        assert (proc.returncode, verification["verdict"]) == (0, "ok"), verification["failures"]
        return
    assert (proc.returncode, verification["verdict"]) == (2, "failed"), verification
    failures = " | ".join(verification["failures"])
    for word in expected:
        assert word in failures, (word, failures)
    for failure in verification["failures"]:
        assert any(word in failure for word in expected), failure


def test_verify_says_true_13_and_every_framework_installed_is_ok_with_its_value(tmp_path):
    """Proves, not tolerates (issue 47): every framework with a probe that this Python holds ran its operation on
    the GPU and got this run's answer (the sum of the squares of the run's 64 values; bitsandbytes: a step of
    its learning rate along its gradient). A framework there only as its CPU build fails, named so, and it alone."""
    cpu_only = cpu_builds()
    proc, verification = verify(tmp_path)
    (gpu,) = verification["gpu"]
    assert gpu["line"].startswith("True 13."), gpu
    results = {f["name"]: f for f in gpu["frameworks"]}
    print("frameworks:", json.dumps(results, indent=1))
    print("CPU builds:", cpu_only, "failures:", verification["failures"])
    for name, sentence in cpu_only.items():
        assert (results[name]["verdict"], results[name]["cause"]) == ("failed", "cpu build"), results[name]
        assert results[name]["fix"].startswith(sentence), results[name]
    assert_only_expected_failures(proc, verification, cpu_only)
    probed = {f.name for f in _program_probe_frameworks.FRAMEWORKS if f.probe}
    installed = probed & set(results) - set(cpu_only)
    assert installed, "run.sh carries the table's frameworks: none was found"
    for name in sorted(installed):
        result = results[name]
        if result.get("cause") == "numpy":  # the image's own stack: named with the numpy to install, not proved
            assert result["fix"].startswith(f"{name} ") and "numpy<" in result["fix"], result
            continue
        assert result["verdict"] == "ok", result
        challenge = result["challenge"]  # this run's input, drawn by the module
        if name == "bitsandbytes":
            lr = _program_probe_base.bnb_lr(challenge)
            low, high = _program_probe_frameworks.BNB_MOVE
            assert low * lr <= result["moved"] <= high * lr
            expected = _program_probe_base.bnb_answer(challenge)
            assert abs(result["value"] - expected) <= abs(expected) * _program_probe_base.BNB_SPREAD, result
        else:
            assert result["value"] == _program_probe_base.squares(challenge), result
    if "jax" in installed and "peak_bytes" in results["jax"]:
        assert results["jax"]["peak_bytes"] < 2 ** 30, "jax ran without preallocating the GPU's memory"


def test_the_smoke_step_learns_on_the_gpu(tmp_path):
    if subprocess.run([PYTHON, "-c", "import transformers, peft"], capture_output=True, check=False).returncode:
        pytest.skip(f"{PYTHON} has no transformers and peft (tests/gpu/run.sh carries them)")
    proc, verification = verify(tmp_path, "--smoke")
    (smoke,) = verification["smoke"]
    print("smoke:", smoke)
    assert (smoke["verdict"], smoke["device"], smoke["gpu_verified"]) == ("ok", "cuda", True), verification
    assert smoke["last_loss"] < smoke["first_loss"] and smoke["peak_gpu_memory_mb"] > 0
    assert_only_expected_failures(proc, verification, cpu_builds())


def _module(name: str, args: dict) -> dict:
    """One of the collection's modules on this box, as `ansible localhost -m` runs it."""
    proc = subprocess.run(["ansible", "localhost", "-c", "local", "-m", f"sparkfleet.spark.{name}", "-a",
                           json.dumps(args), "-o"], capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"),
                               "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"})
    text = proc.stdout.split("=>", 1)[1] if "=>" in proc.stdout else "{}"
    return json.loads(text)


def test_a_cuda_12_build_fails_by_its_probe_and_by_the_abi_scan():
    """cupy-cuda12x on a CUDA 13 machine (run.sh installs it in a site of its own): its probe fails, naming the
    CUDA 12 build, and the ABI scan names its CUDA 12 libraries."""
    site = os.environ.get("SPARKFLEET_GPU_CUDA12_SITE")
    if not site or not Path(site).is_dir():
        pytest.skip("no CUDA 12 build carried (tests/gpu/run.sh installs cupy-cuda12x into SPARKFLEET_GPU_CUDA12_SITE)")
    result = _module("spark_gpu_verify", {"python": PYTHON, "spark": False, "environment": {"PYTHONPATH": site}})
    cupy = next(f for f in result["frameworks"]["results"] if f["name"] == "cupy")
    print("cupy-cuda12x:", cupy)
    assert cupy["verdict"] == "failed" and "CUDA 12 build" in (cupy["fix"] or ""), cupy
    scan = _module("spark_abi_scan", {"path": site})
    print("abi:", scan.get("findings"))
    assert scan["verdict"] == "mismatch" and any("cupy" in f for f in scan["findings"]), scan


def test_an_empty_cuda_visible_devices_is_diagnosed_as_device_visibility(tmp_path):
    proc, verification = verify(tmp_path, CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 2
    assert any("device visibility" in line for line in verification["lines"]), verification["lines"]
